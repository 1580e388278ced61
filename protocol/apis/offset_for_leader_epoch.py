"""OffsetForLeaderEpoch (key 23): versions 0-4, flexible from v4.

v1 returns the leader_epoch of the end offset; v2 current_leader_epoch (KIP-320); v3 replica_id
(-1 for consumers, whose answers are capped at the high watermark); v4 is flexible.

LOG_END_QUERY (replica_id -3) is epochlog's own: the controller's question to any replica of a
partition for its last leader epoch and log end (KIP-966 unclean recovery).
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64

LOG_END_QUERY = -3


class OffsetForLeaderPartition(Message):
    partition: i32 = 0
    current_leader_epoch: Annotated[i32, V("2+")] = -1
    leader_epoch: i32 = 0


class OffsetForLeaderTopic(Message):
    topic: str = ""
    partitions: list[OffsetForLeaderPartition] = []


class OffsetForLeaderEpochRequest(Message):
    replica_id: Annotated[i32, V("3+")] = -2
    topics: list[OffsetForLeaderTopic] = []


class EpochEndOffset(Message):
    error_code: i16 = 0
    partition: i32 = 0
    leader_epoch: Annotated[i32, V("1+")] = -1
    end_offset: i64 = -1


class OffsetForLeaderTopicResult(Message):
    topic: str = ""
    partitions: list[EpochEndOffset] = []


class OffsetForLeaderEpochResponse(Message):
    throttle_time_ms: Annotated[i32, V("2+")] = 0
    topics: list[OffsetForLeaderTopicResult] = []


API = Api(key=ApiKey.OFFSET_FOR_LEADER_EPOCH, name="OffsetForLeaderEpoch",
          min_version=0, max_version=4, flexible_from=4,
          request=OffsetForLeaderEpochRequest, response=OffsetForLeaderEpochResponse)
