"""StopReplica (key 5): versions 1-3, flexible from v2. Controller to broker.

v1 carries broker_epoch (KIP-380) and groups partitions by topic; v2 is flexible; v3 replaces the
request-wide delete_partitions flag with per-partition states carrying the leader epoch, so a
late StopReplica for an older epoch can be told apart.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class StopReplicaTopicV1(Message):
    name: str = ""
    partition_indexes: list[i32] = []


class StopReplicaPartitionState(Message):
    partition_index: i32 = 0
    leader_epoch: i32 = -1
    delete_partition: bool = False


class StopReplicaTopicState(Message):
    topic_name: str = ""
    partition_states: list[StopReplicaPartitionState] = []


class StopReplicaRequest(Message):
    controller_id: i32 = 0
    controller_epoch: i32 = 0
    broker_epoch: i64 = -1
    delete_partitions: Annotated[bool, V("1-2")] = False
    topics: Annotated[list[StopReplicaTopicV1], V("1-2")] = []
    topic_states: Annotated[list[StopReplicaTopicState], V("3+")] = []


class StopReplicaPartitionError(Message):
    topic_name: str = ""
    partition_index: i32 = 0
    error_code: i16 = 0


class StopReplicaResponse(Message):
    error_code: i16 = 0
    partition_errors: list[StopReplicaPartitionError] = []


API = Api(key=ApiKey.STOP_REPLICA, name="StopReplica",
          min_version=1, max_version=3, flexible_from=2,
          request=StopReplicaRequest, response=StopReplicaResponse)
