"""ReplicaManager.storage_failed (issue 19): a read that finds corrupt data cuts the log before
the damage and takes the replica offline until the controller has acted; on real log files."""

from __future__ import annotations

from pathlib import Path

import pytest

from epochlog.broker.partition import Partition, PartitionState, Role
from epochlog.broker.replicas import ReplicaManager
from epochlog.broker.storage import CorruptLog, LogConfig, LogManager
from epochlog.protocol.apis.broker_heartbeat import replica_dir_id
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import build_batch

from .test_isr import Clock

ME, REPLICAS = 1, (1, 2, 3)
BATCHES = 30


@pytest.fixture
def replicas(tmp_path: Path) -> ReplicaManager:
    logs = LogManager.open(str(tmp_path / "data"), LogConfig(), Clock(), broker_id=ME,
                           cluster_id="test")
    return ReplicaManager(ME, logs, Clock(), produce_waiters_max=10, fetch_waiters_max=10)


def filled(replicas: ReplicaManager, state: PartitionState) -> Partition:
    """t-0 led by us with BATCHES one-record batches, committed, then put in `state`."""
    assert replicas.apply_partition_state("t", 0, PartitionState(ME, 0, 0, REPLICAS, (ME,)),
                                          True) == 0
    p = replicas.get("t", 0)
    assert p is not None
    for n in range(BATCHES):
        p.append_as_leader(build_batch([(None, str(n).encode(), None, None)]))
    assert p.high_watermark == BATCHES
    if state.leader_epoch > 0 or state.partition_epoch > 0:
        assert replicas.apply_partition_state("t", 0, state, False) == 0
    return p


def read_damage(p: Partition, offset: int) -> None:
    """Spoil the batch at offset on disk, then read it the way the fetch handler does."""
    segment = p.log.active_segment
    position, _ = segment.find(offset) or (0, None)
    with open(segment.log_path, "r+b") as f:
        f.seek(position + 61)
        f.write(b"\xee" * 4)
    with pytest.raises(CorruptLog) as caught:
        p.log.read(offset, 1 << 20)
    assert caught.value.cut_offset == offset
    assert p.on_corrupt is not None
    p.on_corrupt(p, caught.value)


def test_a_leader_cuts_goes_offline_and_returns_once_the_controller_moved_it(
        replicas: ReplicaManager) -> None:
    told: list[int] = []
    replicas.on_offline_change = lambda: told.append(1)
    p = filled(replicas, PartitionState(ME, 1, 1, REPLICAS, REPLICAS))
    read_damage(p, 12)
    assert p.role is Role.OFFLINE and p.log_end_offset == 12 and p.high_watermark == 12
    assert replicas.offline_dir_ids() == [replica_dir_id("t", 0)] and told == [1]
    # A newer state that still has us leading (decided before the controller heard): refused.
    assert replicas.apply_partition_state("t", 0, PartitionState(ME, 1, 2, REPLICAS, REPLICAS),
                                          False) == E.KAFKA_STORAGE_ERROR
    assert p.role is Role.OFFLINE
    # The controller moved leadership and the ISR off us: a follower again, online.
    assert replicas.apply_partition_state("t", 0, PartitionState(2, 2, 3, REPLICAS, (2, 3)),
                                          False) == 0
    assert p.role is Role.FOLLOWER and replicas.offline_dir_ids() == [] and told == [1, 1]


def test_a_follower_outside_the_isr_is_cut_and_follows_again_at_once(
        replicas: ReplicaManager) -> None:
    p = filled(replicas, PartitionState(2, 1, 1, REPLICAS, (2, 3)))
    read_damage(p, 20)
    assert p.role is Role.FOLLOWER and p.log_end_offset == 20
    assert replicas.offline_dir_ids() == []


def test_an_in_sync_follower_waits_for_the_controller_to_take_it_out_of_the_isr(
        replicas: ReplicaManager) -> None:
    p = filled(replicas, PartitionState(2, 1, 1, REPLICAS, REPLICAS))
    read_damage(p, 5)
    assert p.role is Role.OFFLINE and replicas.offline_dir_ids() == [replica_dir_id("t", 0)]
    assert replicas.apply_partition_state("t", 0, PartitionState(2, 1, 2, REPLICAS, (2, 3)),
                                          False) == 0
    assert p.role is Role.FOLLOWER and replicas.offline_dir_ids() == []


def test_damage_with_no_known_place_to_cut_keeps_the_replica_offline(
        replicas: ReplicaManager) -> None:
    p = filled(replicas, PartitionState(ME, 1, 1, REPLICAS, REPLICAS))
    assert p.on_corrupt is not None
    p.on_corrupt(p, CorruptLog("an index pointing nowhere"))
    assert p.log_end_offset == BATCHES, "nothing cut where no cut is known"
    assert replicas.apply_partition_state("t", 0, PartitionState(2, 2, 3, REPLICAS, (2, 3)),
                                          False) == E.KAFKA_STORAGE_ERROR
    assert p.role is Role.OFFLINE and replicas.offline_dir_ids() == [replica_dir_id("t", 0)]
    replicas.stop_replica("t", 0, -1, delete=True)  # reassigned away: nothing left offline
    assert replicas.offline_dir_ids() == []


def test_a_log_cut_by_recovery_at_start_starts_offline(tmp_path: Path) -> None:
    """A batch header spoiled while the broker was down (after a clean shutdown): recovery at
    open cuts the log below its checkpointed high watermark, and the replica waits offline
    until the controller has taken it out of the ISR, which it may not lead meanwhile."""
    data = str(tmp_path / "data")
    logs = LogManager.open(data, LogConfig(), Clock(), broker_id=ME, cluster_id="test")
    first = ReplicaManager(ME, logs, Clock(), produce_waiters_max=10, fetch_waiters_max=10)
    p = filled(first, PartitionState(ME, 1, 1, REPLICAS, REPLICAS))
    position, _ = p.log.active_segment.find(17) or (0, None)
    first.close()
    with open(tmp_path / "data" / "t-0" / f"{0:020d}.log", "r+b") as f:
        f.seek(position + 8)  # batch_length: below the header size, so the header fails
        f.write(b"\x00\x00\x00\x01")
    logs = LogManager.open(data, LogConfig(), Clock(), broker_id=ME, cluster_id="test")
    assert logs.cut_at_open == {("t", 0)} and logs.get("t", 0).log_end_offset == 17
    again = ReplicaManager(ME, logs, Clock(), produce_waiters_max=10, fetch_waiters_max=10)
    assert again.offline_dir_ids() == [replica_dir_id("t", 0)]
    assert again.apply_partition_state("t", 0, PartitionState(ME, 2, 2, REPLICAS, REPLICAS),
                                       False) == E.KAFKA_STORAGE_ERROR
    assert again.apply_partition_state("t", 0, PartitionState(2, 3, 3, REPLICAS, (2, 3)),
                                       False) == 0
    assert again.get("t", 0).role is Role.FOLLOWER and again.offline_dir_ids() == []
