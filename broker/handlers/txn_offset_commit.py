"""TxnOffsetCommit (key 28), versions 0-3 (v3 is flexible). v2 adds committed_leader_epoch; v3
the consumer's generation, member id and group instance id (KIP-447), checked as an
OffsetCommit's are so that a zombie consumer-producer is fenced, and may be answered
PRODUCER_FENCED (older versions get INVALID_PRODUCER_EPOCH for it, KIP-588).

Sent to the group coordinator by a transactional producer after AddOffsetsToTxn: the offsets are
written to the group's `__consumer_offsets` partition in the producer's transaction and take
effect when its COMMIT marker arrives there, or are dropped by an ABORT
(broker/groups/txn_offsets.py). An older producer epoch than the partition has seen is
INVALID_PRODUCER_EPOCH (storage's producer state fences it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)

from . import register
from ._groups import commit_offsets, instance_id
from ._txn import fenced_as

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: TxnOffsetCommitRequest
                 ) -> TxnOffsetCommitResponse:
    v = ctx.version
    errors = await commit_offsets(ctx, request.group_id, request.topics, 2,
                                  request.generation_id if v >= 3 else -1,
                                  request.member_id if v >= 3 else "",
                                  instance_id(ctx, request.group_instance_id, 3),
                                  producer=(request.producer_id, request.producer_epoch))
    return TxnOffsetCommitResponse(topics=[
        TxnOffsetCommitResponseTopic(name=t.name, partitions=[
            TxnOffsetCommitResponsePartition(
                partition_index=p.partition_index,
                error_code=fenced_as(errors[(t.name, p.partition_index)], v, 3))
            for p in t.partitions])
        for t in request.topics])


register(ApiKey.TXN_OFFSET_COMMIT, 0, 3, handle)
