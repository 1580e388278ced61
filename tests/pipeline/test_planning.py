"""Offset ranges as Spark's Kafka source plans them: a trigger's cap shared in proportion to
what each partition has waiting (a small one never starved), large ranges split for
minPartitions and maxRecordsPerPartition, and the checkpoint's JSON with leader epochs."""

from __future__ import annotations

from epochlog.client.types import TopicPartition
from epochlog.pipeline.planning import (
    OffsetRange,
    Position,
    available,
    from_json,
    rate_limit,
    split,
    to_json,
)

A, B, C = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("u", 0)


def test_checkpoint_json_round_trips_with_epochs_and_reads_sparks_form() -> None:
    positions = {A: Position(42, 3), B: Position(0, -1), C: Position(7, 0)}
    assert to_json(positions) == {"t": {"0": {"offset": 42, "epoch": 3},
                                        "1": {"offset": 0, "epoch": -1}},
                                  "u": {"0": {"offset": 7, "epoch": 0}}}
    assert from_json(to_json(positions)) == positions
    assert from_json({"t": {"0": 42}}) == {A: Position(42, -1)}  # Spark's Kafka checkpoint


def test_rate_limit_shares_the_cap_in_proportion() -> None:
    start = {A: 0, B: 100, C: 5}
    latest = {A: Position(1000, 2), B: Position(200, 2), C: Position(6, 1)}
    assert available(start, latest) == 1101
    capped = rate_limit(start, latest, 110)
    # A: 110*1000/1101 = 99.9 -> 99; B: 9.99 -> 9; C: 0.0999 -> ceil to 1 (never starved)
    assert capped == {A: Position(99, 2), B: Position(109, 2), C: Position(6, 1)}
    assert rate_limit(start, latest, 10_000) == latest
    assert rate_limit({A: 5}, {A: Position(5, 1)}, 10) == {A: Position(5, 1)}


def test_split_for_min_partitions_and_max_records() -> None:
    ranges = [OffsetRange(A, 0, 90, 4), OffsetRange(B, 10, 20, 4), OffsetRange(C, 5, 5, 1)]
    assert split(ranges, None, None) == ranges[:2]  # empty ranges need no task
    pieces = split(ranges, 10, None)
    assert sum(r.size for r in pieces) == 100
    assert [(r.tp, r.start, r.end) for r in pieces if r.tp == A] == [
        (A, 0, 10), (A, 10, 20), (A, 20, 30), (A, 30, 40), (A, 40, 50), (A, 50, 60),
        (A, 60, 70), (A, 70, 80), (A, 80, 90)]
    # only the first piece starts at the planned, validated position
    assert [r.start_epoch for r in pieces if r.tp == A] == [4] + [-1] * 8
    assert [(r.start, r.end) for r in split(ranges, None, 40) if r.tp == A] == [
        (0, 30), (30, 60), (60, 90)]
    assert split([OffsetRange(A, 0, 3)], 10, None) == [
        OffsetRange(A, 0, 1), OffsetRange(A, 1, 2), OffsetRange(A, 2, 3)]
