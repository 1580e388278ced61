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

Before fencing, the settings of topics this request makes us open are fetched from the
controller (replicas.ReplicaManager.load_topic_settings, bounded), so their logs are created with
them; fencing and applying then run with no await between. Each partition state is applied when
newer (replicas.ReplicaManager.apply_partition_state; not newer: per-partition
STALE_CONTROLLER_EPOCH). The first LeaderAndIsr of a generation from a
controller epoch lists every partition placed here: local partitions it leaves out are deleted.
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

from ..controller_link import ControllerLinkClosed
from ..partition import PartitionState
from . import register
from ._context import controller_of, replicas_of
from ._control import admitted

if TYPE_CHECKING:
    from ._context import RequestContext

log = logging.getLogger("epochlog.broker")


async def handle(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse | None:
    app = ctx.app
    if not await app.control_request_ready("LeaderAndIsr"):
        return None  # no generation to judge it against: unanswered, the controller resends
    # Settings first: fencing and applying must see the same epochs, with no await between.
    try:
        await replicas_of(app).load_topic_settings(
            [((t.topic_name, ps.partition_index), ps.is_new)
             for t in request.topic_states for ps in t.partition_states],
            controller_of(app).forward)
    except ControllerLinkClosed:
        return None  # stopping: nothing is opened any more, and nothing answered
    error = await admitted(app, "LeaderAndIsr", request)  # again: our generation may have
    if error is None:                                     # ended while settings were fetched
        return None
    if error:
        return LeaderAndIsrResponse(error_code=error)
    replicas = replicas_of(app)
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
