"""OffsetDelete (key 47), version 0.

Removes a group's committed offsets for the partitions named. Top level: GROUP_ID_NOT_FOUND,
NON_EMPTY_GROUP (a non-consumer group with members), NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS. Per partition: GROUP_SUBSCRIBED_TO_TOPIC while a member of the
consumer group subscribes to its topic, UNKNOWN_TOPIC_OR_PARTITION for one that does not exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)

from . import register
from ._context import groups_of

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    error, results = await groups_of(ctx.app).delete_offsets(request.group_id, wanted)
    topics: dict[str, list[OffsetDeleteResponsePartition]] = {}
    for t in request.topics:
        answers = topics.setdefault(t.name, [])
        for p in t.partitions:
            answers.append(OffsetDeleteResponsePartition(
                partition_index=p.partition_index,
                error_code=error or results.get((t.name, p.partition_index), 0)))
    if error:
        return OffsetDeleteResponse(error_code=error)
    return OffsetDeleteResponse(topics=[OffsetDeleteResponseTopic(name=name, partitions=parts)
                                        for name, parts in topics.items()])


register(ApiKey.OFFSET_DELETE, 0, 0, handle)
