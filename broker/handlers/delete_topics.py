"""DeleteTopics (key 20), versions 1-6: forwarded unchanged to the controller.

v4 is flexible; v5 per-topic error messages; v6 deletes by name or topic id. The controller then
sends StopReplica (delete) to every replica and UpdateMetadata (leader -2) to every broker.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)

from . import register
from ._forward import forward

if TYPE_CHECKING:
    from ._context import RequestContext


def failed(request: DeleteTopicsRequest, error: int) -> DeleteTopicsResponse:
    names = [DeletableTopicResult(name=n, error_code=error) for n in request.topic_names]
    by_state = [DeletableTopicResult(name=t.name, topic_id=t.topic_id, error_code=error)
                for t in request.topics]
    return DeleteTopicsResponse(responses=names + by_state)


async def handle(ctx: RequestContext, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    return await forward(ctx, ApiKey.DELETE_TOPICS, request, failed)


register(ApiKey.DELETE_TOPICS, 1, 6, handle)
