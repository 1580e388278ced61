"""IncrementalAlterConfigs (key 44), versions 0-1: relayed unchanged to the controller.

v1 is flexible. SET, DELETE, APPEND and SUBTRACT on topic settings, decided by the controller
(controller/config_handlers.py), which answers once the change is durable and pushes the topic's
new settings to the brokers in UpdateMetadata (handlers/update_metadata.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.alter_configs import AlterConfigsResourceResponse
from epochlog.protocol.apis.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)

from . import register
from ._forward import forward

if TYPE_CHECKING:
    from ._context import RequestContext


def failed(request: IncrementalAlterConfigsRequest, error: int
           ) -> IncrementalAlterConfigsResponse:
    return IncrementalAlterConfigsResponse(responses=[AlterConfigsResourceResponse(
        error_code=error, error_message="controller unavailable", resource_type=r.resource_type,
        resource_name=r.resource_name) for r in request.resources])


async def handle(ctx: RequestContext, request: IncrementalAlterConfigsRequest
                 ) -> IncrementalAlterConfigsResponse:
    return await forward(ctx, ApiKey.INCREMENTAL_ALTER_CONFIGS, request, failed)


register(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, 1, handle)
