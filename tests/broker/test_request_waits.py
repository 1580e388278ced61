"""The two waits of the serving path, as plain objects with a number for the clock:
Fetch's long poll (broker/fetch_wait.py `ParkedFetch`: answer a read now, or park it on the
positions it watches until one moves or its max wait passes) and acks=all
(broker/replication_wait.py `ReplicationWait`: settled once every appended partition has its
answer, or at the deadline with REQUEST_TIMED_OUT for the rest). The asyncio handlers wait on
the purgatories with these (tests of whole requests: test_clients.py, test_isr.py,
test_follower_reads.py); the simulation re-checks them after every event."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from epochlog.broker.fetch_wait import ParkedFetch
from epochlog.broker.partition import Partition, PartitionState
from epochlog.broker.replicas import ReplicaManager
from epochlog.broker.replication_wait import ReplicationWait
from epochlog.broker.storage import LogConfig, LogManager
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import build_batch

ME, F2, F3 = 1, 2, 3
REPLICAS = (ME, F2, F3)
UNSET = -99


# ------------------------------------------------------------------------------- long poll
@pytest.mark.parametrize(("now", "bytes_read", "must_answer", "answer"), [
    (0, 0, False, False),  # nothing yet, time left: park
    (0, 9, False, False),  # below min_bytes
    (0, 10, False, True),  # min_bytes there
    (0, 0, True, True),  # an error, a divergence, a follower to tell the high watermark
    (99, 0, False, False),
    (100, 0, False, True),  # the max wait is over
])
def test_a_read_is_answered_now_or_parked(now: int, bytes_read: int, must_answer: bool,
                                          answer: bool) -> None:
    assert ParkedFetch(0, 100, min_bytes=10).read(now, bytes_read, must_answer) is answer


def test_no_wait_at_all_answers_the_first_read() -> None:
    assert ParkedFetch(50, 0, min_bytes=1).read(50, 0, False)
    assert ParkedFetch(50, -5, min_bytes=1).next_deadline_ms() == 50


def test_a_parked_fetch_reads_again_when_a_watched_position_moves() -> None:
    parked = ParkedFetch(0, 500, min_bytes=1)
    assert not parked.read(0, 0, False)
    parked.park([(10, 3, "leader", -1)])
    assert not parked.moved([(10, 3, "leader", -1)]), "a poke that changed nothing"
    assert parked.moved([(11, 3, "leader", -1)])
    parked.park([(11, 3, "leader", -1)])  # read again, still short: parked on the new ones
    assert not parked.moved([(11, 3, "leader", -1)])
    assert parked.next_deadline_ms() == 500, "the deadline is the request's, not the park's"


# -------------------------------------------------------------------------------- acks=all
@pytest.fixture
def replicas(tmp_path: Path) -> ReplicaManager:
    logs = LogManager.open(str(tmp_path / "data"), LogConfig(), lambda: 0, broker_id=ME,
                           cluster_id="test")
    manager = ReplicaManager(ME, logs, lambda: 0, produce_waiters_max=10, fetch_waiters_max=10)
    for index in (0, 1):
        manager.apply_partition_state("t", index, PartitionState(ME, 0, 0, REPLICAS, REPLICAS),
                                      True)
        manager.get("t", index).set_min_insync_replicas(2)
    return manager


def appended(p: Partition) -> tuple[SimpleNamespace, Partition, int, int]:
    last = p.append_as_leader(build_batch([(None, b"v", None, None)])).last_offset
    return SimpleNamespace(error_code=UNSET), p, p.leader_epoch, last


def test_settled_once_every_partition_has_its_answer(replicas: ReplicaManager) -> None:
    p0, p1 = replicas.get("t", 0), replicas.get("t", 1)
    waits = [appended(p0), appended(p1)]
    wait = ReplicationWait(replicas, waits)
    assert wait.keys() == [("t", 0), ("t", 1)]
    assert not wait.settled() and [a.error_code for a, *_ in waits] == [UNSET, UNSET]
    for follower in (F2, F3):
        p0.update_follower(follower, p0.log_end_offset)
    assert not wait.settled(), "t-1 still waits"
    assert [a.error_code for a, *_ in waits] == [UNSET, UNSET], "nothing answered meanwhile"
    p1.update_follower(F2, p1.log_end_offset)
    p1.update_follower(F3, p1.log_end_offset)
    assert wait.settled() and [a.error_code for a, *_ in waits] == [0, 0]


def test_at_the_deadline_those_still_waiting_time_out(replicas: ReplicaManager) -> None:
    p0, p1 = replicas.get("t", 0), replicas.get("t", 1)
    waits = [appended(p0), appended(p1)]
    p0.update_follower(F2, p0.log_end_offset)
    p0.update_follower(F3, p0.log_end_offset)
    wait = ReplicationWait(replicas, waits)
    assert not wait.settled()
    assert wait.settled(final=True)
    assert [a.error_code for a, *_ in waits] == [0, E.REQUEST_TIMED_OUT]


def test_a_partition_that_lost_its_leadership_or_its_isr_answers_an_error(
        replicas: ReplicaManager) -> None:
    p0, p1 = replicas.get("t", 0), replicas.get("t", 1)
    waits = [appended(p0), appended(p1)]
    p0.apply(PartitionState(F2, 1, 1, REPLICAS, REPLICAS))  # a new leader: never committed here
    for follower in (F2, F3):
        p1.update_follower(follower, p1.log_end_offset)
    assert p1.high_watermark > waits[1][3]
    p1.propose_isr((ME,))  # committed, but the ISR is shrinking below min.insync.replicas
    p1.apply(PartitionState(ME, 0, 1, REPLICAS, (ME,)))
    assert ReplicationWait(replicas, waits).settled()
    assert [a.error_code for a, *_ in waits] == [E.NOT_LEADER_OR_FOLLOWER,
                                                 E.NOT_ENOUGH_REPLICAS_AFTER_APPEND]
