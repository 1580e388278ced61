"""The reference pipeline: clicks per user in event-time windows, from a topic to Parquet.

    epochlog cluster up                                            # one terminal
    python -m epochlog.pipeline.reference generate --topic clicks   # another: feeds it
    python -m epochlog.pipeline.reference run --topic clicks --out ./clicks-per-user

`generate` writes click events (key: the user; value: JSON with the user and the page; the
record's timestamp is the click's event time) at --rate per second, idempotent with acks=all.
`run` is a Structured Streaming query on the "epochlog" source: it counts clicks per user in
--window-seconds tumbling windows of event time, with a watermark of --late-seconds (later
clicks are dropped, and a window is written once the watermark passes its end), and appends
the counts to Parquet under --out with its checkpoint in --out/_checkpoint, so a restart goes on
exactly where it stopped. Each micro-batch prints one line: rows read, rows/s, and the lag
(records not yet read) of each partition.

It is a plain Structured Streaming job rather than a Spark Declarative Pipelines project
(`spark-pipelines`): those run over Spark Connect, which needs PySpark's connect extras (gRPC)
and a Connect server on top of this, for the same query. The copyable part is `clicks_per_user`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from epochlog.bootstrap import choose
from epochlog.client import Admin, NewTopic, Producer

BOOTSTRAP_HELP = ("HOST:PORT[,HOST:PORT]; by default, as every epochlog tool: "
                  "EPOCHLOG_BOOTSTRAP_SERVERS, else the cluster `epochlog cluster up` runs from "
                  "this folder, else 127.0.0.1:9092")


def clicks_per_user(spark: Any, bootstrap: str, topic: str, window_seconds: int,
                    late_seconds: int, max_per_trigger: int) -> Any:
    """The streaming DataFrame: (window_start, window_end, user, clicks)."""
    from pyspark.sql import functions as F

    clicks = (spark.readStream.format("epochlog")
              .option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", max_per_trigger)
              .load())
    return (clicks
            .select(F.col("key").cast("string").alias("user"), "timestamp")
            .withWatermark("timestamp", f"{late_seconds} seconds")
            .groupBy(F.window("timestamp", f"{window_seconds} seconds"), "user")
            .count()
            .select(F.col("window.start").alias("window_start"),
                    F.col("window.end").alias("window_end"), "user",
                    F.col("count").alias("clicks")))


def progress_line(progress: dict[str, Any]) -> str:
    """`batch N: R rows, X rows/s, lag clicks-0: 12, clicks-1: 0` from a query's progress."""
    source = progress["sources"][0] if progress.get("sources") else {}
    lag = []
    end, latest = _offsets(source.get("endOffset")), _offsets(source.get("latestOffset"))
    for topic in sorted(latest):
        for partition in sorted(latest[topic], key=int):
            read = end.get(topic, {}).get(partition, {}).get("offset", 0)
            lag.append(f"{topic}-{partition}: {latest[topic][partition]['offset'] - read}")
    rate = progress.get("processedRowsPerSecond") or 0.0
    return (f"batch {progress.get('batchId')}: {progress.get('numInputRows', 0):,} rows, "
            f"{rate:,.0f} rows/s, lag {', '.join(lag) or 'unknown'}")


def _offsets(value: Any) -> dict[str, Any]:
    if not value:
        return {}
    return json.loads(value) if isinstance(value, str) else dict(value)


class _Interrupts(logging.Filter):
    """Ctrl-C as one line. A terminal's Ctrl-C reaches the whole process group: the JVM ignores
    it (PySpark starts it so), but Spark's Python workers die of it, and PySpark's own SIGINT
    handler calls the JVM from inside the handler, so py4j logs a traceback through the root
    logger for each call that then fails. So this handler only raises KeyboardInterrupt, the
    stop that follows is best effort, and after it py4j's records and the JVM's stderr are
    dropped."""

    def __init__(self) -> None:
        super().__init__()
        self.interrupted = False

    def install(self) -> None:
        """After the session is built: PySpark installs its handler when the context starts."""
        signal.signal(signal.SIGINT, self._on_sigint)
        root = logging.getLogger()
        if not root.handlers:
            logging.basicConfig()  # what py4j's first logging.exception() would do
        for handler in root.handlers:
            handler.addFilter(self)

    def launch_jvm(self, master: str) -> None:
        """Spark's JVM, with its stderr (and its Python workers') passed on through this
        process until Ctrl-C: those workers die of the same SIGINT and Spark logs the failed
        tasks while it stops, which is not news. The session then reuses this JVM."""
        from pyspark import SparkContext
        from pyspark.java_gateway import launch_gateway

        if master.startswith("local"):
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # as pipeline.session()
        gateway = launch_gateway(  # type: ignore[no-untyped-call]
            popen_kwargs={"stderr": subprocess.PIPE})
        threading.Thread(target=self._forward, args=(gateway.proc.stderr,), daemon=True,
                         name="jvm-stderr").start()
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm

    def _forward(self, stream: IO[bytes]) -> None:
        for line in stream:
            if not self.interrupted:
                sys.stderr.buffer.write(line)
                sys.stderr.flush()

    def _on_sigint(self, signum: int, frame: Any) -> None:
        if self.interrupted:
            return  # already stopping
        self.interrupted = True
        raise KeyboardInterrupt

    def filter(self, record: logging.LogRecord) -> bool:
        return not (self.interrupted and "py4j" in record.pathname)


def run(args: argparse.Namespace) -> None:
    """The streaming query, until it fails or Ctrl-C (KeyboardInterrupt, once the query is
    stopped as far as the JVM still allows)."""
    from pyspark.sql.streaming.listener import StreamingQueryListener

    from epochlog.pipeline import session

    interrupts = _Interrupts()
    interrupts.launch_jvm(args.master)
    spark = session(args.master, "epochlog-reference-pipeline",
                    **{"spark.sql.shuffle.partitions": "2"})
    interrupts.install()
    spark.sparkContext.setLogLevel("ERROR")

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            print(f"started query {event.id}; Ctrl-C stops it", flush=True)

        def onQueryProgress(self, event: Any) -> None:
            print(progress_line(json.loads(event.progress.json)), flush=True)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            print(f"query ended{': ' + event.exception if event.exception else ''}",
                  flush=True)

    spark.streams.addListener(Progress())
    counts = clicks_per_user(spark, args.bootstrap, args.topic, args.window_seconds,
                             args.late_seconds, args.max_per_trigger)
    query = (counts.writeStream.format("parquet").outputMode("append")
             .option("path", args.out).option("checkpointLocation", args.out + "/_checkpoint")
             .trigger(processingTime=f"{args.trigger_seconds} seconds").start())
    try:
        query.awaitTermination()
    finally:
        _stop(query.stop, interrupts)
        _stop(spark.stop, interrupts)


def _stop(stop: Any, interrupts: _Interrupts) -> None:
    """stop(); after Ctrl-C the JVM may already be gone, and that is no error to show."""
    try:
        stop()
    except Exception:
        if not interrupts.interrupted:
            raise


async def generate(args: argparse.Namespace) -> None:
    async with Admin(args.bootstrap) as admin:
        if args.topic not in await admin.list_topics():
            await admin.create_topics([NewTopic(args.topic, num_partitions=args.partitions,
                                                replication_factor=args.replication_factor)])
    rng = random.Random(args.seed)
    users = [f"user{i:03d}" for i in range(args.users)]
    pages = ["/", "/search", "/cart", "/checkout", "/help"]
    sent = 0
    async with Producer(args.bootstrap, acks="all", enable_idempotence=True) as producer:
        started = time.monotonic()
        while args.count is None or sent < args.count:
            user = rng.choice(users)
            now_ms = int(time.time() * 1000)
            await producer.send(args.topic, key=user.encode(), timestamp_ms=now_ms,
                                value=json.dumps({"user": user, "page": rng.choice(pages)})
                                .encode())
            sent += 1
            if sent % args.rate == 0:
                await producer.flush()
                print(f"{sent:,} clicks sent", flush=True)
                ahead = sent / args.rate - (time.monotonic() - started)
                if ahead > 0:
                    await asyncio.sleep(ahead)
        await producer.flush()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m epochlog.pipeline.reference",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    gen = commands.add_parser("generate", help="write click events to the topic")
    gen.add_argument("--bootstrap", "--bootstrap-server", default=None, help=BOOTSTRAP_HELP)
    gen.add_argument("--topic", default="clicks")
    gen.add_argument("--rate", type=int, default=1000, help="clicks per second")
    gen.add_argument("--count", type=int, default=None, help="stop after this many")
    gen.add_argument("--users", type=int, default=50)
    gen.add_argument("--partitions", type=int, default=3)
    gen.add_argument("--replication-factor", type=int, default=3)
    gen.add_argument("--seed", type=int, default=0)
    go = commands.add_parser("run", help="the streaming query: clicks per user to Parquet")
    go.add_argument("--bootstrap", "--bootstrap-server", default=None, help=BOOTSTRAP_HELP)
    go.add_argument("--topic", default="clicks")
    go.add_argument("--out", default="./clicks-per-user")
    go.add_argument("--master", default="local[2]")
    go.add_argument("--window-seconds", type=int, default=10)
    go.add_argument("--late-seconds", type=int, default=30)
    go.add_argument("--trigger-seconds", type=int, default=5)
    go.add_argument("--max-per-trigger", type=int, default=200_000)
    args = parser.parse_args(argv)
    chosen = choose(args.bootstrap, os.environ, Path.cwd())  # the CLI tools' own choice
    if chosen.note is not None:
        print(chosen.note, file=sys.stderr, flush=True)
    args.bootstrap = chosen.servers
    if args.command == "generate":
        if args.rate < 1:
            parser.error("--rate must be at least 1")
        try:
            asyncio.run(generate(args))
        except KeyboardInterrupt:
            pass
    else:
        try:
            run(args)
        except KeyboardInterrupt:
            print(f"interrupted: the query stopped; run again to go on from its checkpoint "
                  f"({args.out}/_checkpoint)", file=sys.stderr, flush=True)
            raise SystemExit(130) from None


if __name__ == "__main__":
    main(sys.argv[1:])
