"""The broker's serving paths in one process, per request: what the Produce and Fetch handlers
cost beside storage, so that a change to their waits (acks=all, the long poll) can be compared
before and after on the same machine in the same run.

    python bench/serving_paths.py [--requests 20000] [--rounds 5]

On uvloop, against a real ReplicaManager over real logs in a temp dir (replication factor 1,
so acks=all is answered at once; min.insync.replicas 1), each case `--requests` times, in
`--rounds` rounds (the median printed, in CPU microseconds a request):
  - produce acks=1 and acks=all: Produce v9 of one 100-byte record to one partition, through
    handlers/produce.handle;
  - fetch, data there: a consumer's Fetch v12 of what was just appended (answered at once);
  - fetch, long poll: a consumer's Fetch at the log end with max_wait_ms 500 parked in the fetch
    purgatory, then a produce that wakes it; the time of the pair.
Compare two checkouts by running this script with each one's interpreter, interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from types import SimpleNamespace
from typing import Any

import uvloop

from epochlog.broker.config import BrokerConfig
from epochlog.broker.handlers import fetch, produce
from epochlog.broker.metadata_cache import MetadataCache
from epochlog.broker.partition import PartitionState
from epochlog.broker.replicas import ReplicaManager
from epochlog.broker.storage import LogConfig, LogManager
from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.records import build_batch

ME = 1
VALUE = b"v" * 100


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def make_app(root: str) -> Any:
    logs = LogManager.open(root, LogConfig(flush_ms=1000, retention_ms=-1), monotonic_ms,
                           broker_id=ME, cluster_id="bench")
    replicas = ReplicaManager(ME, logs, monotonic_ms, produce_waiters_max=1000,
                              fetch_waiters_max=1000)
    replicas.apply_partition_state("t", 0, PartitionState(ME, 0, 0, (ME,), (ME,)), True)
    return SimpleNamespace(broker_id=ME, replicas=replicas, metadata=MetadataCache(),
                           config=BrokerConfig(broker_id=ME, data_dir=root), read_path=None,
                           auto_create_soon=lambda topic: None)


def produce_request(acks: int) -> ProduceRequest:
    return ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[TopicProduceData(
        name="t", partition_data=[PartitionProduceData(
            index=0, records=build_batch([(None, VALUE, None, None)]))])])


def fetch_request(offset: int, max_wait_ms: int) -> FetchRequest:
    return FetchRequest(max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=1 << 20, topics=[
        FetchTopic(topic="t", partitions=[FetchPartition(
            partition=0, fetch_offset=offset, partition_max_bytes=1 << 20)])])


async def case(name: str, app: Any, requests: int) -> float:
    """CPU microseconds a request (a pair for the long poll): CPU time, not wall time, so that
    other processes on a shared machine count less."""
    produce_ctx = SimpleNamespace(app=app, version=9)
    fetch_ctx = SimpleNamespace(app=app, version=12)
    partition = app.replicas.get("t", 0)
    acks = {"produce acks=1": 1, "produce acks=all": -1}.get(name)
    start = time.process_time()
    for _ in range(requests):
        if acks is not None:
            await produce.handle(produce_ctx, produce_request(acks))
        elif name == "fetch, data there":
            await produce.handle(produce_ctx, produce_request(1))
            answer = await fetch.handle(
                fetch_ctx, fetch_request(partition.log_end_offset - 1, 500))
            assert answer.responses[0].partitions[0].records
        else:
            waiting = asyncio.ensure_future(fetch.handle(
                fetch_ctx, fetch_request(partition.log_end_offset, 500)))
            await asyncio.sleep(0)  # parked
            await produce.handle(produce_ctx, produce_request(1))
            answer = await waiting
            assert answer.responses[0].partitions[0].records
    return (time.process_time() - start) / requests * 1e6


async def run(requests: int, rounds: int) -> dict[str, list[float]]:
    names = ["produce acks=1", "produce acks=all", "fetch, data there", "fetch, long poll"]
    times: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(rounds):
        root = tempfile.mkdtemp(prefix="serving_paths_")
        try:
            app = make_app(root)
            await case("produce acks=1", app, requests // 10)  # warm-up
            for name in names:
                times[name].append(await case(name, app, requests))
            app.replicas.close()
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    times = uvloop.run(run(args.requests, args.rounds))
    for name, values in times.items():
        print(f"  {name:<20} {statistics.median(values):8.2f} us of CPU a request "
              f"(rounds: {', '.join(f'{v:.2f}' for v in values)})")


if __name__ == "__main__":
    main()
