"""CreateTopics (key 19), versions 2-7: forwarded unchanged to the controller.

v4 allows -1 partitions / replication factor (the controller's defaults); v5 is flexible and
answers the created topic's settings; v7 topic ids. The controller validates names
(INVALID_TOPIC_EXCEPTION), settings (INVALID_CONFIG), counts and assignments.
"""

from __future__ import annotations

from typing import Any

from protocol.apis.create_topics import (CreatableTopicResult, CreateTopicsRequest,
                                         CreateTopicsResponse)

from . import register
from ._forward import forward


def failed(request: CreateTopicsRequest, error: int) -> CreateTopicsResponse:
    return CreateTopicsResponse(topics=[
        CreatableTopicResult(name=t.name, error_code=error, error_message="controller unavailable")
        for t in request.topics])


async def handle(ctx: Any, request: CreateTopicsRequest) -> CreateTopicsResponse:
    return await forward(ctx, 19, request, failed)


register(19, 2, 7, handle)
