"""The follower's side of an incremental fetch session (broker/follower_session.py): each row of
its tables, without a leader (the leader's side answering it is in test_follower.py and
test_follower_sessions.py)."""

from __future__ import annotations

from epochlog.broker.follower_session import FollowerSession, fetch_partition, params
from epochlog.protocol.apis.fetch import FetchPartition
from epochlog.protocol.error_codes import ErrorCode as E


def want(**offsets: int) -> dict[tuple[str, int], tuple[int, int, int, int, int]]:
    """t-N at fetch offset O for each pN=O."""
    return {("t", int(k[1:])): params(FetchPartition(
        partition=int(k[1:]), fetch_offset=o, current_leader_epoch=1))
        for k, o in offsets.items()}


def names(built) -> list[int]:
    return [index for (_, index), _ in built.send]


def test_parameters_and_request_entries_map_both_ways() -> None:
    entry = FetchPartition(partition=4, current_leader_epoch=2, fetch_offset=10,
                           last_fetched_epoch=1, log_start_offset=3, partition_max_bytes=99)
    assert fetch_partition(4, params(entry)) == entry


def test_full_then_incremental_naming_only_what_changed_and_forgetting_what_left() -> None:
    s = FollowerSession()
    first = s.build(want(p0=0, p1=0, p2=0))
    assert (first.session_id, first.session_epoch, names(first)) == (0, 0, [0, 1, 2])
    assert s.on_answer(0, 77)
    idle = s.build(want(p0=0, p1=0, p2=0))
    assert (idle.session_id, idle.session_epoch, names(idle), idle.forget) == (77, 1, [], [])
    assert s.on_answer(0, 77)
    moved = s.build(want(p0=5, p1=0, p3=0))
    assert (moved.session_epoch, names(moved), moved.forget) == (2, [0, 3], [("t", 2)])
    assert s.on_answer(0, 77) and s.epoch == 3


def test_a_refused_session_means_a_full_fetch_and_the_answer_is_ignored() -> None:
    for error in (E.FETCH_SESSION_ID_NOT_FOUND, E.INVALID_FETCH_SESSION_EPOCH):
        s = FollowerSession()
        s.build(want(p0=0))
        s.on_answer(0, 9)
        s.build(want(p0=0))
        assert not s.on_answer(error, 0)
        again = s.build(want(p0=0))
        assert (again.session_id, again.session_epoch, names(again)) == (0, 0, [0])


def test_a_lost_answer_or_other_error_closes_the_session_with_the_next_full_fetch() -> None:
    s = FollowerSession()
    s.build(want(p0=0))
    s.on_answer(0, 9)
    s.build(want(p0=3))
    s.on_failure()  # did the leader apply p0=3? unknown: full, with our id (the leader closes 9)
    again = s.build(want(p0=3))
    assert (again.session_id, again.session_epoch, names(again)) == (9, 0, [0])
    assert s.on_answer(E.NOT_LEADER_OR_FOLLOWER, 0)  # partitions' errors are theirs to handle
    assert s.build(want(p0=3)).session_epoch == 0


def test_a_leader_keeping_no_session_gets_full_fetches() -> None:
    s = FollowerSession()
    for _ in range(3):
        built = s.build(want(p0=0))
        assert (built.session_id, built.session_epoch, names(built)) == (0, 0, [0])
        assert s.on_answer(0, 0)
