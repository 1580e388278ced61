"""TxnOffsetCommit (key 28): versions 0-3, flexible from v3.

A transactional producer commits a group's offsets as part of its transaction; they become
visible when the transaction commits. v1 only changes throttling (the answer goes out before
the throttle); v2 adds committed_leader_epoch; v3 adds generation_id, member_id and
group_instance_id, so the group coordinator can fence a stale member, and is flexible.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class TxnOffsetCommitRequestPartition(Message):
    partition_index: i32 = 0
    committed_offset: i64 = 0
    committed_leader_epoch: Annotated[i32, V("2+")] = -1
    committed_metadata: Annotated[str | None, V(nullable="0+")] = ""


class TxnOffsetCommitRequestTopic(Message):
    name: str = ""
    partitions: list[TxnOffsetCommitRequestPartition] = []


class TxnOffsetCommitRequest(Message):
    transactional_id: str = ""
    group_id: str = ""
    producer_id: i64 = 0
    producer_epoch: i16 = 0
    generation_id: Annotated[i32, V("3+")] = -1
    member_id: Annotated[str, V("3+")] = ""
    group_instance_id: Annotated[str | None, V("3+", nullable="3+")] = None
    topics: list[TxnOffsetCommitRequestTopic] = []


class TxnOffsetCommitResponsePartition(Message):
    partition_index: i32 = 0
    error_code: i16 = 0


class TxnOffsetCommitResponseTopic(Message):
    name: str = ""
    partitions: list[TxnOffsetCommitResponsePartition] = []


class TxnOffsetCommitResponse(Message):
    throttle_time_ms: i32 = 0
    topics: list[TxnOffsetCommitResponseTopic] = []


API = Api(key=ApiKey.TXN_OFFSET_COMMIT, name="TxnOffsetCommit",
          min_version=0, max_version=3, flexible_from=3,
          request=TxnOffsetCommitRequest, response=TxnOffsetCommitResponse)
