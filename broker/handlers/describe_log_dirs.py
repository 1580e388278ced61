"""DescribeLogDirs (key 35), versions 0-4.

v1 only changes throttling; v2 is flexible; v3 a top-level error code; v4 the directory's total
and usable bytes (from statvfs). A broker has one data dir: one result, naming it by its absolute
path, with each asked partition it holds (a null list: all of them), its size in bytes and its
offset lag (a follower's distance from its high watermark to its log end, 0 on the leader, as
Kafka reports it). Partitions it does not hold are left out, as Kafka does.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_log_dirs import (
    DescribeLogDirsPartition,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeLogDirsResult,
    DescribeLogDirsTopic,
)

from . import register
from ._context import replicas_of

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: DescribeLogDirsRequest) -> DescribeLogDirsResponse:
    replicas = replicas_of(ctx.app)
    held = replicas.logs.logs
    if request.topics is None:
        wanted = sorted(held)
    else:
        wanted = [(t.topic, p) for t in request.topics for p in t.partitions
                  if (t.topic, p) in held]
    topics: dict[str, list[DescribeLogDirsPartition]] = {}
    for topic, index in wanted:
        log = held[(topic, index)]
        partition = replicas.get(topic, index)
        lag = 0 if partition is None or partition.is_leader else \
            max(0, log.high_watermark - log.log_end_offset)
        topics.setdefault(topic, []).append(DescribeLogDirsPartition(
            partition_index=index, partition_size=log.size_bytes, offset_lag=lag))
    data_dir = os.path.abspath(replicas.logs.data_dir)
    total = usable = -1
    try:
        stats = os.statvfs(data_dir)
        total, usable = stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize
    except OSError:
        pass  # answered as unknown (-1), as v4 allows
    return DescribeLogDirsResponse(results=[DescribeLogDirsResult(
        log_dir=data_dir, total_bytes=total, usable_bytes=usable,
        topics=[DescribeLogDirsTopic(name=n, partitions=ps) for n, ps in topics.items()])])


register(ApiKey.DESCRIBE_LOG_DIRS, 0, 4, handle)
