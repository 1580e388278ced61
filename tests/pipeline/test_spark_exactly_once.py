"""The sink's deliveryGuarantee=exactly-once on real Spark and real brokers: a streaming query from
topic A to topic B, with failures where at-least-once writes twice, and B read back with
read_committed must hold every record of A exactly once.

- A micro-batch that fails after some of its tasks committed, run again from the checkpoint (the
  poison record fails its task while a file exists; the file is removed and the query started
  again): the replayed tasks that had committed find their mark and write nothing. The same with
  at-least-once must show duplicates, so the check can fail.
- A task whose first attempt fails mid-way (Spark runs it again, local[2,3]): the new attempt
  fences the old one's transaction, which is aborted.
- The driver SIGKILLed mid-query (with its JVM) and started again from its checkpoint.
- The broker leading a target partition SIGKILLed mid-query.
- docs/spark.md's example, as written.

Each query runs in a process of its own (tests/pipeline/exactly_once_job.py), reaped even when a
test fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochlog.client import Admin, Consumer, TopicPartition
from tests.broker.cluster import Cluster
from tests.pipeline.conftest import produce

ROOT = Path(__file__).resolve().parent.parent.parent
PARTITIONS = 3
RUN_S = 300.0  # a JVM start and a few micro-batches, on two busy cores
READ_S = 60.0


def fill(cluster: Cluster, source: str, target: str, count: int) -> list[str]:
    """count values spread over the source's partitions, and "poison" last in partition 2."""
    cluster.create_topic(source, partitions=PARTITIONS, replication_factor=3)
    cluster.create_topic(target, partitions=PARTITIONS, replication_factor=3)
    values = [f"v-{i}" for i in range(count)]
    produce(cluster.bootstrap, source, [(str(i).encode(), v.encode(), [])
                                        for i, v in enumerate(values)])
    produce(cluster.bootstrap, source, [(b"p", b"poison", [])], partition=2)
    return values + ["poison"]


class Job:
    """exactly_once_job.py as a child in a session of its own (its JVM in its group)."""

    def __init__(self, cluster: Cluster, tmp: Path, source: str, target: str, guarantee: str,
                 poison: str, master: str = "local[2]") -> None:
        self.log = tmp / f"job-{time.monotonic_ns()}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.pipeline.exactly_once_job", master,
                 cluster.bootstrap, source, target, str(tmp / "checkpoint"), guarantee, poison],
                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                env={**os.environ, "PYSPARK_PYTHON": sys.executable},
                start_new_session=True)

    def wait(self) -> tuple[int, str]:
        try:
            code = self.proc.wait(RUN_S)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the query did not end in {RUN_S} s:\n{self.tail()}") from None
        return code, self.tail()

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)


@pytest.fixture
def jobs() -> Iterator[list[Job]]:
    started: list[Job] = []
    try:
        yield started
    finally:
        for job in started:
            try:
                os.killpg(job.proc.pid, signal.SIGKILL)  # the JVM too, even after a clean exit
            except ProcessLookupError:
                pass
            job.proc.wait(60)


def committed_values(cluster: Cluster, topic: str) -> list[str]:
    """Every value of topic a read_committed consumer sees, to the last stable offset."""
    async def read() -> list[str]:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        async with Consumer(cluster.bootstrap, isolation_level="read_committed",
                            auto_offset_reset="earliest") as consumer:
            ends = await consumer.end_offsets(tps)
            consumer.assign(tps)
            values: list[str] = []
            deadline = time.monotonic() + READ_S
            while True:
                positions = {tp: await consumer.position(tp) for tp in tps}
                if all(positions[tp] >= ends[tp] for tp in tps):
                    return values
                assert time.monotonic() < deadline, \
                    f"{topic}: at {positions}, not read to {ends} in {READ_S} s"
                values += [r.value.decode() for r in await consumer.poll(timeout_ms=500)]
    return asyncio.run(read())


@pytest.mark.parametrize("guarantee", ["exactly-once", "at-least-once"])
def test_a_replayed_micro_batch_writes_each_task_once(cluster: Cluster, tmp_path: Path,
                                                      jobs: list[Job], guarantee: str) -> None:
    source, target = f"eo-replay-a-{guarantee}", f"eo-replay-b-{guarantee}"
    values = fill(cluster, source, target, 150)
    poison = tmp_path / "poison"
    poison.touch()
    jobs.append(Job(cluster, tmp_path, source, target, guarantee, str(poison)))
    code, out = jobs[-1].wait()
    assert code == 1 and "poison record" in out, out
    before = committed_values(cluster, target)
    assert before, "no task committed before the batch failed: the replay would test nothing"
    poison.unlink()
    jobs.append(Job(cluster, tmp_path, source, target, guarantee, str(poison)))
    code, out = jobs[-1].wait()
    assert code == 0 and "done" in out, out
    after = committed_values(cluster, target)
    assert set(after) == set(values), sorted(set(values) - set(after))[:10]
    if guarantee == "exactly-once":
        assert sorted(after) == sorted(values), f"{len(after)} records for {len(values)}"
    else:  # the control: the replay wrote the committed tasks' rows again
        assert len(after) > len(values), f"{len(after)} records for {len(values)}"


def test_a_task_retried_by_spark_writes_once(cluster: Cluster, tmp_path: Path,
                                             jobs: list[Job]) -> None:
    source, target = "eo-retry-a", "eo-retry-b"
    values = fill(cluster, source, target, 150)
    jobs.append(Job(cluster, tmp_path, source, target, "exactly-once", "first-attempt",
                    master="local[2,3]"))
    code, out = jobs[-1].wait()
    assert code == 0 and "done" in out, out
    assert (tmp_path / "checkpoint.first-attempt-failed").exists(), "no attempt failed"
    assert sorted(committed_values(cluster, target)) == sorted(values)


def test_a_killed_driver_restarted_from_its_checkpoint_writes_once(
        cluster: Cluster, tmp_path: Path, jobs: list[Job]) -> None:
    source, target = "eo-kill-a", "eo-kill-b"
    values = fill(cluster, source, target, 500)
    jobs.append(Job(cluster, tmp_path, source, target, "exactly-once", "slow"))
    deadline = time.monotonic() + RUN_S
    while len(seen := committed_values(cluster, target)) < 150:
        assert jobs[-1].proc.poll() is None, f"the query ended early:\n{jobs[-1].tail()}"
        assert time.monotonic() < deadline, f"only {len(seen)} records in {RUN_S} s"
        time.sleep(0.5)
    assert len(seen) < len(values), "the query finished before it could be killed"
    jobs[-1].kill()  # SIGKILL to the driver and its JVM, mid-query
    jobs.append(Job(cluster, tmp_path, source, target, "exactly-once", "none"))
    code, out = jobs[-1].wait()
    assert code == 0 and "done" in out, out
    assert sorted(committed_values(cluster, target)) == sorted(values)


def test_a_target_leader_killed_mid_query_writes_once(cluster: Cluster, tmp_path: Path,
                                                      jobs: list[Job]) -> None:
    """SIGKILL of the broker leading target partition 0 while the tasks write: their producers
    move to the new leader within their transactions (or the task fails and is retried)."""
    source, target = "eo-leader-a", "eo-leader-b"
    values = fill(cluster, source, target, 500)
    jobs.append(Job(cluster, tmp_path, source, target, "exactly-once", "slow",
                    master="local[2,3]"))
    deadline = time.monotonic() + RUN_S
    while len(seen := committed_values(cluster, target)) < 100:
        assert jobs[-1].proc.poll() is None, f"the query ended early:\n{jobs[-1].tail()}"
        assert time.monotonic() < deadline, f"only {len(seen)} records in {RUN_S} s"
        time.sleep(0.5)
    victim, _ = cluster.leaders(target)[0]
    cluster.broker(victim).stop(signal.SIGKILL)
    try:
        code, out = jobs[-1].wait()
        assert code == 0 and "done" in out, out
        assert sorted(committed_values(cluster, target)) == sorted(values)
    finally:
        cluster.broker(victim).start()  # for the module's other tests
        cluster.broker(victim).wait_started()


def test_the_docs_example_runs(spark: Any, cluster: Cluster, tmp_path: Path) -> None:
    """docs/spark.md's exactly-once example, as written, in this run's session: every record
    once, through the transactional path (its marks are there to see)."""
    from tests.docs import doc_example

    values = fill(cluster, "eo-docs-in", "eo-docs-out", 120)
    code = (doc_example("spark.md", "## Exactly once")
            .replace("127.0.0.1:9092", cluster.bootstrap).replace('"out"', '"eo-docs-out"')
            .replace('"/tmp/orders-to-out"', repr(str(tmp_path / "checkpoint"))))
    stream = (spark.readStream.format("epochlog").option("kafka.bootstrap.servers",
                                                         cluster.bootstrap)
              .option("subscribe", "eo-docs-in").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", 50).load())
    scope: dict[str, Any] = {"stream": stream}
    exec(compile(code, "docs/spark.md", "exec"), scope)
    query = scope["query"]
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert sorted(committed_values(cluster, "eo-docs-out")) == sorted(values)

    async def marks() -> dict[TopicPartition, tuple[int, int]]:
        async with Admin(cluster.bootstrap) as admin:
            return await admin.list_consumer_group_offsets(f"epochlog-spark-{query.id}-0")
    assert asyncio.run(marks()), "no mark: the query did not write through transactions"
