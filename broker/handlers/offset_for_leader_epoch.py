"""OffsetForLeaderEpoch (key 23), versions 0-4.

v1 answers the epoch of the end offset; v2 current_leader_epoch (KIP-320 fencing: older ->
FENCED_LEADER_EPOCH, newer -> UNKNOWN_LEADER_EPOCH, -1 no check); v3 replica_id; v4 is flexible.

Answered by the leader from its epoch cache (KIP-101, with KIP-279's rule that the answer names
the largest epoch at or below the one asked for): the latest epoch ends at the log end; an older
one ends where the next higher epoch starts; an epoch above the latest, or an empty cache, is
undefined (epoch -1, offset -1). Consumers (replica_id -1, v3+) get end offsets capped at the
high watermark, so a consumer is never told of offsets it cannot read yet.
"""

from __future__ import annotations

from typing import Any

from protocol.apis.offset_for_leader_epoch import (EpochEndOffset, OffsetForLeaderEpochRequest,
                                                   OffsetForLeaderEpochResponse,
                                                   OffsetForLeaderTopicResult)

from . import register
from ._partitions import leader

CONSUMER = -1


async def handle(ctx: Any, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    topics = []
    for topic in request.topics:
        answers = []
        for p in topic.partitions:
            answer = EpochEndOffset(partition=p.partition)
            partition, answer.error_code = leader(ctx.app, topic.topic, p.partition,
                                                  p.current_leader_epoch)
            if partition is not None:
                answer.leader_epoch, answer.end_offset = \
                    partition.log.end_offset_for_epoch(p.leader_epoch)
                if request.replica_id == CONSUMER and answer.end_offset >= 0:
                    answer.end_offset = min(answer.end_offset, partition.high_watermark)
            answers.append(answer)
        topics.append(OffsetForLeaderTopicResult(topic=topic.topic, partitions=answers))
    return OffsetForLeaderEpochResponse(topics=topics)


register(23, 0, 4, handle)
