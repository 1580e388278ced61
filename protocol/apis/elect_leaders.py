"""ElectLeaders (key 43): versions 0-2, flexible from v2.

v1 adds election_type (preferred or unclean) and a top-level error code; v2 is flexible.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i8, i16, i32


class TopicPartitions(Message):
    topic: str = ""
    partitions: list[i32] = []


class ElectLeadersRequest(Message):
    election_type: Annotated[i8, V("1+")] = 0
    topic_partitions: Annotated[list[TopicPartitions] | None, V(nullable="0+")] = []
    timeout_ms: i32 = 60000


class PartitionResult(Message):
    partition_id: i32 = 0
    error_code: i16 = 0
    error_message: Annotated[str | None, V(nullable="0+")] = ""


class ReplicaElectionResult(Message):
    topic: str = ""
    partition_result: list[PartitionResult] = []


class ElectLeadersResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: Annotated[i16, V("1+")] = 0
    replica_election_results: list[ReplicaElectionResult] = []


API = Api(key=ApiKey.ELECT_LEADERS, name="ElectLeaders",
          min_version=0, max_version=2, flexible_from=2,
          request=ElectLeadersRequest, response=ElectLeadersResponse)
