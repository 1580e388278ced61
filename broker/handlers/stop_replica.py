"""StopReplica (key 5), versions 1-3. Controller to broker.

v1 carries broker_epoch (KIP-380) and one delete flag for the whole request; v2 is flexible; v3
(what the controller sends) has per-partition leader epochs and delete flags. Held first,
bounded, until the controller has confirmed our generation (see leader_and_isr.py;
app.control_request_ready), then fenced (fencing.ControlEpochs.admit), so a StopReplica meant
for our previous generation, arriving after a bounce (even before our registration answer), is
refused with STALE_BROKER_EPOCH and changes nothing. Then per partition: a leader
epoch below ours is FENCED_LEADER_EPOCH (-1 and -2 skip the check; v1-2 carry none); otherwise
the partition stops being served here, and its folder is deleted when asked.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.stop_replica import (
    StopReplicaPartitionError,
    StopReplicaRequest,
    StopReplicaResponse,
)

from . import register
from ._context import replicas_of
from ._control import admitted

if TYPE_CHECKING:
    from ._context import RequestContext


def _items(request: StopReplicaRequest, version: int) -> list[tuple[str, int, int, bool]]:
    if version >= 3:
        return [(t.topic_name, p.partition_index, p.leader_epoch, p.delete_partition)
                for t in request.topic_states for p in t.partition_states]
    return [(t.name, index, -1, request.delete_partitions)
            for t in request.topics for index in t.partition_indexes]


async def handle(ctx: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse | None:
    app = ctx.app
    error = await admitted(app, "StopReplica", request)
    if error is None:
        return None
    if error:
        return StopReplicaResponse(error_code=error)
    errors = []
    for topic, index, leader_epoch, delete in _items(request, ctx.version):
        code = replicas_of(app).stop_replica(topic, index, leader_epoch, delete)
        errors.append(StopReplicaPartitionError(topic_name=topic, partition_index=index,
                                                error_code=code))
    return StopReplicaResponse(partition_errors=errors)


register(ApiKey.STOP_REPLICA, 1, 3, handle)
