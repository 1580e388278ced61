"""DeleteRecords (key 21): versions 0-2, flexible from v2.

v1 only changes throttling; v2 is flexible. An offset of -1 means the high watermark.
"""

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, i16, i32, i64


class DeleteRecordsPartition(Message):
    partition_index: i32 = 0
    offset: i64 = 0


class DeleteRecordsTopic(Message):
    name: str = ""
    partitions: list[DeleteRecordsPartition] = []


class DeleteRecordsRequest(Message):
    topics: list[DeleteRecordsTopic] = []
    timeout_ms: i32 = 0


class DeleteRecordsPartitionResult(Message):
    partition_index: i32 = 0
    low_watermark: i64 = 0
    error_code: i16 = 0


class DeleteRecordsTopicResult(Message):
    name: str = ""
    partitions: list[DeleteRecordsPartitionResult] = []


class DeleteRecordsResponse(Message):
    throttle_time_ms: i32 = 0
    topics: list[DeleteRecordsTopicResult] = []


API = Api(key=ApiKey.DELETE_RECORDS, name="DeleteRecords",
          min_version=0, max_version=2, flexible_from=2,
          request=DeleteRecordsRequest, response=DeleteRecordsResponse)
