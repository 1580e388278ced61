"""OffsetDelete (key 47): version 0 only, never flexible.

The response puts its top-level error code before the throttle time, unlike most responses.
"""

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, i16, i32


class OffsetDeleteRequestPartition(Message):
    partition_index: i32 = 0


class OffsetDeleteRequestTopic(Message):
    name: str = ""
    partitions: list[OffsetDeleteRequestPartition] = []


class OffsetDeleteRequest(Message):
    group_id: str = ""
    topics: list[OffsetDeleteRequestTopic] = []


class OffsetDeleteResponsePartition(Message):
    partition_index: i32 = 0
    error_code: i16 = 0


class OffsetDeleteResponseTopic(Message):
    name: str = ""
    partitions: list[OffsetDeleteResponsePartition] = []


class OffsetDeleteResponse(Message):
    error_code: i16 = 0
    throttle_time_ms: i32 = 0
    topics: list[OffsetDeleteResponseTopic] = []


API = Api(key=ApiKey.OFFSET_DELETE, name="OffsetDelete",
          min_version=0, max_version=0, flexible_from=None,
          request=OffsetDeleteRequest, response=OffsetDeleteResponse)
