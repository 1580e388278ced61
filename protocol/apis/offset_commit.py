"""OffsetCommit (key 8): versions 2-8, flexible from v8.

v3 adds throttle_time_ms; v5 drops retention_time_ms; v6 committed_leader_epoch (KIP-320);
v7 group_instance_id; v8 is flexible.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class OffsetCommitRequestPartition(Message):
    partition_index: i32 = 0
    committed_offset: i64 = 0
    committed_leader_epoch: Annotated[i32, V("6+")] = -1
    committed_metadata: Annotated[str | None, V(nullable="0+")] = ""


class OffsetCommitRequestTopic(Message):
    name: str = ""
    partitions: list[OffsetCommitRequestPartition] = []


class OffsetCommitRequest(Message):
    group_id: str = ""
    generation_id_or_member_epoch: i32 = -1
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("7+", nullable="7+")] = None
    retention_time_ms: Annotated[i64, V("2-4")] = -1
    topics: list[OffsetCommitRequestTopic] = []


class OffsetCommitResponsePartition(Message):
    partition_index: i32 = 0
    error_code: i16 = 0


class OffsetCommitResponseTopic(Message):
    name: str = ""
    partitions: list[OffsetCommitResponsePartition] = []


class OffsetCommitResponse(Message):
    throttle_time_ms: Annotated[i32, V("3+")] = 0
    topics: list[OffsetCommitResponseTopic] = []


API = Api(key=ApiKey.OFFSET_COMMIT, name="OffsetCommit",
          min_version=2, max_version=8, flexible_from=8,
          request=OffsetCommitRequest, response=OffsetCommitResponse)
