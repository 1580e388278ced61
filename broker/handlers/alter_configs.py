"""AlterConfigs (key 33), versions 0-2: relayed unchanged to the controller.

v1 only changes throttling; v2 is flexible. The controller replaces a topic's settings
(controller/config_handlers.py); this broker, like the others, puts them into force when it next
asks for its topics' settings. BROKER resources are refused there: no dynamic broker configs.
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
