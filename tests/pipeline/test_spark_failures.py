"""The source under failures, on real Spark and real brokers: what it must never do is lose or
repeat a record silently.

- A broker SIGKILLed mid-stream (a partition leader under an idempotent acks=all producer),
  and the query itself stopped and restarted from its checkpoint: the Parquet sink holds every
  record exactly once.
- An unclean election truncates records the query had read, and the log grows back past the
  checkpointed offset. failOnDataLoss=true fails the query naming the partition, the
  checkpointed offset and epoch, the divergence offset and how to recover; following that
  advice (failOnDataLoss=false) resumes from the exact divergence point and reads the new
  records there. Spark's own Kafka source compares offsets only: the checkpoint (15) is below
  the log end (20), so it would have read on from 15 without a word, losing the new records at
  5..14 and never saying that 5..14 of what it had read are gone.
- Retention-deleted offsets, partitions added and topics deleted mid-stream behave as Spark's
  Kafka source documents (failOnDataLoss both ways).
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochlog.client import Admin, Producer, TopicPartition
from epochlog.pipeline.partition_reader import ReaderSettings, read_range
from epochlog.pipeline.planning import OffsetRange
from tests.broker.cluster import WAIT_S, Cluster
from tests.client.test_truncation import BROKER_ARGS, CONTROLLER_ARGS, wait_leader, write
from tests.pipeline.conftest import produce, racked_cluster

RETENTION_ARGS = ["--set", "log_retention_check_interval_ms=200"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = racked_cluster(tmp_path_factory.mktemp("spark-failures"))
    for b in c.brokers.values():
        b.extra += RETENTION_ARGS
    with c:
        yield c


def reader(spark: Any, bootstrap: str, **options: Any) -> Any:
    r = spark.readStream.format("epochlog").option("kafka.bootstrap.servers", bootstrap)
    for name, value in options.items():
        r = r.option(name, str(value))
    return r.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS value",
                               "leaderEpoch")


def run_once(df: Any, out: Path, checkpoint: Path) -> Any:
    """The query with trigger availableNow; its exception, or None."""
    query = (df.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    try:
        query.awaitTermination(180)
    except Exception as exc:  # the query failed: Spark raises it here
        return exc
    assert not query.isActive, "the query did not finish in 180 s"
    return query.exception()


def parquet_rows(spark: Any, out: Path) -> list[tuple[int, int, str]]:
    return sorted((r.partition, r.offset, r.value) for r in spark.read.parquet(str(out)).collect())


# ------------------------------------------------------------------------ broker killed
class PacedProducer:
    """An idempotent acks=all producer in a thread, sending `total` records paced over
    `seconds`; records every acknowledged value."""

    def __init__(self, bootstrap: str, topic: str, total: int, seconds: float) -> None:
        self.acked: list[str] = []
        self.errors: list[BaseException] = []
        self.thread = threading.Thread(target=asyncio.run, args=(self._run(
            bootstrap, topic, total, seconds),), daemon=True)

    async def _run(self, bootstrap: str, topic: str, total: int, seconds: float) -> None:
        async with Producer(bootstrap, acks="all", enable_idempotence=True,
                            request_timeout_ms=10_000, delivery_timeout_ms=60_000) as p:
            futures = []
            for i in range(total):
                futures.append((f"r{i}", await p.send(topic, value=b"r%d" % i)))
                if i % 100 == 99:
                    await asyncio.sleep(seconds * 100 / total)
            for value, f in futures:
                try:
                    await f
                    self.acked.append(value)
                except Exception as exc:  # reported by the test
                    self.errors.append(exc)


def test_broker_killed_mid_stream_and_query_restarted_exactly_once(
        spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    topic = "survive"
    cluster.create_topic(topic, partitions=3, replication_factor=3,
                         **{"min.insync.replicas": "2"})
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    df = reader(spark, cluster.bootstrap, subscribe=topic, startingOffsets="earliest",
                maxOffsetsPerTrigger=2000)
    producer = PacedProducer(cluster.bootstrap, topic, total=12_000, seconds=12)
    producer.thread.start()

    def start() -> Any:
        return (df.writeStream.format("parquet").option("path", str(out))
                .option("checkpointLocation", str(checkpoint))
                .trigger(processingTime="500 milliseconds").start())

    def wait_rows(query: Any, rows: int) -> None:
        deadline = time.monotonic() + 120
        while sum(p["numInputRows"] for p in query.recentProgress) < rows:
            assert query.exception() is None, query.exception()
            assert time.monotonic() < deadline, f"fewer than {rows} rows in 120 s"
            time.sleep(0.2)

    query = start()
    try:
        wait_rows(query, 1000)
        victim, _ = cluster.leaders(topic)[0]
        cluster.broker(victim).stop(signal.SIGKILL)  # a leader, mid-stream
        wait_rows(query, 4000)
        query.stop()  # the query stopped mid-stream, then run again from its checkpoint
        cluster.broker(victim).start()
        cluster.broker(victim).wait_started()
        query = start()
        wait_rows(query, 1000)
    finally:
        query.stop()
    producer.thread.join(90)
    assert not producer.errors, producer.errors[:3]
    assert len(producer.acked) == 12_000
    assert run_once(df, out, checkpoint) is None  # the rest, up to the end
    rows = parquet_rows(spark, out)
    assert len({(p, o) for p, o, _ in rows}) == len(rows), "a record was written twice"
    assert sorted(v for _, _, v in rows) == sorted(producer.acked)


# ------------------------------------------------------------------------ truncation
def test_unclean_election_truncates_and_regrows_past_the_checkpoint(
        spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    topic = "unclean"
    with Cluster(tmp_path / "cluster", brokers=2, controller_args=CONTROLLER_ARGS,
                 broker_args=BROKER_ARGS) as cluster:
        cluster.create_topic(topic, partitions=1, replication_factor=2,
                             **{"unclean.leader.election.enable": "true",
                                "min.insync.replicas": "1"})
        leader, epoch0 = cluster.leaders(topic)[0]
        follower = 3 - leader
        write(cluster.broker(leader), topic, [b"both%d" % i for i in range(5)])  # acks=all
        assert cluster.broker(follower).stop() == 0  # leaves the ISR
        write(cluster.broker(leader), topic, [b"lost%d" % i for i in range(10)], acks=1)
        _, epoch_read = cluster.leaders(topic)[0]
        queries = {fail: (tmp_path / f"out-{fail}", tmp_path / f"checkpoint-{fail}")
                   for fail in ("true", "false")}
        for fail, (out, checkpoint) in queries.items():
            df = reader(spark, cluster.bootstrap, subscribe=topic, startingOffsets="earliest",
                        failOnDataLoss=fail)
            assert run_once(df, out, checkpoint) is None
            assert [o for _, o, _ in parquet_rows(spark, out)] == list(range(15))

        cluster.broker(leader).stop(signal.SIGKILL)
        cluster.broker(follower).start()
        cluster.broker(follower).wait_started()
        new_leader, epoch2 = wait_leader(cluster, topic, follower)
        assert new_leader == follower and epoch2 > epoch_read
        # the log (now 0..4) grows back past the checkpointed offset 15
        write(cluster.broker(follower), topic, [b"new%d" % i for i in range(15)], acks=1)

        out, checkpoint = queries["true"]
        failed = run_once(reader(spark, cluster.bootstrap, subscribe=topic,
                                 failOnDataLoss="true"), out, checkpoint)
        assert failed is not None, "the query read past a truncation"
        message = str(failed)
        assert (f"{topic}-0: the log was truncated below the checkpointed position: offset 15 "
                f"(leader epoch {epoch_read}) is past the leader's log, which diverges from "
                f"what this query read at offset 5 (leader epoch {epoch0})") in message, message
        assert "restart the query with failOnDataLoss=false to resume from the divergence " \
               "point, offset 5" in message
        assert f'startingOffsets={{"{topic}": {{"0": {{"offset": 5, "epoch": {epoch0}}}}}}}' \
            in message
        assert [o for _, o, _ in parquet_rows(spark, out)] == list(range(15))  # nothing more

        # failOnDataLoss=false: the other query; then the failed one, restarted as advised
        for fail in ("false", "true"):
            out, checkpoint = queries[fail]
            assert run_once(reader(spark, cluster.bootstrap, subscribe=topic,
                                   failOnDataLoss="false"), out, checkpoint) is None
            rows = parquet_rows(spark, out)
            old = [(0, o, f"both{o}") for o in range(5)] + [(0, o, f"lost{o - 5}")
                                                            for o in range(5, 15)]
            new = [(0, o, f"new{o - 5}") for o in range(5, 20)]
            assert rows == sorted(old + new)  # every new record, from the divergence point

        # The executor's count of the lost range, which Spark's workers log to the JVM's
        # stderr: the same read, in this process
        caplog.set_level(logging.WARNING, "epochlog.pipeline")
        settings = ReaderSettings(consumer={"bootstrap_servers": cluster.bootstrap},
                                  fail_on_data_loss=False)
        batches = list(read_range(settings, OffsetRange(TopicPartition(topic, 0), 15, 20,
                                                        epoch_read)))
        assert [v.decode() for b in batches for v in b.column("value").to_pylist()] == [
            f"new{i}" for i in range(15)]
        assert (f"{topic}-0: log truncated: 10 records read before at offsets 5..14 are no "
                "longer in the log") in caplog.text
        # and the range's summary names those offsets, not the range planned (15..19)
        assert (f"{topic}-0: 10 records lost in all, at offsets 5..14 (failOnDataLoss=false)"
                in caplog.text), caplog.text


# ------------------------------------------------------------------------ Spark's cases
def test_retention_deleted_offsets_fail_or_are_skipped(spark: Any, cluster: Cluster,
                                                       caplog: pytest.LogCaptureFixture
                                                       ) -> None:
    topic = "retained"
    cluster.create_topic(topic, partitions=1, replication_factor=3,
                         **{"segment.bytes": "2048", "retention.bytes": "4096"})
    for _ in range(4):
        produce(cluster.bootstrap, topic, [(None, bytes(200), []) for _ in range(20)])

    async def earliest() -> int:
        async with Admin(cluster.bootstrap) as admin:
            got = await admin.list_offsets({TopicPartition(topic, 0): "earliest"})
            return next(iter(got.values())).offset

    deadline = time.monotonic() + WAIT_S
    while (start := asyncio.run(earliest())) == 0:
        assert time.monotonic() < deadline, "retention deleted nothing"
        time.sleep(0.2)

    def read(fail: str) -> Any:
        return (spark.read.format("epochlog").option("kafka.bootstrap.servers", cluster.bootstrap)
                .option("subscribe", topic).option("failOnDataLoss", fail)
                .option("startingOffsets", json.dumps({topic: {"0": 0}})).load())

    with pytest.raises(Exception, match=f"{topic}-0: some data may have been lost: offsets "
                                        r"0\.\.\d+ are no longer in the log"):
        read("true").collect()
    offsets = sorted(r.offset for r in read("false").collect())
    assert offsets and offsets[0] >= start and offsets == list(range(offsets[0], 80))

    # The executor's warnings (Spark's workers log them to the JVM's stderr), from the same
    # read in this process: they name the offsets lost, not the range planned (0..79)
    caplog.set_level(logging.WARNING, "epochlog.pipeline")
    settings = ReaderSettings(consumer={"bootstrap_servers": cluster.bootstrap},
                              fail_on_data_loss=False)
    batches = list(read_range(settings, OffsetRange(TopicPartition(topic, 0), 0, 80)))
    first = batches[0].column("offset")[0].as_py()
    assert first >= start and sum(b.num_rows for b in batches) == 80 - first
    assert (f"{topic}-0: {first} records lost in all, at offsets 0..{first - 1} "
            "(failOnDataLoss=false)") in caplog.text, caplog.text


def test_partitions_added_and_topics_deleted_mid_stream(spark: Any, cluster: Cluster,
                                                        tmp_path: Path) -> None:
    cluster.create_topic("grows", partitions=1, replication_factor=3)
    cluster.create_topic("goes", partitions=1, replication_factor=3)
    produce(cluster.bootstrap, "grows", [(None, b"g%d" % i, []) for i in range(10)])
    produce(cluster.bootstrap, "goes", [(None, b"x%d" % i, []) for i in range(10)])
    runs = {fail: (tmp_path / f"out-{fail}", tmp_path / f"checkpoint-{fail}")
            for fail in ("true", "false")}

    def df(fail: str) -> Any:
        return reader(spark, cluster.bootstrap, subscribePattern="g(rows|oes)",
                      startingOffsets="earliest", failOnDataLoss=fail)

    for fail, (out, checkpoint) in runs.items():
        assert run_once(df(fail), out, checkpoint) is None
        assert len(parquet_rows(spark, out)) == 20

    async def change() -> None:
        async with Admin(cluster.bootstrap) as admin:
            await admin.create_partitions({"grows": 2})
            await admin.delete_topics(["goes"])
    asyncio.run(change())
    produce(cluster.bootstrap, "grows", [(None, b"n%d" % i, []) for i in range(6)], partition=1)

    out, checkpoint = runs["true"]
    failed = run_once(df("true"), out, checkpoint)
    assert failed is not None and "partitions goes-0 are gone" in str(failed), failed
    out, checkpoint = runs["false"]
    assert run_once(df("false"), out, checkpoint) is None
    added = [v for p, _, v in parquet_rows(spark, out) if p == 1]
    assert sorted(added) == sorted(f"n{i}" for i in range(6))  # the new partition, from 0
