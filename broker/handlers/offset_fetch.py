"""OffsetFetch (key 9), versions 1-7.

v1 errors per partition only; v2 adds the top-level error and null topics (every partition the
group committed); v3 throttle time; v5 committed_leader_epoch (KIP-320: the epoch committed with
the offset, -1 if none); v6 is flexible; v7 require_stable: a partition whose offset waits for a
transaction's outcome (TxnOffsetCommit, broker/groups/txn_offsets.py) answers
UNSTABLE_OFFSET_COMMIT, retried by the consumer; without it, the last committed offset. A
partition without a committed offset answers offset -1.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._context import groups_of

if TYPE_CHECKING:
    from ..groups.state import CommittedOffset
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    v = ctx.version
    wanted = None if request.topics is None else [
        (t.name, p) for t in request.topics for p in t.partition_indexes]
    error: int
    found: dict[tuple[str, int], CommittedOffset | None]
    if not request.group_id:
        error, found = ErrorCode.INVALID_GROUP_ID, {}
    else:
        error, found = groups_of(ctx.app).fetch_offsets(request.group_id, wanted)
    if error:
        found = dict.fromkeys(wanted or [])
    unstable: set[tuple[str, int]] = set()
    if not error and v >= 7 and request.require_stable:
        unstable = groups_of(ctx.app).unstable(request.group_id, list(found))
    by_topic: dict[str, list[OffsetFetchResponsePartition]] = {}
    for (topic, partition), committed in sorted(found.items()):
        answer = OffsetFetchResponsePartition(partition_index=partition, committed_offset=-1,
                                              committed_leader_epoch=-1, metadata="",
                                              error_code=error if v < 2 else 0)
        if (topic, partition) in unstable:
            answer.error_code = ErrorCode.UNSTABLE_OFFSET_COMMIT
            by_topic.setdefault(topic, []).append(answer)
            continue
        if committed is not None:
            answer.committed_offset = committed.offset
            answer.committed_leader_epoch = committed.leader_epoch if v >= 5 else -1
            answer.metadata = committed.metadata
        by_topic.setdefault(topic, []).append(answer)
    return OffsetFetchResponse(
        error_code=error,
        topics=[OffsetFetchResponseTopic(name=name, partitions=parts)
                for name, parts in by_topic.items()])


register(ApiKey.OFFSET_FETCH, 1, 7, handle)
