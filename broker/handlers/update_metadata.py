"""UpdateMetadata (key 6), versions 5-6. Controller to broker.

v5 carries broker_epoch (KIP-380); v6 is flexible and is what the controller sends. Fenced first
(fencing.ControlEpochs.admit: STALE_BROKER_EPOCH, then STALE_CONTROLLER_EPOCH, and then nothing
is applied); otherwise the live brokers are replaced and the partition states upserted into the
metadata cache, which Metadata and DescribeCluster answers come from.
"""

from __future__ import annotations

from typing import Any

from protocol.apis.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse

from . import register


async def handle(ctx: Any, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    app = ctx.app
    error = app.epochs.admit("UpdateMetadata", request.controller_id, request.controller_epoch,
                             request.broker_epoch)
    if error:
        return UpdateMetadataResponse(error_code=error)
    app.metadata.apply(request)
    return UpdateMetadataResponse()


register(6, 5, 6, handle)
