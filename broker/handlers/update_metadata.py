"""UpdateMetadata (key 6), versions 5-7. Controller to broker.

v5 carries broker_epoch (KIP-380); v6 is flexible; v7 adds topic ids and is what the controller
sends. Held first, bounded, until the controller has confirmed our generation (see
leader_and_isr.py; app.control_request_ready), then fenced
(fencing.ControlEpochs.admit: STALE_BROKER_EPOCH, then STALE_CONTROLLER_EPOCH, and then nothing
is applied); otherwise (`apply`, with no await) the live brokers are replaced and the partition
states upserted into the metadata cache, which Metadata and DescribeCluster answers come from, and
the topic settings it carries (epochlog's tagged field `configs`, sent when a topic's settings
change: protocol/apis/update_metadata.py) are put into force for the topics held here
(replicas.ReplicaManager.take_topic_settings). The deterministic simulation's broker (tests/sim)
calls `apply` too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse

from . import register
from ._context import replicas_of
from ._control import admitted, carried_settings

if TYPE_CHECKING:
    from ._context import BrokerApp, RequestContext


async def handle(ctx: RequestContext,
                 request: UpdateMetadataRequest) -> UpdateMetadataResponse | None:
    app = ctx.app
    error = await admitted(app, "UpdateMetadata", request)
    if error is None:
        return None
    if error:
        return UpdateMetadataResponse(error_code=error)
    return apply(app, request)


def apply(app: BrokerApp, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    """An admitted UpdateMetadata: the metadata cache, then the settings of topics held here."""
    app.metadata.apply(request)
    replicas_of(app).take_topic_settings(carried_settings(request.topic_states), held_only=True)
    return UpdateMetadataResponse()


register(ApiKey.UPDATE_METADATA, 5, 7, handle)
