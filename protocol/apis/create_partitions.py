"""CreatePartitions (key 37): versions 0-3, flexible from v2.

v2 is flexible.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32


class CreatePartitionsAssignment(Message):
    broker_ids: list[i32] = []


class CreatePartitionsTopic(Message):
    name: str = ""
    count: i32 = 0
    assignments: Annotated[list[CreatePartitionsAssignment] | None, V(nullable="0+")] = []


class CreatePartitionsRequest(Message):
    topics: list[CreatePartitionsTopic] = []
    timeout_ms: i32 = 0
    validate_only: bool = False


class CreatePartitionsTopicResult(Message):
    name: str = ""
    error_code: i16 = 0
    error_message: Annotated[str | None, V(nullable="0+")] = None


class CreatePartitionsResponse(Message):
    throttle_time_ms: i32 = 0
    results: list[CreatePartitionsTopicResult] = []


API = Api(key=ApiKey.CREATE_PARTITIONS, name="CreatePartitions",
          min_version=0, max_version=3, flexible_from=2,
          request=CreatePartitionsRequest, response=CreatePartitionsResponse)
