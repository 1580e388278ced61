"""CreatePartitions (key 37), versions 0-3: forwarded unchanged to the controller.

v2 is flexible. New partitions reach their replicas as LeaderAndIsr with is_new set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)

from . import register
from ._forward import forward

if TYPE_CHECKING:
    from ._context import RequestContext


def failed(request: CreatePartitionsRequest, error: int) -> CreatePartitionsResponse:
    return CreatePartitionsResponse(results=[
        CreatePartitionsTopicResult(name=t.name, error_code=error) for t in request.topics])


async def handle(ctx: RequestContext, request: CreatePartitionsRequest) -> CreatePartitionsResponse:
    return await forward(ctx, ApiKey.CREATE_PARTITIONS, request, failed)


register(ApiKey.CREATE_PARTITIONS, 0, 3, handle)
