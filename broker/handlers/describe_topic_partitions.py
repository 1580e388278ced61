"""DescribeTopicPartitions (key 75), version 0: forwarded to the controller, which alone keeps
the eligible leader replicas (KIP-966); the answer gets our topic authorized operations (no
authorizer: every topic operation, as Metadata says)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponseTopic,
)

from . import register
from ._acl_operations import TOPIC_OPERATIONS
from ._forward import forward

if TYPE_CHECKING:
    from ._context import RequestContext


def failed(request: DescribeTopicPartitionsRequest, error: int
           ) -> DescribeTopicPartitionsResponse:
    return DescribeTopicPartitionsResponse(topics=[
        DescribeTopicPartitionsResponseTopic(error_code=error, name=t.name)
        for t in request.topics])


async def handle(ctx: RequestContext, request: DescribeTopicPartitionsRequest
                 ) -> DescribeTopicPartitionsResponse:
    answer = await forward(ctx, ApiKey.DESCRIBE_TOPIC_PARTITIONS, request, failed)
    for topic in answer.topics:
        if not topic.error_code:
            topic.topic_authorized_operations = TOPIC_OPERATIONS
    return answer


register(ApiKey.DESCRIBE_TOPIC_PARTITIONS, 0, 0, handle)
