"""LeaderAndIsr (key 4), versions 2-4. Controller to broker.

v2 carries broker_epoch (KIP-380); v3 adds adding/removing replicas (not used: no reassignment);
v4 is flexible and is what the controller sends. Before anything, a request that arrives before
the controller has confirmed our generation (no registration answer yet, or the last generation
declared over) waits for that answer, bounded (app.control_request_ready; unanswered if none
comes, so the controller resends it): a LeaderAndIsr meant for our previous process must be judged
against our own generation, never adopted as it. Then fenced (fencing.ControlEpochs.admit):
an older broker epoch is STALE_BROKER_EPOCH, so the first LeaderAndIsr a restarted broker
processes can never be one sent before it started; an older controller epoch is
STALE_CONTROLLER_EPOCH; either way nothing is applied.

An admitted request is applied (`apply`) with no await between fencing and applying. First the
settings of its topics, which every topic state carries (epochlog's tagged field `configs`,
protocol/apis/leader_and_isr.py; replicas.ReplicaManager.take_topic_settings), so the logs it
opens are created with them and a change reaches the partitions open here; then each partition
state, applied when newer (replicas.ReplicaManager.apply_partition_state; not newer:
per-partition STALE_CONTROLLER_EPOCH). The first LeaderAndIsr of a generation from a
controller epoch lists every partition placed here: local partitions it leaves out are deleted.
The deterministic simulation's broker (tests/sim) calls `apply` too.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.leader_and_isr import (
    LeaderAndIsrPartitionError,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)

from ..partition import PartitionState
from . import register
from ._context import replicas_of
from ._control import admitted, carried_settings

if TYPE_CHECKING:
    from ._context import BrokerApp, RequestContext

log = logging.getLogger("epochlog.broker")


async def handle(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse | None:
    app = ctx.app
    error = await admitted(app, "LeaderAndIsr", request)
    if error is None:
        return None  # no generation to judge it against: unanswered, the controller resends
    if error:
        return LeaderAndIsrResponse(error_code=error)
    return apply(app, request)


def apply(app: BrokerApp, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    """An admitted LeaderAndIsr: its topics' settings, then its partition states."""
    replicas = replicas_of(app)
    replicas.take_topic_settings(carried_settings(request.topic_states))
    errors, listed = [], []
    for topic in request.topic_states:
        for ps in topic.partition_states:
            state = PartitionState(ps.leader, ps.leader_epoch, ps.partition_epoch,
                                   tuple(ps.replicas), tuple(ps.isr), ps.controller_epoch)
            code = replicas.apply_partition_state(topic.topic_name, ps.partition_index, state,
                                                  ps.is_new)
            listed.append((topic.topic_name, ps.partition_index))
            errors.append(LeaderAndIsrPartitionError(topic_name=topic.topic_name,
                                                     partition_index=ps.partition_index,
                                                     error_code=code))
    generation = app.epochs.generation
    first = replicas.synced_at != (generation, request.controller_epoch)
    deleted = replicas.forget_unlisted(listed, generation, request.controller_epoch)
    if first:
        log.info("broker %d generation %d: first LeaderAndIsr from controller epoch %d: %d "
                 "partitions, leading %d, %d deleted as no longer ours", app.broker_id,
                 generation, request.controller_epoch, len(listed), replicas.leader_count(),
                 len(deleted))
    return LeaderAndIsrResponse(partition_errors=errors)


register(ApiKey.LEADER_AND_ISR, 2, 4, handle)
