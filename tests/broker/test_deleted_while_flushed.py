"""A topic deleted while the broker flushes its logs (librdkafka's test 0081, which creates and
deletes topics fast): the deleted log's index write failed ("cannot write index entries ...")
and was counted as the data dir's failure, so the broker said for 11 s that its whole data dir
refused writes (KAFKA_STORAGE_ERROR); a folder fsync of a log deleted under its flush job
stopped the broker (FsyncFailed). A log deleted under a flush is no disk failure: its flush is
dropped, nothing is counted, and the other logs go on being written.

On real log files, with ReplicaManager.flush_due_logs on a real executor thread; the executor
holds one chosen job until the test has deleted a topic, which is how the race happens in a
broker (the event loop deletes the topic while a thread runs an fsync).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from epochlog.broker.partition import PartitionState
from epochlog.broker.replicas import ReplicaManager
from epochlog.broker.storage import LogConfig, LogDeleted, LogManager
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.records import build_batch

from .test_isr import Clock

ME = 1
HOLD_S = 30


class HeldExecutor(ThreadPoolExecutor):
    """Runs jobs on a real thread; the job numbered `held` (0: the first) calls on_start, then
    waits for `release`."""

    def __init__(self, held: int, on_start: Callable[[], None]) -> None:
        super().__init__(1, thread_name_prefix="held-flush")
        self.held = held
        self.on_start = on_start
        self.submitted = 0
        self.release = threading.Event()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        number, self.submitted = self.submitted, self.submitted + 1
        if number != self.held:
            return super().submit(fn, *args, **kwargs)

        def held() -> Any:
            self.on_start()
            assert self.release.wait(HOLD_S), "the test never released the held job"
            return fn(*args, **kwargs)
        return super().submit(held)


def two_topics(tmp_path: Path) -> ReplicaManager:
    """Topics a and b led here, each written (new logs: their folders need an fsync too)."""
    logs = LogManager.open(str(tmp_path / "data"), LogConfig(flush_messages=1), Clock(),
                           broker_id=ME, cluster_id="test")
    replicas = ReplicaManager(ME, logs, Clock(), produce_waiters_max=10, fetch_waiters_max=10)
    for topic in ("a", "b"):
        assert replicas.apply_partition_state(topic, 0, PartitionState(ME, 0, 0, (ME,), (ME,)),
                                              True) == 0
        partition = replicas.get(topic, 0)
        assert partition is not None
        partition.append_as_leader(build_batch([(b"k", b"v", None, None)]))
        assert partition.log.flush_due()
    return replicas


async def flush_while_deleting(replicas: ReplicaManager, held: int, topic: str) -> None:
    """flush_due_logs with the job numbered `held` holding its thread until `topic` is
    deleted (StopReplica with delete, as a DeleteTopics makes the controller send)."""
    loop = asyncio.get_running_loop()
    started = asyncio.Event()
    executor = HeldExecutor(held, lambda: loop.call_soon_threadsafe(started.set))
    loop.set_default_executor(executor)
    flushing = asyncio.ensure_future(replicas.flush_due_logs())
    try:
        await asyncio.wait_for(started.wait(), HOLD_S)
        assert replicas.stop_replica(topic, 0, -1, delete=True) == 0
        executor.release.set()
        await asyncio.wait_for(flushing, HOLD_S)
    finally:
        executor.release.set()
        executor.shutdown(wait=True)


@pytest.mark.parametrize("held, deleted", [
    (0, "b"),  # b is deleted while a's fsync runs: b's index write meets a closed log
    (1, "b"),  # b is deleted while its own flush job waits: its folder fsync meets no folder
])
def test_a_topic_deleted_under_a_flush_is_no_disk_failure(tmp_path: Path, held: int,
                                                           deleted: str) -> None:
    replicas = two_topics(tmp_path)
    asyncio.run(flush_while_deleting(replicas, held, deleted))
    disk = replicas.logs.disk
    assert (disk.failing, disk.failures_total, disk.last_error) == (False, 0, "")
    kept = replicas.get("a", 0)
    assert kept is not None and kept.log.recovery_point == 1  # a was flushed
    kept.append_as_leader(build_batch([(b"k", b"w", None, None)]))  # and still takes writes
    assert replicas.get(deleted, 0) is None
    assert not (tmp_path / "data" / f"{deleted}-0").exists()


def test_a_write_to_a_deleted_log_fails_that_log_alone(tmp_path: Path) -> None:
    """Whatever still holds a deleted log and writes to it gets LogDeleted
    (NOT_LEADER_OR_FOLLOWER: the partition is not here any more), never a failure of the data
    dir, which goes on taking the other logs' writes."""
    replicas = two_topics(tmp_path)
    gone = replicas.get("b", 0)
    assert gone is not None
    assert replicas.stop_replica("b", 0, -1, delete=True) == 0
    with pytest.raises(LogDeleted) as refused:
        gone.log.begin_flush()  # the index entries written out: the files are gone
    assert refused.value.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert (replicas.logs.disk.failing, replicas.logs.disk.failures_total) == (False, 0)
    kept = replicas.get("a", 0)
    assert kept is not None
    kept.log.flush()
    assert kept.log.recovery_point == 1
