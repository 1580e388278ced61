"""DescribeTopicPartitions (key 75): version 0, flexible. KIP-966.

What Metadata says of a topic's partitions, plus each partition's eligible leader replicas (ELR)
and the last known ELR, paged: at most response_partition_limit partitions per answer, from the
cursor on; next_cursor says where the next page starts (null: no more). A null ELR means the
server keeps none for the partition.
"""

import uuid
from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import ZERO_UUID, Message, V, i16, i32

PARTITION_LIMIT_DEFAULT = 2000


class TopicRequest(Message):
    name: str = ""


class Cursor(Message):
    topic_name: str = ""
    partition_index: i32 = 0


class DescribeTopicPartitionsRequest(Message):
    topics: list[TopicRequest] = []
    response_partition_limit: i32 = PARTITION_LIMIT_DEFAULT
    cursor: Annotated[Cursor | None, V(nullable="0+")] = None


class DescribeTopicPartitionsResponsePartition(Message):
    error_code: i16 = 0
    partition_index: i32 = 0
    leader_id: i32 = -1
    leader_epoch: i32 = -1
    replica_nodes: list[i32] = []
    isr_nodes: list[i32] = []
    eligible_leader_replicas: Annotated[list[i32] | None, V(nullable="0+")] = None
    last_known_elr: Annotated[list[i32] | None, V(nullable="0+")] = None
    offline_replicas: list[i32] = []


class DescribeTopicPartitionsResponseTopic(Message):
    error_code: i16 = 0
    name: Annotated[str | None, V(nullable="0+")] = None
    topic_id: uuid.UUID = ZERO_UUID
    is_internal: bool = False
    partitions: list[DescribeTopicPartitionsResponsePartition] = []
    topic_authorized_operations: i32 = -2147483648


class DescribeTopicPartitionsResponse(Message):
    throttle_time_ms: i32 = 0
    topics: list[DescribeTopicPartitionsResponseTopic] = []
    next_cursor: Annotated[Cursor | None, V(nullable="0+")] = None


API = Api(key=ApiKey.DESCRIBE_TOPIC_PARTITIONS, name="DescribeTopicPartitions",
          min_version=0, max_version=0, flexible_from=0,
          request=DescribeTopicPartitionsRequest, response=DescribeTopicPartitionsResponse)
