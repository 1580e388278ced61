"""CreateTopics (key 19): versions 2-7, flexible from v5.

v2 adds throttle_time_ms; v4 lets the broker pick partitions and replication factor (-1);
v5 is flexible and returns the created topic's settings; v7 returns topic ids.
"""

import uuid
from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import ZERO_UUID, Message, V, i8, i16, i32


class CreatableReplicaAssignment(Message):
    partition_index: i32 = 0
    broker_ids: list[i32] = []


class CreatableTopicConfig(Message):
    name: str = ""
    value: Annotated[str | None, V(nullable="0+")] = ""


class CreatableTopic(Message):
    name: str = ""
    num_partitions: i32 = 0
    replication_factor: i16 = 0
    assignments: list[CreatableReplicaAssignment] = []
    configs: list[CreatableTopicConfig] = []


class CreateTopicsRequest(Message):
    topics: list[CreatableTopic] = []
    timeout_ms: i32 = 60000
    validate_only: bool = False


class CreatableTopicConfigs(Message):
    name: Annotated[str, V("5+")] = ""
    value: Annotated[str | None, V("5+", nullable="5+")] = ""
    read_only: Annotated[bool, V("5+")] = False
    config_source: Annotated[i8, V("5+")] = -1
    is_sensitive: Annotated[bool, V("5+")] = False


class CreatableTopicResult(Message):
    name: str = ""
    topic_id: Annotated[uuid.UUID, V("7+")] = ZERO_UUID
    error_code: i16 = 0
    error_message: Annotated[str | None, V(nullable="0+")] = ""
    topic_config_error_code: Annotated[i16, V("5+", tag=0, tagged="5+")] = 0
    num_partitions: Annotated[i32, V("5+")] = -1
    replication_factor: Annotated[i16, V("5+")] = -1
    configs: Annotated[list[CreatableTopicConfigs] | None, V("5+", nullable="5+")] = []


class CreateTopicsResponse(Message):
    throttle_time_ms: i32 = 0
    topics: list[CreatableTopicResult] = []


API = Api(key=ApiKey.CREATE_TOPICS, name="CreateTopics",
          min_version=2, max_version=7, flexible_from=5,
          request=CreateTopicsRequest, response=CreateTopicsResponse)
