"""AlterPartition (key 56): versions 0-3, all flexible. Leader to controller.

A leader asks to change a partition's ISR, naming the leader epoch and the partition epoch it
holds; the controller refuses a stale one, so two leaders can never both move the ISR. v0-1 name
the topic, v2+ give its id; v1 adds leader_recovery_state; v3 lists ISR members with their broker
epochs, so a broker that has since bounced cannot be put back by an old view.
"""

import uuid
from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import ZERO_UUID, Message, V, i8, i16, i32, i64


class AlterPartitionBrokerState(Message):
    broker_id: i32 = 0
    broker_epoch: i64 = -1


class AlterPartitionPartitionData(Message):
    partition_index: i32 = 0
    leader_epoch: i32 = 0
    new_isr: Annotated[list[i32], V("0-2")] = []
    new_isr_with_epochs: Annotated[list[AlterPartitionBrokerState], V("3+")] = []
    leader_recovery_state: Annotated[i8, V("1+")] = 0
    partition_epoch: i32 = 0


class AlterPartitionTopicData(Message):
    topic_name: Annotated[str, V("0-1")] = ""
    topic_id: Annotated[uuid.UUID, V("2+")] = ZERO_UUID
    partitions: list[AlterPartitionPartitionData] = []


class AlterPartitionRequest(Message):
    broker_id: i32 = 0
    broker_epoch: i64 = -1
    topics: list[AlterPartitionTopicData] = []


class AlterPartitionResponsePartition(Message):
    partition_index: i32 = 0
    error_code: i16 = 0
    leader_id: i32 = 0
    leader_epoch: i32 = 0
    isr: list[i32] = []
    leader_recovery_state: Annotated[i8, V("1+")] = 0
    partition_epoch: i32 = 0


class AlterPartitionResponseTopic(Message):
    topic_name: Annotated[str, V("0-1")] = ""
    topic_id: Annotated[uuid.UUID, V("2+")] = ZERO_UUID
    partitions: list[AlterPartitionResponsePartition] = []


class AlterPartitionResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0
    topics: list[AlterPartitionResponseTopic] = []


API = Api(key=ApiKey.ALTER_PARTITION, name="AlterPartition",
          min_version=0, max_version=3, flexible_from=0,
          request=AlterPartitionRequest, response=AlterPartitionResponse)
