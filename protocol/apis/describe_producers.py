"""DescribeProducers (key 61): version 0, flexible (KIP-664).

The producers a partition's leader holds state for: id, epoch, last sequence and timestamp,
and the start offset of an open transaction (-1 if none).
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class TopicRequest(Message):
    name: str = ""
    partition_indexes: list[i32] = []


class DescribeProducersRequest(Message):
    topics: list[TopicRequest] = []


class ProducerState(Message):
    producer_id: i64 = 0
    producer_epoch: i32 = 0
    last_sequence: i32 = -1
    last_timestamp: i64 = -1
    coordinator_epoch: i32 = 0
    current_txn_start_offset: i64 = -1


class PartitionResponse(Message):
    partition_index: i32 = 0
    error_code: i16 = 0
    error_message: Annotated[str | None, V(nullable="0+")] = None
    active_producers: list[ProducerState] = []


class TopicResponse(Message):
    name: str = ""
    partitions: list[PartitionResponse] = []


class DescribeProducersResponse(Message):
    throttle_time_ms: i32 = 0
    topics: list[TopicResponse] = []


API = Api(key=ApiKey.DESCRIBE_PRODUCERS, name="DescribeProducers",
          min_version=0, max_version=0, flexible_from=0,
          request=DescribeProducersRequest, response=DescribeProducersResponse)
