"""Spark read and write through the "epochlog" source and sink, beside the plain client (issue 13).

    python bench/spark.py [--records 1000000] [--value-bytes 100] [--partitions 2]
                          [--master local[2]] [--rounds 2]

One broker (a real child process, data in a temp dir) holds one topic of --partitions
partitions, filled with --records records (a 10-byte key, a --value-bytes value) by the plain
Producer. Then, in the same run:

- read, yardstick: a plain Consumer loop (assign, poll until every record came) that builds each
  record as the client's ConsumerRecord: the rows a Python program gets without Spark;
- read, Spark: `spark.read.format("epochlog")...load()` into `.count()`, and into Parquet
  (`.write.parquet`, overwrite) — each record decoded once, straight into Arrow columns;
- write, yardstick: a plain Producer loop (`await producer.send(...)` per record, idempotent,
  acks=all, then flush) of the same records;
- write, Spark: a DataFrame of the same rows (built by Spark from a range) written with
  `.write.format("epochlog")` (idempotent, acks=all).
- stream, Spark: a streaming query (trigger availableNow, micro-batches of --records / 4) reading
  the topic through the source and writing it to another through the sink, at-least-once (the
  yardstick of this pair) and with deliveryGuarantee=exactly-once (a transaction per task per
  micro-batch). Goal (issue 31): exactly-once >= 0.5x at-least-once.

- read, Spark's own ceiling: a Python source that yields the same number of rows as ready-made
  Arrow batches in the same schema, with no cluster behind it: what Spark itself costs.

Rows/s is records over wall time; each Spark figure is the best of --rounds runs (the first
also pays the Python workers' start). The goal (issue 13): the Spark read at >= 0.8x the plain
loop on local[2]. The broker, the client or Spark's JVM and its Python workers share this
machine's 2 cores, so compare the ratios of one run; the load average is printed before and
after, because other work on the machine moves every figure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

LINGER_MS = 5
BATCH_BYTES = 256 * 1024
WAIT_S = 600.0


def fill(bootstrap: str, topic: str, records: int, value: bytes) -> float:
    """The plain Producer writing every record: rows/s (the write yardstick)."""
    import uvloop

    from epochlog.client import Producer

    async def run() -> float:
        async with Producer(bootstrap, acks="all", enable_idempotence=True,
                            linger_ms=LINGER_MS, batch_size=BATCH_BYTES) as p:
            started = time.perf_counter()
            for i in range(records):
                await p.send(topic, value=value, key=b"key%07d" % (i % 10_000_000))
            await p.flush()
            return records / (time.perf_counter() - started)
    return uvloop.run(run())


def plain_read(bootstrap: str, topic: str, partitions: int, records: int) -> float:
    """The plain Consumer loop: rows/s."""
    import uvloop

    from epochlog.client import Consumer, TopicPartition

    async def run() -> float:
        async with Consumer(bootstrap, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, p) for p in range(partitions)])
            started = time.perf_counter()
            got = 0
            size = 0
            deadline = time.monotonic() + WAIT_S
            while got < records:
                batch = await c.poll(timeout_ms=1000, max_records=10_000)
                got += len(batch)
                size += sum(len(r.value or b"") for r in batch)  # touch every row
                if time.monotonic() > deadline:
                    raise TimeoutError(f"read {got} of {records}")
            return got / (time.perf_counter() - started)
    return uvloop.run(run())


def ceiling_source(records: int, partitions: int) -> Any:
    """A DataSource yielding `records` rows of ready-made Arrow batches, split over partitions."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

    from epochlog.pipeline.schema import source_schema

    class Reader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(i) for i in range(partitions)]

        def read(self, partition: InputPartition) -> Any:
            import numpy as np
            import pyarrow as pa

            from epochlog.pipeline.schema import arrow_schema
            rows = 37_000  # about what one 4 MiB poll of 100 B records decodes to
            cols = [pa.array([b"key0000001"] * rows, pa.binary()),
                    pa.array([bytes(100)] * rows, pa.binary()), pa.array(["bench"] * rows),
                    pa.array(np.zeros(rows, np.int32)), pa.array(np.arange(rows)),
                    pa.array(np.zeros(rows, np.int64), pa.timestamp("us", tz="UTC")),
                    pa.array(np.zeros(rows, np.int32)), pa.array(np.zeros(rows, np.int32))]
            batch = pa.RecordBatch.from_arrays(cols, schema=arrow_schema(False))
            left = records // partitions
            while left > 0:
                yield batch.slice(0, min(rows, left))
                left -= rows

    class Ceiling(DataSource):
        @classmethod
        def name(cls) -> str:
            return "epochlog-bench-ceiling"

        def schema(self) -> Any:
            return source_schema(False)

        def reader(self, schema: Any) -> Reader:
            return Reader()

    return Ceiling


def stream_copy(spark: Any, bootstrap: str, topic: str, out: str, records: int,
                guarantee: str, checkpoint: str) -> None:
    """topic -> out as a streaming query of a few micro-batches, until it has read everything."""
    query = (spark.readStream.format("epochlog").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", max(1, records // 4)).load()
             .selectExpr("key", "value").writeStream.format("epochlog")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", out)
             .option("deliveryGuarantee", guarantee).option("kafka.linger.ms", str(LINGER_MS))
             .option("kafka.batch.size", str(BATCH_BYTES))
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()


def best(rounds: int, run: Any) -> float:
    return max(run() for _ in range(rounds))


def timed_rate(records: int, action: Any) -> float:
    started = time.perf_counter()
    action()
    return records / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    from epochlog.testing import Cluster

    value = bytes(args.value_bytes)
    root = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    print(f"load average before: {os.getloadavg()[0]:.2f} (2 cores)", flush=True)
    try:
        with Cluster(1, base_dir=root / "cluster") as cluster:
            topic, out_topic = "bench", "bench-out"
            cluster.create_topic(topic, args.partitions, 1)
            cluster.create_topic(out_topic, args.partitions, 1)
            produce_rate = fill(cluster.bootstrap_servers, topic, args.records, value)
            read_rate = best(args.rounds, lambda: plain_read(
                cluster.bootstrap_servers, topic, args.partitions, args.records))

            from epochlog import pipeline
            spark = pipeline.session(args.master, "epochlog-bench", **{
                "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
            spark.sparkContext.setLogLevel("ERROR")
            try:
                def source() -> Any:
                    return (spark.read.format("epochlog")
                            .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
                            .option("subscribe", topic).load())

                def count() -> None:
                    assert source().count() == args.records

                count_rate = best(args.rounds, lambda: timed_rate(args.records, count))
                spark.dataSource.register(ceiling_source(args.records, args.partitions))
                ceiling_rate = best(args.rounds, lambda: timed_rate(
                    args.records, lambda: spark.read.format("epochlog-bench-ceiling").load()
                    .count()))
                parquet = str(root / "parquet")
                parquet_rate = best(args.rounds, lambda: timed_rate(
                    args.records, lambda: source().write.mode("overwrite").parquet(parquet)))
                rows = spark.range(args.records).selectExpr(
                    "CAST(format_string('key%07d', id % 10000000) AS BINARY) AS key",
                    f"unhex(repeat('00', {args.value_bytes})) AS value").cache()
                assert rows.count() == args.records  # built before the clock starts
                write_rate = best(args.rounds, lambda: timed_rate(
                    args.records, lambda: rows.write.format("epochlog")
                    .option("kafka.bootstrap.servers", cluster.bootstrap_servers)
                    .option("topic", out_topic).option("kafka.linger.ms", str(LINGER_MS))
                    .option("kafka.batch.size", str(BATCH_BYTES)).save()))
                runs = iter(range(1_000))

                def copy(guarantee: str) -> float:
                    checkpoint = str(root / f"checkpoint-{next(runs)}")  # a new query each time
                    return timed_rate(args.records, lambda: stream_copy(
                        spark, cluster.bootstrap_servers, topic, out_topic, args.records,
                        guarantee, checkpoint))

                at_least_once_rate = best(args.rounds, lambda: copy("at-least-once"))
                exactly_once_rate = best(args.rounds, lambda: copy("exactly-once"))
            finally:
                spark.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    print(f"{args.records:,} records of {args.value_bytes} B in {args.partitions} partitions, "
          f"Spark master {args.master}")
    print(f"{'what':46} {'rows/s':>12} {'vs yardstick':>13}")
    print(f"{'read: plain Consumer loop (yardstick)':46} {read_rate:>12,.0f} {'1.00x':>13}")
    print(f"{'read: Spark load() -> count()':46} {count_rate:>12,.0f} "
          f"{count_rate / read_rate:>12.2f}x")
    print(f"{'read: Spark ceiling, ready Arrow -> count()':46} {ceiling_rate:>12,.0f} "
          f"{ceiling_rate / read_rate:>12.2f}x")
    print(f"{'read: Spark load() -> Parquet':46} {parquet_rate:>12,.0f} "
          f"{parquet_rate / read_rate:>12.2f}x")
    print(f"{'write: plain Producer loop (yardstick)':46} {produce_rate:>12,.0f} {'1.00x':>13}")
    print(f"{'write: Spark write.format(epochlog)':46} {write_rate:>12,.0f} "
          f"{write_rate / produce_rate:>12.2f}x")
    print(f"{'stream: source -> sink, at-least-once (yardstick)':46} "
          f"{at_least_once_rate:>12,.0f} {'1.00x':>13}")
    print(f"{'stream: source -> sink, exactly-once':46} {exactly_once_rate:>12,.0f} "
          f"{exactly_once_rate / at_least_once_rate:>12.2f}x")
    print("goals: Spark read >= 0.8x the plain loop on local[2]; exactly-once >= 0.5x "
          "at-least-once")


if __name__ == "__main__":
    main()
