"""ListOffsets (key 2), versions 1-7.

v1 answers one offset per partition; v2 isolation_level; v4 current_leader_epoch (KIP-320 fencing,
_partitions.serving: older FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, -1 no check, on leader
and follower alike) and the answer's leader_epoch; v6 is flexible; v7 timestamp -3 (the record
with the largest timestamp).

Who answers, by replica_id (Kafka's rule, and KIP-392's use of the debugging id):
    -1 (a consumer)           the leader only (NOT_LEADER_OR_FOLLOWER on a follower); reads stop
                              at the high watermark
    -2 (KIP-392's sentinel)   any replica of the partition, from its own log: a consumer reading
                              from a follower asks that follower for ITS log start offset when it
                              resets to "earliest" (the seed's case 3); reads stop at that
                              replica's high watermark (unlike Kafka, whose debugging reads go to
                              the log end: a consumer must never be handed an offset that is not
                              known committed)
    >= 0 (a broker)           the leader only; reads stop at the log end

Timestamps: -2 earliest (the log start offset), -1 latest (the high watermark; for
isolation_level read_committed the last stable offset, below which every transaction is settled;
the log end for brokers), -3 (v7) the first record holding
the largest timestamp, otherwise the first record at or after the timestamp (none below the end:
offset -1). The leader epoch answered is the current one for -1, else the epoch holding the
offset (epoch cache).

KIP-207 (the seed's case 1 for ListOffsets): just after an election a new leader does not know
the true high watermark until it reaches the start of its own epoch. Until then a consumer's
"latest", and a timestamp lookup that finds nothing below the high watermark, are
OFFSET_NOT_AVAILABLE (the consumer retries) rather than a stale offset.

`answer(app, request, version)` is the sync decision the simulation calls; `handle` wraps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopicResponse,
)
from epochlog.protocol.error_codes import ErrorCode

from ..partition import Partition
from ..storage import StorageError
from . import register
from ._partitions import high_watermark_known, serving

if TYPE_CHECKING:
    from ._context import BrokerApp, RequestContext

E = ErrorCode
LATEST, EARLIEST, MAX_TIMESTAMP = -1, -2, -3
MAX_TIMESTAMP_VERSION_MIN = 7
ANY_REPLICA = -2  # KIP-392's sentinel: a client reading from whichever replica it asks
READ_COMMITTED = 1  # isolation_level


async def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    return answer(ctx.app, request, ctx.version)


def answer(app: BrokerApp, request: ListOffsetsRequest, version: int) -> ListOffsetsResponse:
    topics = []
    for topic in request.topics:
        answers = [_one(app, topic.name, p, request.replica_id, version,
                        version >= 2 and request.isolation_level == READ_COMMITTED)
                   for p in topic.partitions]
        topics.append(ListOffsetsTopicResponse(name=topic.name, partitions=answers))
    return ListOffsetsResponse(topics=topics)


def _one(app: BrokerApp, topic: str, p: ListOffsetsPartition, replica_id: int,
         version: int, read_committed: bool) -> ListOffsetsPartitionResponse:
    answer = ListOffsetsPartitionResponse(partition_index=p.partition_index)
    partition, answer.error_code = serving(app, topic, p.partition_index, p.current_leader_epoch,
                                           follower_ok=replica_id == ANY_REPLICA)
    if partition is None:
        return answer
    if p.timestamp == MAX_TIMESTAMP and version < MAX_TIMESTAMP_VERSION_MIN:
        answer.error_code = E.UNSUPPORTED_VERSION
        return answer
    try:
        found = _lookup(partition, p.timestamp, replica_id >= 0, read_committed)
    except StorageError as exc:
        answer.error_code = exc.error_code
        return answer
    if found is None and replica_id < 0 and p.timestamp != EARLIEST \
            and not high_watermark_known(partition):
        answer.error_code = E.OFFSET_NOT_AVAILABLE
    elif found is not None:
        answer.offset, answer.timestamp = found
        answer.leader_epoch = partition.leader_epoch if p.timestamp == LATEST else \
            partition.log.epoch_cache.epoch_for_offset(answer.offset)
    return answer


def _lookup(partition: Partition, timestamp: int, from_broker: bool, read_committed: bool
            ) -> tuple[int, int] | None:
    """(offset, timestamp) answered, or None when no record qualifies (for a consumer's latest:
    when the high watermark is not known yet)."""
    end = partition.readable_end(from_broker, read_committed)
    if timestamp == LATEST:
        if not from_broker and not high_watermark_known(partition):
            return None
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


register(ApiKey.LIST_OFFSETS, 1, 7, handle)
