"""The broker's sans-IO pieces on their own: the partition state machine (on a real storage Log
and an injected clock), the control-request fencing rules, the purgatory, producer ids and the
settings a broker refuses at start.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from epochlog.broker.fencing import ControlEpochs, leader_epoch_error
from epochlog.broker.partition import Partition, PartitionState, Role
from epochlog.broker.producer_ids import BROKER_SHIFT, ProducerIdAllocator, ProducerIdFileError
from epochlog.broker.purgatory import Purgatory
from epochlog.broker.storage import Log, LogConfig
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import build_batch

ME, OTHER = 1, 2


class Clock:
    def __init__(self) -> None:
        self.ms = 0

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def partition(tmp_path) -> Partition:
    clock = Clock()
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), clock, clean_shutdown=True)
    return Partition("t", 0, ME, log, clock)


def state(leader: int, leader_epoch: int, partition_epoch: int = 0,
          isr: tuple[int, ...] = (ME,), replicas: tuple[int, ...] = (ME, OTHER)) -> PartitionState:
    return PartitionState(leader, leader_epoch, partition_epoch, replicas, isr)


def append(p: Partition, n: int = 1) -> int:
    return p.append_as_leader(build_batch([(None, b"x", None, None)] * n)).last_offset


def test_becoming_leader_starts_the_epoch_at_the_log_end(partition: Partition) -> None:
    assert partition.apply(state(ME, 0))
    assert partition.role is Role.LEADER
    append(partition, 3)
    assert partition.apply(state(OTHER, 1))
    assert partition.role is Role.FOLLOWER and partition.leader_id == OTHER
    assert partition.apply(state(ME, 2))
    assert partition.log.epoch_cache.entries == [(0, 0), (2, 3)]  # KIP-101: (epoch, log end)
    assert partition.high_watermark == 3  # an ISR of the leader alone commits at once


def test_only_newer_states_apply(partition: Partition) -> None:
    assert partition.apply(state(ME, 3, partition_epoch=5))
    assert not partition.apply(state(OTHER, 2, partition_epoch=9))  # older leader epoch
    assert not partition.apply(state(OTHER, 3, partition_epoch=5))  # same: not newer
    assert partition.apply(state(ME, 3, partition_epoch=6, isr=(ME, OTHER)))  # an ISR change
    assert partition.role is Role.LEADER and partition.isr == (ME, OTHER)
    assert partition.apply(state(-1, 4))
    assert partition.role is Role.OFFLINE


def test_high_watermark_is_the_smallest_isr_log_end(partition: Partition) -> None:
    partition.apply(state(ME, 0, isr=(ME, OTHER)))
    last = append(partition, 5)
    assert partition.high_watermark == 0  # the follower has not fetched
    assert partition.update_follower(OTHER, 2) and partition.high_watermark == 2
    assert not partition.update_follower(OTHER, 1)  # never moves back
    partition.update_follower(OTHER, last + 1)
    assert partition.high_watermark == last + 1


def test_lagging_followers_use_the_injected_clock(partition: Partition) -> None:
    partition.apply(state(ME, 0, isr=(ME, OTHER)))
    append(partition)
    partition.clock.ms = 29_000
    assert partition.lagging_followers(30_000) == []
    partition.clock.ms = 31_000
    assert partition.lagging_followers(30_000) == [OTHER]
    partition.update_follower(OTHER, partition.log_end_offset)
    assert partition.lagging_followers(30_000) == []


def test_resign_stops_leading_until_a_newer_state(partition: Partition) -> None:
    partition.apply(state(ME, 0))
    assert partition.resign("generation over") and not partition.is_leader
    assert not partition.apply(state(ME, 0))
    assert partition.apply(state(ME, 1)) and partition.is_leader


def test_client_leader_epoch_fencing() -> None:
    assert leader_epoch_error(-1, 5) == 0
    assert leader_epoch_error(5, 5) == 0
    assert leader_epoch_error(4, 5) == E.FENCED_LEADER_EPOCH
    assert leader_epoch_error(6, 5) == E.UNKNOWN_LEADER_EPOCH


def test_control_requests_are_fenced_by_broker_then_controller_epoch() -> None:
    epochs = ControlEpochs(ME)
    epochs.observe_generation(10, "registered")
    assert epochs.admit("LeaderAndIsr", 3000, 2, 10) == 0
    assert epochs.admit("StopReplica", 3000, 2, 9) == E.STALE_BROKER_EPOCH
    assert epochs.admit("StopReplica", 3000, 1, 9) == E.STALE_BROKER_EPOCH  # broker epoch first
    assert epochs.admit("UpdateMetadata", 3000, 1, 10) == E.STALE_CONTROLLER_EPOCH
    assert epochs.admit("UpdateMetadata", 3000, 3, 12) == 0  # registration answer in flight
    assert (epochs.generation, epochs.controller_epoch) == (12, 3)
    assert not epochs.observe_generation(11, "a late registration answer")
    assert epochs.refused == {"STALE_BROKER_EPOCH": 2, "STALE_CONTROLLER_EPOCH": 1}


async def test_purgatory_wakes_on_poke_and_times_out() -> None:
    purgatory = Purgatory("test", waiters_max=1)
    ready = False
    waiting = asyncio.ensure_future(purgatory.wait_until(["k"], lambda: ready, 10_000))
    await asyncio.sleep(0)
    assert len(purgatory) == 1
    assert not await purgatory.wait_until(["k"], lambda: False, 10_000)  # full: no queueing
    purgatory.poke("other")
    await asyncio.sleep(0)
    assert not waiting.done()
    ready = True
    purgatory.poke("k")
    assert await asyncio.wait_for(waiting, 1) is True
    assert len(purgatory) == 0
    assert await purgatory.wait_until(["k"], lambda: False, 20) is False
    assert purgatory.expired_total == 1


def test_producer_ids_never_repeat_across_restarts(tmp_path) -> None:
    first = ProducerIdAllocator(str(tmp_path), 7)
    ids = [first.allocate() for _ in range(3)]
    again = ProducerIdAllocator(str(tmp_path), 7)  # a restart (or a crash) skips the block
    later = again.allocate()
    assert ids[0] >> BROKER_SHIFT == 7 and later > max(ids)
    (tmp_path / "x").mkdir()
    other = ProducerIdAllocator(str(tmp_path / "x"), 8)
    assert other.allocate() >> BROKER_SHIFT == 8
    (tmp_path / "producer-id-block").write_text("garbage")
    with pytest.raises(ProducerIdFileError):
        ProducerIdAllocator(str(tmp_path), 7)


@pytest.mark.parametrize("args, named", [
    (["--id", "-3"], "broker_id"),
    (["--id", "1", "--listen", "nowhere"], "listen"),
    (["--id", "1", "--set", "log_segment_bytes=5"], "log_segment_bytes"),
    (["--id", "1", "--set", "no_such_setting=1"], "no_such_setting"),
])
def test_bad_settings_are_refused_at_start_naming_them(tmp_path, args: list[str],
                                                       named: str) -> None:
    done = subprocess.run([sys.executable, "-m", "epochlog", "broker", "--data-dir",
                           str(tmp_path), *args], capture_output=True, timeout=30)
    assert done.returncode == 2
    assert named in done.stderr.decode()
    assert not list(tmp_path.iterdir())  # refused before any file was made
