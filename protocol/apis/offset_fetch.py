"""OffsetFetch (key 9): versions 1-7, flexible from v6.

v2 adds a top-level error code and null topics (all offsets); v5 committed_leader_epoch
(KIP-320); v6 is flexible; v7 require_stable.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class OffsetFetchRequestTopic(Message):
    name: str = ""
    partition_indexes: list[i32] = []


class OffsetFetchRequest(Message):
    group_id: str = ""
    topics: Annotated[list[OffsetFetchRequestTopic] | None, V(nullable="2+")] = []
    require_stable: Annotated[bool, V("7+")] = False


class OffsetFetchResponsePartition(Message):
    partition_index: i32 = 0
    committed_offset: i64 = 0
    committed_leader_epoch: Annotated[i32, V("5+")] = -1
    metadata: Annotated[str | None, V(nullable="0+")] = ""
    error_code: i16 = 0


class OffsetFetchResponseTopic(Message):
    name: str = ""
    partitions: list[OffsetFetchResponsePartition] = []


class OffsetFetchResponse(Message):
    throttle_time_ms: Annotated[i32, V("3+")] = 0
    topics: list[OffsetFetchResponseTopic] = []
    error_code: Annotated[i16, V("2+")] = 0


API = Api(key=ApiKey.OFFSET_FETCH, name="OffsetFetch",
          min_version=1, max_version=7, flexible_from=6,
          request=OffsetFetchRequest, response=OffsetFetchResponse)
