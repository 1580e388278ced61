"""LeaderAndIsr (key 4): versions 2-4, flexible from v4. Controller to broker.

v2 carries broker_epoch (KIP-380) and groups partitions by topic; v3 adds adding_replicas and
removing_replicas; v4 is flexible. `partition_epoch` is the field Kafka's ZooKeeper-era schema
calls ZkVersion: the version of the partition's leader-and-ISR state, which a leader hands back in
AlterPartition. A broker refuses an older broker_epoch with STALE_BROKER_EPOCH and an older
controller_epoch with STALE_CONTROLLER_EPOCH.

epochlog's extension: from v4 each topic state may carry `configs`, the topic's settings as the
controller decided them (its own values and the cluster's dynamic and static defaults, by Kafka's
names), as tagged field TOPIC_CONFIGS_TAG; null (absent) says nothing about them. Kafka's schema
has no such field; only epochlog's controller sends this request, and only to epochlog brokers.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64

# Tag number of epochlog's topic settings field, here and in UpdateMetadata (update_metadata.py).
# High on purpose, as KIP-359's in produce.py: Kafka assigns its own tags upwards from 0.
TOPIC_CONFIGS_TAG = 1000


class LeaderAndIsrPartitionState(Message):
    partition_index: i32 = 0
    controller_epoch: i32 = 0
    leader: i32 = 0
    leader_epoch: i32 = 0
    isr: list[i32] = []
    partition_epoch: i32 = 0
    replicas: list[i32] = []
    adding_replicas: Annotated[list[i32], V("3+")] = []
    removing_replicas: Annotated[list[i32], V("3+")] = []
    is_new: bool = False


class LeaderAndIsrTopicConfig(Message):
    name: str = ""
    value: str = ""


class LeaderAndIsrTopicState(Message):
    topic_name: str = ""
    partition_states: list[LeaderAndIsrPartitionState] = []
    # epochlog: the topic's decided settings; null (absent): not said.
    configs: Annotated[list[LeaderAndIsrTopicConfig] | None,
                       V("4+", nullable="4+", tag=TOPIC_CONFIGS_TAG, tagged="4+")] = None


class LeaderAndIsrLiveLeader(Message):
    broker_id: i32 = 0
    host_name: str = ""
    port: i32 = 0


class LeaderAndIsrRequest(Message):
    controller_id: i32 = 0
    controller_epoch: i32 = 0
    broker_epoch: i64 = -1
    topic_states: list[LeaderAndIsrTopicState] = []
    live_leaders: list[LeaderAndIsrLiveLeader] = []


class LeaderAndIsrPartitionError(Message):
    topic_name: str = ""
    partition_index: i32 = 0
    error_code: i16 = 0


class LeaderAndIsrResponse(Message):
    error_code: i16 = 0
    partition_errors: list[LeaderAndIsrPartitionError] = []


API = Api(key=ApiKey.LEADER_AND_ISR, name="LeaderAndIsr",
          min_version=2, max_version=4, flexible_from=4,
          request=LeaderAndIsrRequest, response=LeaderAndIsrResponse)
