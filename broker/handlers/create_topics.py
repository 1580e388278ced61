"""CreateTopics (key 19), versions 2-7: forwarded unchanged to the controller.

v4 allows -1 partitions / replication factor (the controller's defaults); v5 is flexible and
answers the created topic's settings; v7 topic ids. The controller validates names
(INVALID_TOPIC_EXCEPTION), settings (INVALID_CONFIG), counts and assignments.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_topics import (
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)

from . import register
from ._forward import forward

if TYPE_CHECKING:
    from ._context import RequestContext


def failed(request: CreateTopicsRequest, error: int) -> CreateTopicsResponse:
    return CreateTopicsResponse(topics=[
        CreatableTopicResult(name=t.name, error_code=error, error_message="controller unavailable")
        for t in request.topics])


async def handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    return await forward(ctx, ApiKey.CREATE_TOPICS, request, failed)


register(ApiKey.CREATE_TOPICS, 2, 7, handle)
