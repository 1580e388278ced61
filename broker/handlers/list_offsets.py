"""ListOffsets (key 2), versions 1-7.

v1 answers one offset per partition; v2 isolation_level; v4 current_leader_epoch (KIP-320
fencing: older -> FENCED_LEADER_EPOCH, newer -> UNKNOWN_LEADER_EPOCH, -1 no check) and the answer's
leader_epoch; v6 is flexible; v7 timestamp -3 (the record with the largest timestamp).

Only the leader answers (NOT_LEADER_OR_FOLLOWER elsewhere). Timestamps: -2 earliest (the log
start offset), -1 latest (the high watermark for consumers, which is also the last stable offset:
no transactions; the log end for replicas), -3 (v7) the first record holding the largest
timestamp, otherwise the first record at or after the timestamp (none: offset -1). The leader
epoch answered is the current one for -1, else the epoch holding the offset (epoch cache).
"""

from __future__ import annotations

from typing import Any

from protocol.apis.list_offsets import (ListOffsetsPartition, ListOffsetsPartitionResponse,
                                        ListOffsetsRequest, ListOffsetsResponse,
                                        ListOffsetsTopicResponse)
from protocol.error_codes import ErrorCode

from ..partition import Partition
from ..storage import StorageError
from . import register
from ._partitions import leader

E = ErrorCode
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
MAX_TIMESTAMP_VERSION_MIN = 7


async def handle(ctx: Any, request: ListOffsetsRequest) -> ListOffsetsResponse:
    from_replica = request.replica_id >= 0
    topics = []
    for topic in request.topics:
        answers = [_one(ctx.app, topic.name, p, from_replica, ctx.version)
                   for p in topic.partitions]
        topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=answers))
    return ListOffsetsResponse(topics=topics)


def _one(app: Any, topic: str, p: ListOffsetsPartition, from_replica: bool,
         version: int) -> ListOffsetsPartitionResponse:
    answer = ListOffsetsPartitionResponse(partition_index=p.partition_index)
    partition, answer.error_code = leader(app, topic, p.partition_index, p.current_leader_epoch)
    if partition is None:
        return answer
    if p.timestamp == MAX_TIMESTAMP and version < MAX_TIMESTAMP_VERSION_MIN:
        answer.error_code = E.UNSUPPORTED_VERSION
        return answer
    try:
        found = _lookup(partition, p.timestamp, from_replica)
    except StorageError as exc:
        answer.error_code = exc.error_code
        return answer
    if found is not None:
        answer.offset, answer.timestamp = found
        answer.leader_epoch = partition.leader_epoch if p.timestamp == LATEST else \
            partition.log.epoch_cache.epoch_for_offset(answer.offset)
    return answer


def _lookup(partition: Partition, timestamp: int, from_replica: bool) -> tuple[int, int] | None:
    """(offset, timestamp) answered, or None when no record qualifies."""
    end = partition.readable_end(from_replica)
    if timestamp == LATEST:
        return end, -1
    if timestamp == EARLIEST:
        return partition.log_start_offset, -1
    if timestamp == MAX_TIMESTAMP:
        timestamp = max((s.max_timestamp_ms for s in partition.log.segments), default=-1)
        if timestamp < 0:
            return None
    found = partition.log.offset_for_timestamp(timestamp)
    if found is None or found[0] >= end:
        return None
    return found


register(2, 1, 7, handle)
