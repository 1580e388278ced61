"""ElectLeaders (key 43), versions 0-2: forwarded unchanged to the controller.

v0 is a preferred election; v1 adds election_type (0 preferred, 1 unclean) and a top-level error;
v2 is flexible. A null topic list means every partition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)

from . import register
from ._forward import forward

if TYPE_CHECKING:
    from ._context import RequestContext


def failed(request: ElectLeadersRequest, error: int) -> ElectLeadersResponse:
    return ElectLeadersResponse(error_code=error, replica_election_results=[
        ReplicaElectionResult(topic=tp.topic, partition_result=[
            PartitionResult(partition_id=i, error_code=error) for i in tp.partitions])
        for tp in request.topic_partitions or []])


async def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse:
    return await forward(ctx, ApiKey.ELECT_LEADERS, request, failed)


register(ApiKey.ELECT_LEADERS, 0, 2, handle)
