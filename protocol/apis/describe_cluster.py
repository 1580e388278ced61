"""DescribeCluster (key 60): versions 0-1, flexible from v0.

v1 adds endpoint_type.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i8, i16, i32


class DescribeClusterRequest(Message):
    include_cluster_authorized_operations: bool = False
    endpoint_type: Annotated[i8, V("1+")] = 1


class DescribeClusterBroker(Message):
    broker_id: i32 = 0
    host: str = ""
    port: i32 = 0
    rack: Annotated[str | None, V(nullable="0+")] = None


class DescribeClusterResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0
    error_message: Annotated[str | None, V(nullable="0+")] = None
    endpoint_type: Annotated[i8, V("1+")] = 1
    cluster_id: str = ""
    controller_id: i32 = -1
    brokers: list[DescribeClusterBroker] = []
    cluster_authorized_operations: i32 = -2147483648


API = Api(key=ApiKey.DESCRIBE_CLUSTER, name="DescribeCluster",
          min_version=0, max_version=1, flexible_from=0,
          request=DescribeClusterRequest, response=DescribeClusterResponse)
