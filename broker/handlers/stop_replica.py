"""StopReplica (key 5), versions 1-3. Controller to broker.

v1 carries broker_epoch (KIP-380) and one delete flag for the whole request; v2 is flexible; v3
(what the controller sends) has per-partition leader epochs and delete flags. Held first,
bounded, until the controller has confirmed our generation (see leader_and_isr.py;
app.control_request_ready), then fenced (fencing.ControlEpochs.admit), so a StopReplica meant
for our previous generation, arriving after a bounce (even before our registration answer), is
refused with STALE_BROKER_EPOCH and changes nothing. Then per partition: a leader
epoch below ours is FENCED_LEADER_EPOCH (-1 and -2 skip the check; v1-2 carry none); otherwise
the partition stops being served here, and its folder is deleted when asked.

Applied in slices as LeaderAndIsr is (leader_and_isr.py: SLICE_PARTITIONS_MAX or SLICE_MS_MAX,
then the loop's turn, and the request must still be admitted): deleting a topic of 10,000
partitions closes and deletes 10,000 folders, and held the loop meanwhile (issue 33). The topics
left without replicas are forgotten once, at the end.
"""

from __future__ import annotations

import asyncio
import logging
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
from .leader_and_isr import SLICE_MS_MAX, SLICE_PARTITIONS_MAX, YIELD_MS

if TYPE_CHECKING:
    from ._context import RequestContext

log = logging.getLogger("epochlog.broker")


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
    replicas = replicas_of(app)
    items = _items(request, ctx.version)
    generation, clock = app.epochs.generation, replicas.clock
    errors: list[StopReplicaPartitionError] = []
    try:
        while len(errors) < len(items):
            if errors:  # a slice done: the loop's turn, then still ours to apply?
                await asyncio.sleep(YIELD_MS / 1000)
                error = app.epochs.still_admits("StopReplica", generation,
                                                request.controller_epoch)
                if error:
                    log.info("broker %d: StopReplica of %d partitions stopped after %d: fenced "
                             "meanwhile", app.broker_id, len(items), len(errors))
                    return StopReplicaResponse(error_code=error)
            deadline = clock() + SLICE_MS_MAX
            for topic, index, leader_epoch, delete in items[len(errors):
                                                            len(errors) + SLICE_PARTITIONS_MAX]:
                code = replicas.stop_replica(topic, index, leader_epoch, delete,
                                             forget_topic=False)
                errors.append(StopReplicaPartitionError(topic_name=topic, partition_index=index,
                                                        error_code=code))
                if clock() >= deadline:
                    break
    finally:
        replicas.forget_unused_topics({topic for topic, _, _, delete in items if delete})
    return StopReplicaResponse(partition_errors=errors)


register(ApiKey.STOP_REPLICA, 1, 3, handle)
