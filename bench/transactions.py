"""Transactional produce throughput (issue 18) beside idempotent produce, in one run.

    python bench/transactions.py [--records 100000] [--dir PATH]

A controller and three brokers as real children on 127.0.0.1 (`epochlog.testing.Cluster`). One
topic of three partitions, replication factor 3, min.insync.replicas 2. Each client,
confluent-kafka (librdkafka, a yardstick nobody here wrote) and then epochlog's own `Producer`,
produces --records records of 1 KiB, acks=all, linger 5 ms, no compression:
  - idempotent, no transaction: the yardstick, same run, same machine;
  - transactional, in transactions of 10,000 records;
  - transactional, in transactions of 100 records (each commit: EndTxn, PrepareCommit and
    CompleteCommit written to __transaction_state, a COMMIT marker per partition).
Each figure is records/s from the first produce() to the last commit (or flush), and the
transactional rows give their rate as a multiple of the yardstick's. Figures vary from run to
run on a shared 2-core machine: compare ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

import confluent_kafka

from epochlog import Producer
from epochlog.testing import Cluster

RECORD_BYTES = 1024
WAIT_S = 60.0
WARMUP_RECORDS = 300
TOPIC = "bench-txn"


def run(bootstrap: str, records: int, per_transaction: int | None, name: str) -> float:
    """records/s of `records` acknowledged records; per_transaction None: idempotent only."""
    config = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
              "batch.size": 1 << 20, "compression.type": "none", "enable.idempotence": True,
              "queue.buffering.max.messages": 200_000,
              "message.timeout.ms": int(WAIT_S * 1000)}
    if per_transaction is not None:
        config["transactional.id"] = name
    producer = confluent_kafka.Producer(config)
    if per_transaction is not None:
        producer.init_transactions(WAIT_S)
    value = b"x" * RECORD_BYTES
    failed: list[object] = []

    def delivered(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    # warm up, untimed: connections, metadata, the first transaction's partitions
    if per_transaction is not None:
        producer.begin_transaction()
    for _ in range(WARMUP_RECORDS):
        producer.produce(TOPIC, value, on_delivery=delivered)
    if per_transaction is not None:
        producer.commit_transaction(WAIT_S)
    producer.flush(WAIT_S)
    start = time.perf_counter()
    sent = 0
    while sent < records:
        batch = records - sent if per_transaction is None else min(per_transaction,
                                                                   records - sent)
        if per_transaction is not None:
            producer.begin_transaction()
        for _ in range(batch):
            while True:
                try:
                    producer.produce(TOPIC, value, on_delivery=delivered)
                    break
                except BufferError:
                    producer.poll(0.01)
            producer.poll(0)
        if per_transaction is not None:
            producer.commit_transaction(WAIT_S)
        elif producer.flush(WAIT_S):
            raise RuntimeError(f"{name}: records still unacknowledged after {WAIT_S}s")
        sent += batch
    elapsed = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"{name}: {len(failed)} records failed, first {failed[0]}")
    return records / elapsed


async def _run_ours(bootstrap: str, records: int, per_transaction: int | None, name: str
                    ) -> float:
    producer = Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                        linger_ms=5, batch_size=1 << 20, buffer_memory=256 << 20,
                        delivery_timeout_ms=int(WAIT_S * 1000),
                        transactional_id=name if per_transaction is not None else None)
    value = b"x" * RECORD_BYTES
    async with producer:
        if per_transaction is not None:
            await producer.init_transactions()
            async with producer.transaction():  # warm up, untimed, as for confluent-kafka
                for _ in range(WARMUP_RECORDS):
                    await producer.send(TOPIC, value)
        else:
            for _ in range(WARMUP_RECORDS):
                await producer.send(TOPIC, value)
            await producer.flush()
        start = time.perf_counter()
        sent = 0
        while sent < records:
            batch = records - sent if per_transaction is None else min(per_transaction,
                                                                       records - sent)
            if per_transaction is not None:
                async with producer.transaction():
                    for _ in range(batch):
                        await producer.send(TOPIC, value)
            else:
                futures = [await producer.send(TOPIC, value) for _ in range(batch)]
                await producer.flush()
                failed = [f for f in futures if f.exception() is not None]
                if failed:
                    raise RuntimeError(f"{name}: {len(failed)} records failed")
            sent += batch
        return records / (time.perf_counter() - start)


def run_ours(bootstrap: str, records: int, per_transaction: int | None, name: str) -> float:
    """As run(), with epochlog's Producer (a commit fails if any record of it failed)."""
    return asyncio.run(_run_ours(bootstrap, records, per_transaction, name))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--dir", type=Path, default=None, help="where the cluster lives")
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="epochlog-bench-txn-"))
    with Cluster(3, base_dir=base) as cluster:
        cluster.create_topic(TOPIC, 3, 3, {"min.insync.replicas": "2"})
        cluster.wait_fully_replicated(TOPIC)
        print(f"{args.records} records of {RECORD_BYTES} B, acks=all, 3 brokers, RF 3, "
              f"3 partitions")
        for client, runner in ((f"confluent-kafka {confluent_kafka.__version__}", run),
                               ("epochlog's Producer", run_ours)):
            print(client)
            yardstick = runner(cluster.bootstrap_servers, args.records, None, "idempotent")
            print(f"  idempotent, no transaction (yardstick)   {yardstick:10,.0f} records/s")
            for size in (10_000, 100):
                rate = runner(cluster.bootstrap_servers, args.records, size,
                              f"bench-{client.split()[0]}-{size}")
                print(f"  transactions of {size:>6,} records          {rate:10,.0f} records/s  "
                      f"({rate / yardstick:.2f} x the yardstick)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
