"""Offset ranges: what each Spark task reads, how a trigger is capped, and the checkpoint format.

Sans-IO: the driver asks the cluster for offsets (pipeline.cluster) and hands them here.

A streaming offset, as Spark writes it to the query's checkpoint, is per partition the next
offset to read and a leader epoch:

    {"orders": {"0": {"offset": 42, "epoch": 3}, "1": {"offset": 7, "epoch": 3}}}

(the same shape the startingOffsets option takes). The epoch is what the leader answered
ListOffsets with when the offset was planned: the leader's epoch then, which is the epoch of the
record before the offset or a later one of the same leader. Validating with it finds the same
divergence as with the record's own epoch: OffsetForLeaderEpoch answers with the end of the
largest epoch at or below it that the leader's log holds, and the records below the offset are
the old leader's in every epoch up to it. -1 means unknown (then no validation is possible: a
cluster without KIP-320).

Ranges follow Spark's Kafka source: a trigger's cap (maxOffsetsPerTrigger) is shared among the
partitions in proportion to what each has waiting (rounding down, but at least one record to a
partition that has some, so a small one is never starved); minPartitions and
maxRecordsPerPartition split large ranges into pieces of nearly equal size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from epochlog.client.types import TopicPartition

NO_EPOCH = -1


@dataclass(frozen=True, order=True)
class Position:
    offset: int
    epoch: int = NO_EPOCH


@dataclass(frozen=True)
class OffsetRange:
    """Records [start, end) of one partition; start_epoch validates start (KIP-320)."""

    tp: TopicPartition
    start: int
    end: int
    start_epoch: int = NO_EPOCH

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


def to_json(positions: Mapping[TopicPartition, Position]) -> dict[str, Any]:
    out: dict[str, dict[str, dict[str, int]]] = {}
    for tp in sorted(positions):
        pos = positions[tp]
        out.setdefault(tp.topic, {})[str(tp.partition)] = {"offset": pos.offset,
                                                           "epoch": pos.epoch}
    return out


def from_json(offsets: Mapping[str, Any]) -> dict[TopicPartition, Position]:
    """The checkpoint's positions. Also takes Spark's Kafka form ({"t": {"0": 42}}), epoch -1."""
    out = {}
    for topic, partitions in offsets.items():
        for partition, value in partitions.items():
            tp = TopicPartition(topic, int(partition))
            if isinstance(value, dict):
                out[tp] = Position(int(value["offset"]), int(value.get("epoch", NO_EPOCH)))
            else:
                out[tp] = Position(int(value))
    return out


def rate_limit(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, Position],
               limit: int) -> dict[TopicPartition, Position]:
    """latest capped so that about `limit` records in all are read from start (Spark's
    KafkaMicroBatchStream.rateLimit)."""
    sizes = {tp: end.offset - start[tp] for tp, end in latest.items()
             if tp in start and end.offset - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        share = limit * (sizes[tp] / total)
        records = math.ceil(share) if share < 1 else math.floor(share)
        capped = start[tp] + records
        out[tp] = end if capped >= end.offset else Position(capped, end.epoch)
    return out


def available(start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, Position]
              ) -> int:
    return sum(max(end.offset - start.get(tp, end.offset), 0) for tp, end in latest.items())


def split(ranges: list[OffsetRange], min_partitions: int | None,
          max_records_per_partition: int | None) -> list[OffsetRange]:
    """Ranges cut into pieces so there are at least min_partitions of them (large ranges cut
    most) and none holds more than max_records_per_partition (Spark's
    KafkaOffsetRangeCalculator)."""
    nonempty = [r for r in ranges if r.size > 0]
    if not nonempty:
        return []
    total = sum(r.size for r in nonempty)
    out: list[OffsetRange] = []
    for r in nonempty:
        parts = 1
        if min_partitions is not None and len(nonempty) < min_partitions:
            parts = max(round(r.size / total * min_partitions), 1)
        if max_records_per_partition is not None:
            parts = max(parts, math.ceil(r.size / max_records_per_partition))
        parts = min(parts, r.size)
        out += _pieces(r, parts)
    return out


def _pieces(r: OffsetRange, parts: int) -> list[OffsetRange]:
    if parts <= 1:
        return [r]
    bounds = [r.start + (r.size * i) // parts for i in range(parts + 1)]
    # Only the first piece starts at the planned position; the others start mid-log, where
    # there is no checkpointed epoch to validate.
    return [OffsetRange(r.tp, lo, hi, r.start_epoch if i == 0 else NO_EPOCH)
            for i, (lo, hi) in enumerate(zip(bounds, bounds[1:], strict=False))]
