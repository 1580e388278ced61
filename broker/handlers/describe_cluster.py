"""DescribeCluster (key 60), versions 0-1.

Answered from the metadata cache: the live brokers with their racks, the cluster id, and our own
id as the controller id (admin requests to any broker are forwarded, as in KRaft; see
metadata.py). v1 endpoint_type: 1 (brokers) is served; 2 (controllers) is
MISMATCHED_ENDPOINT_TYPE, as a Kafka broker answers it. Addresses are those of the listener the
request arrived on, as in Metadata (falling back to a broker's first listener).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_cluster import (
    DescribeClusterBroker,
    DescribeClusterRequest,
    DescribeClusterResponse,
)
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._acl_operations import CLUSTER_OPERATIONS, UNREQUESTED

if TYPE_CHECKING:
    from ._context import BrokerApp, RequestContext

ENDPOINT_BROKERS = 1


async def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    app = ctx.app
    if request.endpoint_type != ENDPOINT_BROKERS:
        return DescribeClusterResponse(error_code=ErrorCode.MISMATCHED_ENDPOINT_TYPE,
                                       error_message="brokers describe brokers (endpoint type 1)",
                                       endpoint_type=request.endpoint_type)
    return DescribeClusterResponse(
        cluster_id=app.config.cluster_id, controller_id=app.broker_id,
        endpoint_type=request.endpoint_type, brokers=_brokers(app, ctx.listener),
        cluster_authorized_operations=CLUSTER_OPERATIONS
        if request.include_cluster_authorized_operations else UNREQUESTED)


def _brokers(app: BrokerApp, listener: str) -> list[DescribeClusterBroker]:
    answer = []
    for _, b in sorted(app.metadata.brokers.items()):
        host, port = b.endpoint(listener)
        answer.append(DescribeClusterBroker(broker_id=b.broker_id, host=host, port=port,
                                            rack=b.rack))
    return answer


register(ApiKey.DESCRIBE_CLUSTER, 0, 1, handle)
