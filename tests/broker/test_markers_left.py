"""The second phase's rules (broker/txn/markers_left.py), with no connection: which answers end
a partition's wait, which stop the coordinator, and the backoff between rounds."""

from __future__ import annotations

import logging

import pytest

from epochlog.broker.txn.markers_left import RETRY_FIRST_MS, RETRY_MAX_MS, MarkersLeft
from epochlog.protocol.apis.write_txn_markers import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersResponse,
)
from epochlog.protocol.error_codes import ErrorCode as E

PARTITIONS = [("a", 0), ("a", 1), ("b", 0)]


def markers() -> MarkersLeft:
    return MarkersLeft("t", 7, 2, True, 5, PARTITIONS)


def answer(*results: tuple[str, int, int]) -> WriteTxnMarkersResponse:
    return WriteTxnMarkersResponse(markers=[WritableTxnMarkerResult(producer_id=7, topics=[
        WritableTxnMarkerTopicResult(name=t, partitions=[
            WritableTxnMarkerPartitionResult(partition_index=p, error_code=e)])
        for t, p, e in results])])


@pytest.mark.parametrize(("error", "left", "fenced"), [
    (0, [("a", 1), ("b", 0)], None),
    (E.INVALID_PRODUCER_EPOCH, [("a", 1), ("b", 0)], None),  # a later epoch's marker is there
    (E.NOT_LEADER_OR_FOLLOWER, PARTITIONS, None),
    (E.NOT_ENOUGH_REPLICAS, PARTITIONS, None),
    (E.REQUEST_TIMED_OUT, PARTITIONS, None),
    (E.TRANSACTION_COORDINATOR_FENCED, PARTITIONS, "a-0: a newer coordinator's marker is there"),
])
def test_what_an_answer_does_to_a_partition(error: int, left: list[tuple[str, int]],
                                            fenced: str | None) -> None:
    m = markers()
    m.answered(answer(("a", 0, error)))
    assert (sorted(m.left), m.fenced) == (left, fenced)


def test_an_answer_that_never_came_leaves_every_partition_waiting() -> None:
    m = markers()
    m.answered(None)
    assert sorted(m.left) == PARTITIONS and m.fenced is None


def test_the_request_names_each_partition_once_with_the_coordinator_epoch() -> None:
    r = markers().request([("a", 0), ("a", 1), ("b", 0)])
    (marker,) = r.markers
    assert (marker.producer_id, marker.producer_epoch, marker.transaction_result,
            marker.coordinator_epoch) == (7, 2, True, 5)
    assert [(t.name, t.partition_indexes) for t in marker.topics] == [("a", [0, 1]), ("b", [0])]


def test_rounds_back_off_doubling_to_the_most_and_warn_now_and_then(
        caplog: pytest.LogCaptureFixture) -> None:
    m = markers()
    with caplog.at_level(logging.WARNING, "epochlog.broker"):
        delays = [m.retry_after_ms() for _ in range(60)]
    assert delays[:6] == [RETRY_FIRST_MS * 2 ** i for i in range(5)] + [RETRY_MAX_MS]
    assert set(delays[5:]) == {RETRY_MAX_MS}
    assert caplog.messages == ["transactional id t: COMMIT markers still missing on "
                               "[('a', 0), ('a', 1), ('b', 0)] after 60 attempts"]
