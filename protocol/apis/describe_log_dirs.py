"""DescribeLogDirs (key 35): versions 0-4, flexible from v2.

v1 only changes throttling; v2 is flexible; v3 adds a top-level error code; v4 each directory's
total and usable bytes. A null topic list asks for every partition.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class DescribableLogDirTopic(Message):
    topic: str = ""
    partitions: list[i32] = []


class DescribeLogDirsRequest(Message):
    topics: Annotated[list[DescribableLogDirTopic] | None, V(nullable="0+")] = []


class DescribeLogDirsPartition(Message):
    partition_index: i32 = 0
    partition_size: i64 = 0
    offset_lag: i64 = 0
    is_future_key: bool = False


class DescribeLogDirsTopic(Message):
    name: str = ""
    partitions: list[DescribeLogDirsPartition] = []


class DescribeLogDirsResult(Message):
    error_code: i16 = 0
    log_dir: str = ""
    topics: list[DescribeLogDirsTopic] = []
    total_bytes: Annotated[i64, V("4+")] = -1
    usable_bytes: Annotated[i64, V("4+")] = -1


class DescribeLogDirsResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: Annotated[i16, V("3+")] = 0
    results: list[DescribeLogDirsResult] = []


API = Api(key=ApiKey.DESCRIBE_LOG_DIRS, name="DescribeLogDirs",
          min_version=0, max_version=4, flexible_from=2,
          request=DescribeLogDirsRequest, response=DescribeLogDirsResponse)
