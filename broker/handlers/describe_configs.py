"""DescribeConfigs (key 32), versions 1-4: forwarded unchanged to the controller.

v1 synonyms; v3 config type and documentation; v4 is flexible. The controller describes topic
resources (the topic's own settings and the cluster defaults); other resource types are answered
INVALID_REQUEST by it.
"""

from __future__ import annotations

from typing import Any

from protocol.apis.describe_configs import (DescribeConfigsRequest, DescribeConfigsResponse,
                                            DescribeConfigsResult)

from . import register
from ._forward import forward


def failed(request: DescribeConfigsRequest, error: int) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(results=[
        DescribeConfigsResult(error_code=error, error_message="controller unavailable",
                              resource_type=r.resource_type, resource_name=r.resource_name)
        for r in request.resources])


async def handle(ctx: Any, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    return await forward(ctx, 32, request, failed)


register(32, 1, 4, handle)
