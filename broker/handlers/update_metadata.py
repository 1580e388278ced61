"""UpdateMetadata (key 6), versions 5-7. Controller to broker.

v5 carries broker_epoch (KIP-380); v6 is flexible; v7 adds topic ids and is what the controller
sends. Held first, bounded, until the controller has confirmed our generation (see
leader_and_isr.py; app.control_request_ready), then fenced
(fencing.ControlEpochs.admit: STALE_BROKER_EPOCH, then STALE_CONTROLLER_EPOCH, and then nothing
is applied); otherwise the live brokers are replaced and the partition states upserted into the
metadata cache, which Metadata and DescribeCluster answers come from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse

from . import register
from ._control import admitted

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext,
                 request: UpdateMetadataRequest) -> UpdateMetadataResponse | None:
    app = ctx.app
    error = await admitted(app, "UpdateMetadata", request)
    if error is None:
        return None
    if error:
        return UpdateMetadataResponse(error_code=error)
    app.metadata.apply(request)
    return UpdateMetadataResponse()


register(ApiKey.UPDATE_METADATA, 5, 7, handle)
