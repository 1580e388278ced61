"""DeleteRecords (key 21), versions 0-2.

v1 only changes throttling; v2 is flexible. On the partition's leader: offsets below the one
asked (-1: the high watermark) become unreadable, the log start offset moves (segments wholly
below it are deleted) and the log start checkpoint is written before the answer, so a restart
keeps it. Followers learn the new log start from their next fetch answer and move theirs. The
answer waits, at most timeout_ms, until every in-sync replica has moved (the low watermark, the
lowest log start among them, reaches the offset), as Kafka's DeleteRecords purgatory does; past
the timeout it is REQUEST_TIMED_OUT with the low watermark reached so far.

Errors per partition: UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, OFFSET_OUT_OF_RANGE (an
offset beyond the high watermark), POLICY_VIOLATION on a compacted-only topic (Kafka refuses
them too: compaction, not deletion, decides what such a log keeps).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.delete_records import (
    DeleteRecordsPartitionResult,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteRecordsTopicResult,
)
from epochlog.protocol.error_codes import ErrorCode

from ..partition import InvalidPartitionState, Partition
from . import register
from ._context import replicas_of
from ._partitions import leader

if TYPE_CHECKING:
    from ._context import RequestContext

E = ErrorCode
POLL_S = 0.05  # how often a waiting answer looks at the followers' log starts
TIMEOUT_MS_MAX = 300_000


async def handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    moved: list[tuple[DeleteRecordsPartitionResult, Partition, int]] = []
    topics = []
    for t in request.topics:
        results = []
        for p in t.partitions:
            result = DeleteRecordsPartitionResult(partition_index=p.partition_index,
                                                  low_watermark=-1)
            partition, error = leader(ctx.app, t.name, p.partition_index)
            if partition is not None:
                error = _delete(partition, p.offset, result)
                if not error:
                    moved.append((result, partition, result.low_watermark))
            result.error_code = error
            results.append(result)
        topics.append(DeleteRecordsTopicResult(name=t.name, partitions=results))
    if moved:
        replicas_of(ctx.app).logs.write_checkpoints()
        await _wait_for_followers(moved, min(max(request.timeout_ms, 0), TIMEOUT_MS_MAX))
    return DeleteRecordsResponse(topics=topics)


def _delete(partition: Partition, offset: int, result: DeleteRecordsPartitionResult) -> int:
    if not partition.log.config.delete:
        return E.POLICY_VIOLATION
    if offset < -1 or offset > partition.high_watermark:
        return E.OFFSET_OUT_OF_RANGE
    try:
        result.low_watermark = partition.delete_records_before(offset)
    except InvalidPartitionState:  # leadership moved between the check and now
        return E.NOT_LEADER_OR_FOLLOWER
    return 0


async def _wait_for_followers(moved: list[tuple[DeleteRecordsPartitionResult, Partition, int]],
                              timeout_ms: int) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
    while True:
        waiting = False
        for result, partition, target in moved:
            if result.error_code:
                continue
            if not partition.is_leader:
                result.error_code = E.NOT_LEADER_OR_FOLLOWER
                continue
            result.low_watermark = partition.low_watermark()
            waiting |= result.low_watermark < target
        if not waiting:
            return
        if asyncio.get_running_loop().time() >= deadline:
            for result, _, target in moved:
                if not result.error_code and result.low_watermark < target:
                    result.error_code = E.REQUEST_TIMED_OUT
            return
        await asyncio.sleep(POLL_S)


register(ApiKey.DELETE_RECORDS, 0, 2, handle)
