"""client.fetcher's decisions, without I/O: what a consumer does with each answer.

KIP-320 validation (truncation found exactly, or not at all), and KIP-392's out-of-range cases
when reading from a follower: case 3 (below the replica's log start: reset to the earliest of
the replica being read) and case 4 (above it: validate with the leader before any reset).
"""

from __future__ import annotations

from epochlog.client import fetcher
from epochlog.client.fetcher import PartitionState, State
from epochlog.client.types import TopicPartition
from epochlog.protocol.error_codes import ErrorCode as E

TP = TopicPartition("t", 0)
LEADER, FOLLOWER = 1, 2


def fetching(position: int = 100, epoch: int = 3) -> PartitionState:
    st = PartitionState(TP, leader=LEADER, leader_epoch=5)
    st.seek(position, epoch, validate=False)
    return st


def test_validation_keeps_a_position_the_leader_holds() -> None:
    st = fetching()
    st.moved(State.VALIDATE)
    action = fetcher.on_validation(st, 0, 3, 150, "none")
    assert action.error is None and st.state is State.FETCH and st.position == 100


def test_truncation_moves_to_the_divergence_point_or_raises() -> None:
    for end_epoch, end_offset in ((3, 80), (2, 60)):  # same epoch shorter, or an older one
        st = fetching()
        generation = st.generation
        action = fetcher.on_validation(st, 0, end_epoch, end_offset, "latest")
        assert (st.state, st.position, st.position_epoch) == (State.FETCH, end_offset, end_epoch)
        assert st.generation > generation and action.log and "truncation" in action.log
        st = fetching()
        action = fetcher.on_validation(st, 0, end_epoch, end_offset, "none")
        assert action.error == ("truncation", end_offset, end_epoch)


def test_an_undefined_answer_resets_or_raises_at_the_position() -> None:
    st = fetching()
    fetcher.on_validation(st, 0, -1, -1, "earliest")
    assert st.state is State.RESET and st.reset_policy == "earliest"
    st = fetching()
    assert fetcher.on_validation(st, 0, -1, -1, "none").error == ("truncation", 100, 3)


def test_retriable_validation_answers_wait() -> None:
    for code, refresh in ((E.FENCED_LEADER_EPOCH, True), (E.UNKNOWN_LEADER_EPOCH, True),
                          (E.OFFSET_NOT_AVAILABLE, False), (E.NOT_LEADER_OR_FOLLOWER, True)):
        st = fetching()
        st.moved(State.VALIDATE)
        action = fetcher.on_validation(st, code, -1, -1, "none")
        assert action.backoff and action.refresh_metadata == refresh and action.error is None
        assert st.state is State.VALIDATE and st.position == 100


def test_follower_out_of_range_case_3_resets_to_the_replicas_log_start() -> None:
    st = fetching(position=10)
    st.preferred_replica, st.preferred_until = FOLLOWER, 1e9
    fetcher.on_fetch_error(st, E.OFFSET_OUT_OF_RANGE, FOLLOWER, log_start_offset=40,
                           high_watermark=200, auto_reset="earliest",
                           validation_supported=True, now_s=0.0)
    assert (st.state, st.position) == (State.FETCH, 40)
    assert st.preferred_replica == -1  # back to the leader after an error


def test_follower_out_of_range_case_4_validates_with_the_leader_first() -> None:
    st = fetching(position=500)
    st.preferred_replica, st.preferred_until = FOLLOWER, 1e9
    action = fetcher.on_fetch_error(st, E.OFFSET_OUT_OF_RANGE, FOLLOWER, log_start_offset=0,
                                    high_watermark=200, auto_reset="none",
                                    validation_supported=True, now_s=0.0)
    assert action.error is None and st.state is State.VALIDATE and st.position == 500


def test_leader_out_of_range_follows_the_reset_policy() -> None:
    st = fetching(position=500)
    action = fetcher.on_fetch_error(st, E.OFFSET_OUT_OF_RANGE, LEADER, 0, 200, "none", True, 0.0)
    assert action.error == ("out_of_range", 500, 3)
    st = fetching(position=500)
    fetcher.on_fetch_error(st, E.OFFSET_OUT_OF_RANGE, LEADER, 0, 200, "earliest", True, 0.0)
    assert st.state is State.RESET and st.reset_policy == "earliest"


def test_fenced_fetch_validates_once_metadata_is_newer() -> None:
    st = fetching()
    action = fetcher.on_fetch_error(st, E.FENCED_LEADER_EPOCH, LEADER, 0, 0, "none", True, 0.0)
    assert action.refresh_metadata and st.state is State.VALIDATE
    assert not st.ready(0.0) or st.awaiting_metadata_epoch == 5
    fetcher.on_metadata(st, LEADER, 5, True)  # the same epoch: still waiting
    assert st.awaiting_metadata_epoch == 5
    fetcher.on_metadata(st, 2, 6, True)
    assert st.awaiting_metadata_epoch == -1 and (st.leader, st.leader_epoch) == (2, 6)


def test_a_leader_change_in_metadata_starts_validation_and_an_older_view_does_not() -> None:
    st = fetching()
    assert not fetcher.on_metadata(st, LEADER, 4, True)  # older than what we know: ignored
    assert (st.leader_epoch, st.state) == (5, State.FETCH)
    assert fetcher.on_metadata(st, 2, 6, True) and st.state is State.VALIDATE
    st = fetching(epoch=-1)  # no epoch to validate with (e.g. a plain seek): fetch on
    assert not fetcher.on_metadata(st, 2, 6, True) and st.state is State.FETCH
    st = fetching()
    assert not fetcher.on_metadata(st, 2, 6, False)  # broker too old for KIP-320: skipped


def test_a_seek_with_an_epoch_newer_than_metadata_waits_for_metadata_that_new() -> None:
    """A committed (offset, epoch) from a leader our metadata does not know yet: validating it
    with the leader we know (or a lagging broker's view) would be judged by an older epoch."""
    st = PartitionState(TP)
    fetcher.on_metadata(st, leader=1, leader_epoch=3, validation_supported=True)
    st.seek(100, 5, validate=True)
    assert st.state is State.VALIDATE and st.awaiting_metadata_epoch == 4
    assert not fetcher.on_metadata(st, leader=1, leader_epoch=4, validation_supported=True)
    assert st.awaiting_metadata_epoch == 4, "a view older than the epoch does not release it"
    fetcher.on_metadata(st, leader=2, leader_epoch=5, validation_supported=True)
    assert st.awaiting_metadata_epoch == fetcher.NO_EPOCH and st.state is State.VALIDATE
    assert (st.position, st.position_epoch, st.leader, st.leader_epoch) == (100, 5, 2, 5)
    # an epoch our metadata already covers is validated at once
    st.seek(50, 4, validate=True)
    assert st.awaiting_metadata_epoch == fetcher.NO_EPOCH and st.state is State.VALIDATE
