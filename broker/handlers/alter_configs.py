"""AlterConfigs (key 33), versions 0-2: relayed unchanged to the controller.

v1 only changes throttling; v2 is flexible. The controller replaces a topic's settings
(controller/config_handlers.py), which answers once the change is durable and pushes the topic's
new settings to the brokers in UpdateMetadata (handlers/update_metadata.py). Of BROKER resources
it takes only the default one (cluster-wide defaults of topic settings) and refuses the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.alter_configs import (
    AlterConfigsRequest,
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)

from . import register
from ._forward import forward

if TYPE_CHECKING:
    from ._context import RequestContext


def failed(request: AlterConfigsRequest, error: int) -> AlterConfigsResponse:
    return AlterConfigsResponse(responses=[AlterConfigsResourceResponse(
        error_code=error, error_message="controller unavailable", resource_type=r.resource_type,
        resource_name=r.resource_name) for r in request.resources])


async def handle(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    return await forward(ctx, ApiKey.ALTER_CONFIGS, request, failed)


register(ApiKey.ALTER_CONFIGS, 0, 2, handle)
