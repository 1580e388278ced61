"""The "epochlog" source and sink on real Spark (local[2]) against three real brokers.

What is checked, and why:
- a batch read equals what a plain Consumer reads from the same topic, field by field (key,
  value, headers, timestamp and its type, offset, partition, leader epoch), whole and from JSON
  offsets with epochs, split for minPartitions;
- every bad option fails load() or save() with a message naming it, before any job runs;
- a streaming query writes Parquet with a checkpoint, capped by maxOffsetsPerTrigger, and a
  restart from the checkpoint reads on from there: every record exactly once;
- kafka.client.rack makes executors read the follower in that rack (KIP-392): the follower's
  own metrics count the bytes it served;
- the writer, batch and streaming, writes every row (key, value, headers, partition) once.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from epochlog.client import Consumer, TopicPartition
from epochlog.client.types import ConsumerRecord
from tests.broker.cluster import WAIT_S, Cluster
from tests.pipeline.conftest import produce


def consume_all(bootstrap: str, topic: str, partitions: int) -> list[ConsumerRecord]:
    """Every record of the topic, by a plain Consumer (the yardstick)."""
    async def go() -> list[ConsumerRecord]:
        async with Consumer(bootstrap, auto_offset_reset="earliest") as c:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            c.assign(tps)
            ends = {}
            for tp in tps:
                c.seek_to_end(tp)
                ends[tp] = await c.position(tp)
                c.seek_to_beginning(tp)
            got: list[ConsumerRecord] = []
            deadline = asyncio.get_running_loop().time() + WAIT_S
            while sum(1 for _ in got) < sum(ends.values()):
                assert asyncio.get_running_loop().time() < deadline, (len(got), ends)
                got += await c.poll(timeout_ms=500)
            return got
    return asyncio.run(go())


def source(spark: Any, cluster: Cluster, streaming: bool = False, **options: Any) -> Any:
    reader = spark.readStream if streaming else spark.read
    reader = reader.format("epochlog").option("kafka.bootstrap.servers", cluster.bootstrap)
    for name, value in options.items():
        reader = reader.option(name, str(value))
    return reader


def test_batch_read_equals_a_plain_consumer(spark: Any, cluster: Cluster) -> None:
    topic = "orders"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    produce(cluster.bootstrap, topic, [
        (None if i % 11 == 0 else b"k%d" % (i % 17), None if i % 97 == 0 else b"v%d-" % i +
         bytes(i % 300), [("n", b"%d" % i), ("empty", None)] if i % 4 == 0 else [])
        for i in range(3000)], compression_type="lz4")
    produce(cluster.bootstrap, topic, [(b"k", b"plain%d" % i, []) for i in range(600)])
    expected = consume_all(cluster.bootstrap, topic, 3)
    assert len(expected) == 3600

    df = source(spark, cluster, subscribe=topic, includeHeaders="true", minPartitions=6).load()
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>,"
        "leaderEpoch:int>")
    assert df.rdd.getNumPartitions() >= 6
    rows = df.collect()
    got = sorted((r.partition, r.offset, r.key, r.value, [(h.key, h.value) for h in r.headers],
                  round(r.timestamp.timestamp() * 1000), r.timestampType, r.leaderEpoch, r.topic)
                 for r in rows)
    want = sorted((r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp,
                   r.timestamp_type, r.leader_epoch, r.topic) for r in expected)
    assert got == want

    # From JSON offsets with an epoch (validated on the executor) to JSON ends
    epoch = next(r.leader_epoch for r in expected if r.partition == 1)
    part = source(spark, cluster, assign=f'{{"{topic}": [1]}}',
                  startingOffsets=f'{{"{topic}": {{"1": {{"offset": 10, "epoch": {epoch}}}}}}}',
                  endingOffsets=f'{{"{topic}": {{"1": 25}}}}').load()
    assert [r.offset for r in part.orderBy("offset").collect()] == list(range(10, 25))


def jobs(spark: Any) -> list[int]:
    return list(spark.sparkContext.statusTracker().getJobIdsForGroup())


@pytest.mark.parametrize(("options", "message"), [
    ({"subscribe": "orders", "subscribePatern": "o.*"}, "unknown option 'subscribepatern'"),
    ({"subscribe": "orders", "assign": '{"orders": [0]}'}, "exactly one of the options assign"),
    ({"subscribe": "orders", "maxOffsetsPerTrigger": "10"},
     "maxOffsetsPerTrigger applies to streaming (readStream) queries only"),
    ({"subscribe": "orders", "kafka.group.id": "g"}, "kafka.group.id is not supported"),
    ({"subscribePattern": "nosuchtopic-ever", "startingOffsets": '{"orders": {"0": 1}}'},
     "startingOffsets names partitions the query does not read: orders-0"),
    ({"assign": '{"orders": [7]}'}, "assign names partitions that do not exist: orders-7"),
])
def test_bad_read_options_fail_before_any_job(spark: Any, cluster: Cluster,
                                              options: dict[str, str], message: str) -> None:
    before = jobs(spark)
    with pytest.raises(Exception) as caught:  # Spark wraps the source's ValueError
        source(spark, cluster, **options).load().collect()
    assert message in str(caught.value)
    assert jobs(spark) == before


def test_batch_read_of_a_missing_topic_fails_naming_it_and_of_nothing_is_empty(
        spark: Any, cluster: Cluster) -> None:
    """As Spark's Kafka source (Admin offset fetching, its default since 3.4): `subscribe` of a
    topic that does not exist fails planning (there with Kafka's UnknownTopicOrPartition; here
    naming the topic), while a pattern matching no topic, or a topic with no records, reads as
    an empty DataFrame. PySpark hands read() a placeholder partition when none was planned."""
    cluster.create_topic("empty", partitions=2, replication_factor=3)
    before = jobs(spark)
    with pytest.raises(Exception) as caught:
        source(spark, cluster, subscribe="empty,nosuch-a,nosuch-b").load().collect()
    assert "option subscribe names topics that do not exist: nosuch-a, nosuch-b" in str(
        caught.value)
    assert "AssertionError" not in str(caught.value)
    assert jobs(spark) == before
    assert source(spark, cluster, subscribePattern="nosuch.*").load().collect() == []
    assert source(spark, cluster, subscribe="empty").load().count() == 0


@pytest.mark.parametrize(("streaming", "options", "message"), [
    (True, {"endingOffsets": "latest"},
     "option endingOffsets applies to batch (read) queries only"),
    (False, {"maxOffsetsPerTrigger": "10"},
     "option maxOffsetsPerTrigger applies to streaming (readStream) queries only"),
])
def test_an_option_for_the_other_kind_of_query_fails_load(spark: Any, cluster: Cluster,
                                                          streaming: bool,
                                                          options: dict[str, str],
                                                          message: str) -> None:
    """Spark asks a Python source only its schema at load(), alike for read and readStream:
    the driver-side check at load() is what names the misplaced option there, with our message
    alone (before, a stream got as far as start() and failed with PySpark's UnboundLocalError
    after ours)."""
    with pytest.raises(ValueError) as caught:
        source(spark, cluster, streaming, subscribe="orders", **options).load()
    assert str(caught.value) == message
    # load()'s own format= and options too
    with pytest.raises(ValueError, match=re.escape(message)):
        reader = spark.readStream if streaming else spark.read
        reader.load(format="epochlog", subscribe="orders",
                    **{"kafka.bootstrap.servers": cluster.bootstrap}, **options)


def test_bad_stream_options_and_sink_schemas_fail_before_any_job(spark: Any, cluster: Cluster,
                                                                 tmp_path: Path) -> None:
    before = jobs(spark)
    with pytest.raises(Exception, match="endingOffsets applies to batch"):
        source(spark, cluster, True, subscribe="orders", endingOffsets="latest").load() \
            .writeStream.format("console").start().awaitTermination(30)
    df = spark.createDataFrame([(b"k", 1)], "key binary, n int")
    with pytest.raises(Exception, match="the epochlog sink needs a value column"):
        df.write.format("epochlog").option("kafka.bootstrap.servers", cluster.bootstrap) \
            .option("topic", "out").save()
    df = spark.createDataFrame([(1,)], "value int")
    with pytest.raises(Exception, match="column value is int; the epochlog sink takes binary "
                                        "or string"):
        df.write.format("epochlog").option("kafka.bootstrap.servers", cluster.bootstrap) \
            .option("topic", "out").save()
    with pytest.raises(Exception, match="kafka.acks=1 contradicts"):
        spark.createDataFrame([(b"v",)], "value binary").write.format("epochlog") \
            .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", "out") \
            .option("kafka.acks", "1").save()
    assert jobs(spark) == before


def run_available_now(df: Any, out: Path, checkpoint: Path) -> list[dict[str, Any]]:
    query = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(120), "the query did not finish"
    if query.exception() is not None:
        raise AssertionError(str(query.exception()))
    return list(query.recentProgress)


def test_stream_to_parquet_capped_and_restarted_from_its_checkpoint(
        spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    topic = "clicks"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    produce(cluster.bootstrap, topic, [(b"u%d" % (i % 5), b"c%d" % i, []) for i in range(500)])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream = source(spark, cluster, True, subscribe=topic, startingOffsets="earliest",
                    maxOffsetsPerTrigger=120).load().selectExpr(
        "CAST(value AS STRING) AS value", "partition", "offset", "leaderEpoch")
    progress = run_available_now(stream, out, checkpoint)
    rows = [p["numInputRows"] for p in progress if p["numInputRows"]]
    assert sum(rows) == 500 and max(rows) <= 120 and len(rows) >= 5, rows
    # the checkpointed end offsets carry leader epochs
    ends = progress[-1]["sources"][0]["endOffset"]
    ends = ends if isinstance(ends, dict) else __import__("json").loads(ends)
    assert {p: v["offset"] for p, v in ends[topic].items()} == {"0": 250, "1": 250} or \
        sum(v["offset"] for v in ends[topic].values()) == 500
    assert all(v["epoch"] >= 0 for v in ends[topic].values())

    produce(cluster.bootstrap, topic, [(b"u", b"c%d" % i, []) for i in range(500, 800)])
    run_available_now(stream, out, checkpoint)  # a new run of the query, same checkpoint
    written = spark.read.parquet(str(out)).collect()
    assert sorted(int(r.value[1:]) for r in written) == list(range(800))
    assert len({(r.partition, r.offset) for r in written}) == 800


def follower_bytes(cluster: Cluster, broker_id: int) -> float:
    port = cluster.metrics_ports[broker_id]  # type: ignore[attr-defined]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("epochlog_broker_follower_fetch_bytes_total "):
                return float(line.split()[1])
    raise AssertionError("no epochlog_broker_follower_fetch_bytes_total metric")


def test_client_rack_reads_from_the_follower_in_that_rack(spark: Any, cluster: Cluster) -> None:
    topic = "near"
    cluster.create_topic(topic, partitions=1, replication_factor=3)
    leader, _ = cluster.leaders(topic)[0]
    follower = next(i for i in cluster.brokers if i != leader)
    produce(cluster.bootstrap, topic, [(None, bytes(500), []) for _ in range(2000)])
    consume_all(cluster.bootstrap, topic, 1)  # everything committed, so followers have it all
    before = {i: follower_bytes(cluster, i) for i in cluster.brokers}
    df = source(spark, cluster, subscribe=topic,
                **{"kafka.client.rack": cluster.broker(follower).rack}).load()
    assert df.count() == 2000
    served = {i: follower_bytes(cluster, i) - before[i] for i in cluster.brokers}
    assert served[follower] >= 2000 * 500, served
    assert served[leader] == 0, served


def test_writer_batch_and_streaming(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    rows = [(f"k{i % 7}", b"w%d" % i, i % 3, [("n", b"%d" % i)] if i % 2 else [])
            for i in range(900)]
    cluster.create_topic("written", partitions=3, replication_factor=3)
    df = spark.createDataFrame(rows, "key string, value binary, partition int, "
                                     "headers array<struct<key: string, value: binary>>")
    df.write.format("epochlog").option("kafka.bootstrap.servers", cluster.bootstrap) \
        .option("topic", "written").save()
    got = consume_all(cluster.bootstrap, "written", 3)
    assert sorted((r.key, r.value, r.partition, r.headers) for r in got) == sorted(
        (k.encode(), v, p, h) for k, v, p, h in rows)

    # streaming: written -> copied, through Spark, with a checkpoint
    cluster.create_topic("copied", partitions=2, replication_factor=3)
    copy = source(spark, cluster, True, subscribe="written", startingOffsets="earliest",
                  includeHeaders="true").load().selectExpr("key", "value", "headers")
    query = (copy.writeStream.format("epochlog")
             .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", "copied")
             .option("checkpointLocation", str(tmp_path / "copy-checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    copied = consume_all(cluster.bootstrap, "copied", 2)
    assert sorted((r.key, r.value, r.headers) for r in copied) == sorted(
        (k.encode(), v, h) for k, v, _, h in rows)


def test_reference_pipeline_counts_clicks_per_user_and_window(spark: Any, cluster: Cluster,
                                                              tmp_path: Path) -> None:
    """pipeline.reference's query (docs/spark.md, "The reference pipeline"): counts per user in
    event-time windows, written once the watermark passes them; and its progress line."""
    from epochlog.pipeline.reference import clicks_per_user, generate, progress_line

    asyncio.run(generate(argparse.Namespace(
        bootstrap=cluster.bootstrap, topic="generated", partitions=2, replication_factor=3,
        seed=1, users=3, count=300, rate=100_000)))
    generated = consume_all(cluster.bootstrap, "generated", 2)
    assert len(generated) == 300 and {r.key for r in generated} == {b"user000", b"user001",
                                                                    b"user002"}
    topic = "ref-clicks"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    t0 = 1_700_000_000_000  # events at known times: 3 windows of 10 s, then one far later

    async def timed() -> None:
        from epochlog.client import Producer
        async with Producer(cluster.bootstrap, acks="all") as p:
            for i in range(30):
                await p.send(topic, key=b"alice", value=b"{}", timestamp_ms=t0 + i * 1000)
            await p.send(topic, key=b"bob", value=b"{}", timestamp_ms=t0 + 5000)
            await p.send(topic, key=b"late", value=b"{}", timestamp_ms=t0 + 600_000)
            await p.flush()
    asyncio.run(timed())
    counts = clicks_per_user(spark, cluster.bootstrap, topic, 10, 30, 1000)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    for _ in range(2):  # the second run's first batch moves the watermark past the windows
        query = (counts.writeStream.format("parquet").outputMode("append")
                 .option("path", str(out)).option("checkpointLocation", str(checkpoint))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(120) and query.exception() is None
        progress = query.recentProgress
    got = {(r.user, int(r.window_start.timestamp())): r.clicks
           for r in spark.read.parquet(str(out)).collect() if r.user in ("alice", "bob")}
    start = t0 // 1000 // 10 * 10
    assert got == {("alice", start): 10, ("alice", start + 10): 10, ("alice", start + 20): 10,
                   ("bob", start): 1}
    line = progress_line({"batchId": 3, "numInputRows": 1200, "processedRowsPerSecond": 345.6,
                          "sources": [{"endOffset": {topic: {"0": {"offset": 5, "epoch": 0}}},
                                       "latestOffset": {topic: {"0": {"offset": 9, "epoch": 0}}}
                                       }]})
    assert line == "batch 3: 1,200 rows, 346 rows/s, lag ref-clicks-0: 4"
    assert progress  # the query reported progress


def test_the_docs_example_runs(spark: Any, cluster: Cluster) -> None:
    """The Spark example of docs/spark.md (the README shows it too), as written (the session it
    builds is this run's: one SparkContext per process), against this cluster."""
    from tests.docs import doc_example

    code = doc_example("spark.md", "# Spark").replace("127.0.0.1:9092", cluster.bootstrap)
    cluster.create_topic("readme-in", partitions=1, replication_factor=3)
    produce(cluster.bootstrap, "readme-in", [(b"k%d" % i, b"v%d" % i, []) for i in range(50)])
    code = code.replace('"orders"', '"readme-in"').replace('"out"', '"readme-out"')
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/spark.md", "exec"), scope)
    assert scope["stream"].isStreaming and scope["batch"].count() == 50
    assert sorted(r.value for r in consume_all(cluster.bootstrap, "readme-out", 1)) == sorted(
        b"v%d" % i for i in range(50))
