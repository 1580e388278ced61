"""ListOffsets (key 2): versions 1-7, flexible from v6.

v2 adds isolation_level; v4 current_leader_epoch in the request and leader_epoch in the answer
(KIP-320); v6 is flexible; v7 allows timestamp -3 (the largest timestamp).
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i8, i16, i32, i64


class ListOffsetsPartition(Message):
    partition_index: i32 = 0
    current_leader_epoch: Annotated[i32, V("4+")] = -1
    timestamp: i64 = 0


class ListOffsetsTopic(Message):
    name: str = ""
    partitions: list[ListOffsetsPartition] = []


class ListOffsetsRequest(Message):
    replica_id: i32 = 0
    isolation_level: Annotated[i8, V("2+")] = 0
    topics: list[ListOffsetsTopic] = []


class ListOffsetsPartitionResponse(Message):
    partition_index: i32 = 0
    error_code: i16 = 0
    timestamp: i64 = -1
    offset: i64 = -1
    leader_epoch: Annotated[i32, V("4+")] = -1


class ListOffsetsTopicResponse(Message):
    name: str = ""
    partitions: list[ListOffsetsPartitionResponse] = []


class ListOffsetsResponse(Message):
    throttle_time_ms: Annotated[i32, V("2+")] = 0
    topics: list[ListOffsetsTopicResponse] = []


API = Api(key=ApiKey.LIST_OFFSETS, name="ListOffsets",
          min_version=1, max_version=7, flexible_from=6,
          request=ListOffsetsRequest, response=ListOffsetsResponse)
