"""OffsetForLeaderEpoch (key 23), versions 0-4.

v1 answers the epoch of the end offset; v2 current_leader_epoch (KIP-320 fencing, on leader and
follower alike: older FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, -1 no check); v3 replica_id
(KIP-392); v4 is flexible.

Only the leader answers (KIP-392: "only leaders are allowed to handle OffsetsForLeaderEpoch
queries"; NOT_LEADER_OR_FOLLOWER on a follower), from its epoch cache (KIP-101, with KIP-279's
rule that the answer names the largest epoch at or below the one asked for): the latest epoch
ends at the log end; an older one ends where the next higher epoch starts; an epoch above the
latest, or an empty cache, is undefined (epoch -1, offset -1).

Consumers (replica_id -1, v3+; KIP-392): the end offset is capped at the high watermark, so a
consumer is never told of offsets it cannot read yet. Just after an election the new leader's
high watermark may lie below committed offsets (it is known once it reaches the start of the
leader's epoch, KIP-207); an answer that would be capped by such a high watermark is
OFFSET_NOT_AVAILABLE instead (the consumer retries), because a too-small end offset would look to
the consumer like a truncation. The seed names the case "a request for the latest epoch in this
window"; every answer whose end lies above an unknown high watermark is that case or one as bad.
Versions 0-2 carry no replica_id (decoded as -2, Kafka's debugging id) and are not capped.

The controller's log-end query (replica_id LOG_END_QUERY, -3; KIP-966 unclean recovery, see
controller/unclean_recovery.py) is answered from whatever replica of the partition this broker
holds, leading, following or waiting for a leader: (its latest leader epoch, its log end offset),
unfenced and uncapped. A replica whose log is offline answers KAFKA_STORAGE_ERROR, one we do not
hold UNKNOWN_TOPIC_OR_PARTITION: neither is a candidate.

`answer(app, request, version)` is the sync decision the simulation calls; `handle` wraps it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.offset_for_leader_epoch import (
    LOG_END_QUERY,
    EpochEndOffset,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopicResult,
)
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._context import replicas_of
from ._partitions import high_watermark_known, serving

if TYPE_CHECKING:
    from ._context import BrokerApp, RequestContext

CONSUMER = -1


async def handle(ctx: RequestContext,
                 request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    return answer(ctx.app, request, ctx.version)


def answer(app: BrokerApp, request: OffsetForLeaderEpochRequest,
           version: int) -> OffsetForLeaderEpochResponse:
    topics = []
    for topic in request.topics:
        answers = [_one(app, topic.topic, p, request.replica_id) for p in topic.partitions]
        topics.append(OffsetForLeaderTopicResult(topic=topic.topic, partitions=answers))
    return OffsetForLeaderEpochResponse(topics=topics)


def _one(app: BrokerApp, topic: str, p: OffsetForLeaderPartition,
         replica_id: int) -> EpochEndOffset:
    answer = EpochEndOffset(partition=p.partition)
    if replica_id == LOG_END_QUERY:
        return _log_end(app, topic, answer)
    partition, answer.error_code = serving(app, topic, p.partition, p.current_leader_epoch)
    if partition is None:
        return answer
    epoch, end_offset = partition.log.end_offset_for_epoch(p.leader_epoch)
    if replica_id == CONSUMER and end_offset > partition.high_watermark:
        if not high_watermark_known(partition):
            answer.error_code = ErrorCode.OFFSET_NOT_AVAILABLE
            return answer
        end_offset = partition.high_watermark
    answer.leader_epoch, answer.end_offset = epoch, end_offset
    return answer


def _log_end(app: BrokerApp, topic: str, answer: EpochEndOffset) -> EpochEndOffset:
    replicas = replicas_of(app)
    key = (topic, answer.partition)
    log = replicas.logs.get(topic, answer.partition)
    if key in replicas.offline:
        answer.error_code = ErrorCode.KAFKA_STORAGE_ERROR
    elif log is None:
        answer.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    else:
        answer.leader_epoch = log.epoch_cache.latest_epoch
        answer.end_offset = log.log_end_offset
    return answer


register(ApiKey.OFFSET_FOR_LEADER_EPOCH, 0, 4, handle)
