"""Offsets committed in transactions wait for the marker (broker/groups/txn_offsets.py)."""

from __future__ import annotations

from epochlog.broker.groups.state import CommittedOffset
from epochlog.broker.groups.txn_offsets import PendingOffsets


def offset(n: int, at: int) -> CommittedOffset:
    return CommittedOffset(n, -1, "", 0, record_offset=at)


def test_a_commit_applies_a_producers_offsets_and_an_abort_drops_them() -> None:
    pending = PendingOffsets()
    pending.add(1, "g", ("t", 0), offset(5, 100))
    pending.add(1, "g", ("t", 0), offset(6, 101))  # the later one of the same transaction
    pending.add(1, "g", ("t", 1), offset(3, 102))
    pending.add(2, "g", ("t", 0), offset(9, 103))
    assert pending.pending("g", ("t", 0)) and pending.pending("g", ("t", 1))
    assert not pending.pending("other", ("t", 0))
    assert pending.end(1, commit=True) == [("g", ("t", 0), offset(6, 101)),
                                           ("g", ("t", 1), offset(3, 102))]
    assert pending.pending("g", ("t", 0))  # producer 2 still holds one
    assert not pending.pending("g", ("t", 1))
    assert pending.end(2, commit=False) == []
    assert len(pending) == 0
    assert pending.end(3, commit=True) == []  # a marker for a producer with nothing here
