"""Client throughput: epochlog's client vs aiokafka, kafka-python and confluent-kafka (issue 6).

    python bench/clients.py [--records 500000] [--sizes 100,1024] [--acks 1,all]
                            [--clients epochlog,aiokafka,kafka-python,confluent]
                            [--directions produce,consume]
                            [--epochlog-partition-fetch-bytes N]

One epochlog broker (a real child process, data in a temp dir) serves every run, so the clients
are compared against the same broker in the same run. For each record size and acks setting,
each client produces --records records to a topic of its own (1 partition, created first) with
the same batching settings (linger 5 ms, batch size 256 KiB, no compression, idempotence off
where the client has it, so that acks=1 and acks=all mean the same for all), then flushes;
records/s is the count over the time from the first send to the last acknowledgement. The
producers are driven the way their users write it: epochlog and aiokafka by a loop of
`await producer.send(...)` (which queues and returns a future), kafka-python by `send()`,
confluent-kafka by `produce()`. The
consume half (when present) reads the same topics back.

Goal (issue 6): this client at >= 1.5x aiokafka, >= 3x kafka-python, >= 0.3x confluent-kafka.
The producer and the broker share this machine's 2 cores, so figures vary from run to run:
compare the ratios of one run. Each line also gives the run's elapsed seconds and the CPU seconds
the client (this process) and the broker (from /proc) spent in it: a side whose CPU is close to
the elapsed time is the bottleneck; both well below it means they wait on each other (round
trips). For consuming, that is how the client's former ceiling was found: one Fetch in flight,
sent only after poll() had decoded the previous answer, so broker and client took turns.

Layout: one function per client per direction, `produce_<client>(bootstrap, topic, records,
value, acks) -> acknowledged count` and `consume_<client>(...)`, registered in PRODUCERS and
CONSUMERS; main() runs the matrix and prints the table.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

LINGER_MS = 5
BATCH_BYTES = 256 * 1024
WAIT_S = 300.0  # bound on one run's flush
GOALS = {"aiokafka": 1.5, "kafka-python": 3.0, "confluent": 0.3}


# ------------------------------------------------------------------------------- producers
def produce_epochlog(bootstrap: str, topic: str, records: int, value: bytes, acks: str) -> int:
    import uvloop

    from epochlog.client import Producer

    async def run() -> int:
        async with Producer(bootstrap, acks=acks if acks == "all" else int(acks),
                            enable_idempotence=False, linger_ms=LINGER_MS,
                            batch_size=BATCH_BYTES, buffer_memory=64 * 1024 * 1024) as producer:
            send = producer.send  # the loop every Kafka client's users write
            last = None
            for _ in range(records):
                last = await send(topic, value)
            await producer.flush()
            assert last is not None and last.result().offset >= 0
            return producer.records_sent

    return uvloop.run(run())


def produce_aiokafka(bootstrap: str, topic: str, records: int, value: bytes, acks: str) -> int:
    import uvloop
    from aiokafka import AIOKafkaProducer

    async def run() -> int:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap,
                                    acks="all" if acks == "all" else int(acks),
                                    enable_idempotence=False, linger_ms=LINGER_MS,
                                    max_batch_size=BATCH_BYTES)
        await producer.start()
        try:
            send = producer.send
            futures = [await send(topic, value) for _ in range(records)]
            await producer.flush()
            return sum(1 for f in futures if f.done() and f.exception() is None)
        finally:
            await producer.stop()

    return uvloop.run(run())


def produce_kafka_python(bootstrap: str, topic: str, records: int, value: bytes,
                         acks: str) -> int:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap,
                             acks="all" if acks == "all" else int(acks), linger_ms=LINGER_MS,
                             batch_size=BATCH_BYTES)
    try:
        send = producer.send
        futures = [send(topic, value) for _ in range(records)]
        producer.flush(WAIT_S)
        return sum(1 for f in futures if f.succeeded())
    finally:
        producer.close()


def produce_confluent(bootstrap: str, topic: str, records: int, value: bytes, acks: str) -> int:
    import confluent_kafka

    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "enable.idempotence": False,
        "linger.ms": LINGER_MS, "batch.size": BATCH_BYTES,
        "queue.buffering.max.messages": 1_000_000})
    acked = [0]

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked[0] += 1

    produce = producer.produce
    for _ in range(records):
        while True:
            try:
                produce(topic, value, on_delivery=on_delivery)
                break
            except BufferError:  # its queue is full: let deliveries drain it
                producer.poll(0.005)
    producer.flush(WAIT_S)
    return acked[0]


Runner = Callable[[str, str, int, bytes, str], int]
PRODUCERS: dict[str, Runner] = {
    "epochlog": produce_epochlog, "aiokafka": produce_aiokafka,
    "kafka-python": produce_kafka_python, "confluent": produce_confluent}
# The consume half registers consume_<client> functions here, same signature, returning the
# number of records read (the value argument gives the expected record size).
CONSUMERS: dict[str, Runner] = {}


# ------------------------------------------------------------------------------- consumers
# Each reads partition 0 of topic from the start until `records` records came, touching every
# value (its length summed), in batches of up to POLL_RECORDS where the client takes a bound.
# Fetch settings are each client's defaults: 1 MiB per partition per fetch for the others,
# 4 MiB for epochlog's (see client/consumer.py; --epochlog-partition-fetch-bytes to change).
POLL_RECORDS = 10_000
EPOCHLOG_CONSUMER_SETTINGS: dict[str, Any] = {}  # set from the command line


def consume_epochlog(bootstrap: str, topic: str, records: int, value: bytes, acks: str) -> int:
    import uvloop

    from epochlog.client import Consumer, TopicPartition

    async def run() -> int:
        async with Consumer(bootstrap, auto_offset_reset="earliest",
                            **EPOCHLOG_CONSUMER_SETTINGS) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            count = size = 0
            deadline = time.monotonic() + WAIT_S
            while count < records and time.monotonic() < deadline:
                batch = await consumer.poll(timeout_ms=1000, max_records=POLL_RECORDS)
                count += len(batch)
                for record in batch:
                    size += len(record.value or b"")
            assert size == count * len(value), (size, count)
            return count

    return uvloop.run(run())


def consume_aiokafka(bootstrap: str, topic: str, records: int, value: bytes, acks: str) -> int:
    import uvloop
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            count = size = 0
            deadline = time.monotonic() + WAIT_S
            while count < records and time.monotonic() < deadline:
                got = await consumer.getmany(tp, timeout_ms=1000, max_records=POLL_RECORDS)
                for batch in got.values():
                    count += len(batch)
                    for record in batch:
                        size += len(record.value or b"")
            assert size == count * len(value), (size, count)
            return count
        finally:
            await consumer.stop()

    return uvloop.run(run())


def consume_kafka_python(bootstrap: str, topic: str, records: int, value: bytes,
                         acks: str) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, 0)])
        count = size = 0
        deadline = time.monotonic() + WAIT_S
        while count < records and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=1000, max_records=POLL_RECORDS).values():
                count += len(batch)
                for record in batch:
                    size += len(record.value or b"")
        assert size == count * len(value), (size, count)
        return count
    finally:
        consumer.close()


def consume_confluent(bootstrap: str, topic: str, records: int, value: bytes, acks: str) -> int:
    import confluent_kafka

    consumer = confluent_kafka.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"bench-{topic}",
        "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0,
                                                        confluent_kafka.OFFSET_BEGINNING)])
        count = size = 0
        deadline = time.monotonic() + WAIT_S
        while count < records and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=POLL_RECORDS, timeout=1.0):
                if msg.error() is None:
                    count += 1
                    size += len(msg.value() or b"")
        assert size == count * len(value), (size, count)
        return count
    finally:
        consumer.close()


CONSUMERS.update({"epochlog": consume_epochlog, "aiokafka": consume_aiokafka,
                  "kafka-python": consume_kafka_python, "confluent": consume_confluent})


# ------------------------------------------------------------------------------------ main
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process has used, from /proc; 0 where there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


class Run:
    """One client's run: records/s, and the CPU seconds the client (this process, all its
    threads) and the broker spent on it: which side is busy, and whether either is saturated
    (CPU seconds close to the elapsed time) or both wait on each other (both well below)."""

    def __init__(self, rate: float, elapsed: float, client_cpu: float, broker_cpu: float) -> None:
        self.rate, self.elapsed = rate, elapsed
        self.client_cpu, self.broker_cpu = client_cpu, broker_cpu


def measure(runner: Runner, bootstrap: str, topic: str, records: int, value: bytes,
            acks: str, broker_pid: int = 0) -> Run:
    broker_before = process_cpu_s(broker_pid)
    cpu_before = time.process_time()
    start = time.perf_counter()
    done = runner(bootstrap, topic, records, value, acks)
    elapsed = time.perf_counter() - start
    client_cpu = time.process_time() - cpu_before
    broker_cpu = process_cpu_s(broker_pid) - broker_before
    if done != records:
        raise RuntimeError(f"{runner.__name__}: {done} of {records} records done")
    return Run(records / elapsed, elapsed, client_cpu, broker_cpu)


def report(direction: str, runs: dict[tuple[int, str], dict[str, Run]]) -> None:
    for (size, acks), by_client in runs.items():
        print(f"{direction}: {size} B records, acks={acks}    (elapsed s; CPU s: client, broker)")
        ours = by_client["epochlog"].rate if "epochlog" in by_client else None
        for client, run in by_client.items():
            rate = run.rate
            line = (f"  {client:<14} {rate:>11,.0f} records/s {rate * size / 1e6:8.1f} MB/s"
                    f"  {run.elapsed:5.2f} s; {run.client_cpu:5.2f} {run.broker_cpu:5.2f}")
            if ours is not None and client != "epochlog":
                ratio = ours / rate
                goal = GOALS.get(client)
                line += f"   epochlog = {ratio:5.2f}x" + (
                    f" (goal >= {goal:g}x: {'met' if ratio >= goal else 'MISSED'})"
                    if goal else "")
            print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--sizes", default="100,1024", help="record value sizes in bytes")
    parser.add_argument("--acks", default="1,all")
    parser.add_argument("--clients", default=",".join(PRODUCERS))
    parser.add_argument("--directions", default="produce,consume")
    parser.add_argument("--dir", default=None, help="where to put data (default: a temp dir)")
    parser.add_argument("--epochlog-partition-fetch-bytes", type=int, default=None,
                        help="epochlog consumer's max_partition_fetch_bytes (default: its own "
                             "default; 1048576 compares like for like with the others)")
    args = parser.parse_args()
    if args.epochlog_partition_fetch_bytes is not None:
        EPOCHLOG_CONSUMER_SETTINGS["max_partition_fetch_bytes"] = \
            args.epochlog_partition_fetch_bytes
    from epochlog.testing import Cluster

    clients = args.clients.split(",")
    directions = args.directions.split(",")
    root = Path(tempfile.mkdtemp(prefix="bench_clients_", dir=args.dir))
    try:
        with Cluster(1, base_dir=root / "cluster") as cluster:
            broker_pid = cluster.brokers[1].pid
            bootstrap = cluster.bootstrap_servers
            produced: dict[tuple[int, str], dict[str, Run]] = {}
            consumed: dict[tuple[int, str], dict[str, Run]] = {}
            for size in map(int, args.sizes.split(",")):
                value = os.urandom(size)
                for acks in args.acks.split(","):
                    for client in clients:
                        topic = f"bench-{client}-{size}-{acks}"
                        cluster.create_topic(topic, 1, 1)
                        if "produce" in directions:
                            produced.setdefault((size, acks), {})[client] = measure(
                                PRODUCERS[client], bootstrap, topic, args.records,
                                value, acks, broker_pid)
                        if "consume" in directions and client in CONSUMERS:
                            if "produce" not in directions:
                                produce_confluent(bootstrap, topic, args.records, value,
                                                  acks)
                            consumed.setdefault((size, acks), {})[client] = measure(
                                CONSUMERS[client], bootstrap, topic, args.records,
                                value, acks, broker_pid)
            print(f"{args.records:,} records per run, one epochlog broker, 1 partition, "
                  f"linger {LINGER_MS} ms, batch {BATCH_BYTES // 1024} KiB, no compression")
            report("produce", produced)
            if consumed:
                report("consume", consumed)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
