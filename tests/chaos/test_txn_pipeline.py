"""Exactly once under chaos (issue 18): a consume-transform-produce pipeline of two worker
processes (epochlog.testing.chaos.txn_worker: a read_committed consumer in a group and a
transactional producer each, committing the consumer's offsets in the transaction) runs while a
paced producer feeds its source topic, and three faults hit it in turn:

1. the transaction coordinator is killed mid-commit: the partition leaders refuse
   WriteTxnMarkers (a request hook), so a worker's commit is decided (PrepareCommit written,
   EndTxn answered) but not carried out; the coordinator of its transactional id is killed, the
   hooks removed, and the id's next coordinator completes it from the log;
2. the leader of a sink partition is killed (SIGKILL) while transactions write to it, and
   restarted;
3. a worker is paused (SIGSTOP) past its group session and its transaction timeout, so its
   partitions move to the other worker and the coordinator aborts its open transaction with a
   bumped epoch; resumed (SIGCONT), the zombie's writes and offset commits are refused (fenced
   by producer epoch, KIP-447's generation check), and it starts a new producer and goes on.

A third process reads the sink with a read_committed consumer throughout. At the end the
workers stop and save their histories; all are merged with the feeder's and the reader's, and
`check_transactions` must find nothing: no aborted or uncommitted read, every committed
transaction wholly visible, and each source record processed into the sink exactly once.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from epochlog import Admin
from epochlog.client import TopicPartition
from epochlog.testing import Cluster, History, Pipeline, check_transactions, until
from epochlog.testing.adapter_ours import Consumer
from epochlog.testing.processes import Process
from epochlog.testing.traffic import produce_paced
from tests.interop.test_transaction_failover import coordinator_of

pytest.importorskip("confluent_kafka")  # the feeder (epochlog.testing.traffic)

SOURCE, SINK, GROUP = "pipeline-in", "pipeline-out", "pipeline"
PARTITIONS = 4
WORKERS = ("worker-1", "worker-2")
RATE_PER_S = 60
SETTINGS = {"transaction_state_log_num_partitions": 3}
PAUSE_S = 16  # past the worker's session (6 s) and transaction timeout (10 s)
DRAIN_S = 120


def source_of(value: bytes) -> bytes:
    return value.split(b"|", 1)[0]


async def _state(bootstrap: str, transactional_id: str) -> str:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        return (await admin.describe_transactions([transactional_id]))[transactional_id].state


class Reader(threading.Thread):
    """read_committed, every sink partition from the start, recorded, until stopped."""

    def __init__(self, bootstrap: str, history: History) -> None:
        super().__init__(name="sink-reader", daemon=True)
        self.bootstrap, self.history = bootstrap, history
        self.stop = threading.Event()
        self.sources: set[bytes] = set()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._read())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    async def _read(self) -> None:
        consumer = Consumer(bootstrap_servers=self.bootstrap, isolation_level="read_committed",
                            auto_offset_reset="earliest", history=self.history,
                            name="sink-reader")
        async with consumer:
            consumer.assign([TopicPartition(SINK, p) for p in range(PARTITIONS)])
            while not self.stop.is_set():
                for r in await consumer.poll(timeout_ms=300):
                    if r.value is not None:
                        self.sources.add(source_of(r.value))


def test_exactly_once_through_coordinator_leader_and_worker_faults(tmp_path: Path) -> None:
    history = History()
    workers: dict[str, Process] = {}
    with Cluster(3, base_dir=tmp_path / "cluster", request_hooks=True, settings=SETTINGS,
                 on_fault=history.record_fault) as cluster:
        bootstrap = cluster.bootstrap_servers
        for topic in (SOURCE, SINK):
            cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3,
                                 configs={"min.insync.replicas": "2"})
            cluster.wait_fully_replicated(topic)
        feeding, offered = threading.Event(), [0]
        feeder = threading.Thread(target=lambda: offered.__setitem__(0, produce_paced(
            bootstrap, SOURCE, RATE_PER_S, feeding, history=history, name="feeder",
            placement=lambda n: {"key": str(n).encode()})), name="feeder", daemon=True)
        reader = Reader(bootstrap, history)
        try:
            for name in WORKERS:
                w = workers[name] = Process(name, log_path=tmp_path / f"{name}.log")
                w.start([sys.executable, "-m", "epochlog.testing.chaos.txn_worker",
                         "--bootstrap", bootstrap, "--source", SOURCE, "--sink", SINK,
                         "--group", GROUP, "--transactional-id", name,
                         "--history", str(tmp_path / f"{name}.jsonl")])
            for w in workers.values():
                w.wait_line("producer instance 1 ready", timeout_s=60)
            feeder.start()
            reader.start()
            until(lambda: len(reader.sources) >= 100, "the pipeline's first 100 records", 60,
                  detail=lambda: str(len(reader.sources)))

            _coordinator_killed_mid_commit(cluster, bootstrap, "worker-1")
            until(lambda: len(reader.sources) >= 400, "the pipeline to go on (400 records)",
                  90, detail=lambda: str(len(reader.sources)))

            leader = cluster.leader_of(SINK, 0)
            cluster.kill(leader)
            time.sleep(3)
            cluster.restart(leader)
            until(lambda: len(reader.sources) >= 700, "the pipeline to go on (700 records)",
                  90, detail=lambda: str(len(reader.sources)))

            zombie = workers["worker-2"]
            _pause_mid_transaction(zombie, bootstrap, history)
            time.sleep(PAUSE_S)
            mark = zombie.mark()
            zombie.resume()
            history.record_fault("resume", ("worker-2",), "SIGCONT worker-2")
            # its transaction timed out and the coordinator bumped the epoch: fenced
            zombie.wait_line("producer instance 2 ready", start=mark, timeout_s=90)
            time.sleep(5)

            feeding.set()
            feeder.join(60)
            acked = {op.value for op in history.ops
                     if getattr(op, "topic", None) == SOURCE and getattr(op, "acked", False)}
            until(lambda: acked <= reader.sources, "every source record's output", DRAIN_S,
                  detail=lambda: f"{len(acked - reader.sources)} of {len(acked)} missing")
            time.sleep(2)  # anything extra (a duplicate) would show now
        finally:
            for w in workers.values():
                if w.alive:
                    w.stop(signal.SIGTERM, timeout_s=60)
            reader.stop.set()
            feeding.set()
            reader.join(30)
            feeder.join(60)
    assert reader.error is None, reader.error
    merged = History.merged([history, *(History.load(tmp_path / f"{name}.jsonl")
                                        for name in WORKERS)])
    verdict = check_transactions(merged, pipeline=Pipeline(SOURCE, SINK, source_of,
                                                           drained=True))
    assert verdict.ok, verdict
    stats = verdict.stats
    assert stats["committed"] > 20 and stats["read_committed_records"] >= len(acked), stats


def _pause_mid_transaction(worker: Process, bootstrap: str, history: History) -> None:
    """SIGSTOP the worker at a moment its transaction is open (Ongoing at the coordinator): a
    worker is inside one most of the time; a pause that finds none is undone and tried again.
    Asked twice, a second apart: an EndTxn sent just before the pause is still answered (the id
    reads Ongoing until the decision is written), and then the worker was not mid-transaction."""
    def ongoing() -> bool:
        return asyncio.run(_state(bootstrap, worker.name)) == "Ongoing"

    for _ in range(100):
        worker.pause()
        if ongoing():
            time.sleep(1.0)
            if ongoing():
                history.record_fault("pause", (worker.name,), f"SIGSTOP {worker.name}, mid-"
                                     "transaction")
                return
        worker.resume()
        time.sleep(0.05)
    raise AssertionError(f"{worker.name} was never caught inside a transaction")


def _coordinator_killed_mid_commit(cluster: Cluster, bootstrap: str, tid: str) -> None:
    """Markers refused everywhere until a commit of `tid` is decided; its coordinator killed;
    the hooks removed; the next coordinator completes it."""
    live = [b for b in cluster.broker_ids if cluster.node(b).alive]
    for b in live:
        cluster.inject(b, "WriteTxnMarkers", "error", error="NOT_ENOUGH_REPLICAS",
                       times=1_000_000)
    until(lambda: asyncio.run(_state(bootstrap, tid)) == "PrepareCommit" or None,
          f"a decided, unfinished commit of {tid}", 60)
    coordinator = coordinator_of(cluster, tid)
    cluster.kill(coordinator)
    for b in live:
        if b != coordinator:
            cluster.clear_injections(b)
    until(lambda: asyncio.run(_state(bootstrap, tid)) in ("CompleteCommit", "Ongoing",
                                                           "Empty") or None,
          f"the next coordinator of {tid} to complete the commit", 90)
    cluster.restart(coordinator)
