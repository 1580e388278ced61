"""OffsetCommit (key 8), versions 2-8.

v2-4 carry a retention time (ignored: offsets are kept until a tombstone, no expiry yet); v3
throttle time; v6 committed_leader_epoch (KIP-320), stored with the offset (offsets value schema
v3) and given back by OffsetFetch v5+; v7 group_instance_id; v8 is flexible.

A commit from a member is checked against the group (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION,
REBALANCE_IN_PROGRESS, FENCED_INSTANCE_ID); generation -1 with an empty or unknown group is a
simple consumer's (kcat, assign() + commit) and is accepted, as Kafka does. The offsets are
appended to the group's `__consumer_offsets` partition and answered once replicated to the ISR
(broker/groups/coordinator.py maps the append's errors as Kafka does). Per partition:
OFFSET_METADATA_TOO_LARGE past offset_metadata_max_bytes, UNKNOWN_TOPIC_OR_PARTITION for a
partition the cluster does not have.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)

from . import register
from ._groups import commit_offsets, instance_id

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    errors = await commit_offsets(ctx, request.group_id, request.topics, 6,
                                  request.generation_id_or_member_epoch, request.member_id,
                                  instance_id(ctx, request.group_instance_id, 7))
    return OffsetCommitResponse(topics=[
        OffsetCommitResponseTopic(name=t.name, partitions=[
            OffsetCommitResponsePartition(partition_index=p.partition_index,
                                          error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions])
        for t in request.topics])


register(ApiKey.OFFSET_COMMIT, 2, 8, handle)
