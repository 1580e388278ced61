"""UpdateMetadata (key 6): versions 5-7, flexible from v6. Controller to broker.

v5 carries broker_epoch (KIP-380) and groups partitions by topic; v6 is flexible; v7 adds each
topic's id (Kafka's KIP-516 layout: the uuid right after the topic name). It tells every broker
the live brokers (with rack and endpoints) and each topic's id and each partition's leader, leader
epoch, replicas, ISR and offline replicas, which brokers serve in Metadata answers.

epochlog's extension, as in LeaderAndIsr (leader_and_isr.py): from v6 each topic state may carry
`configs`, the topic's settings as the controller decided them, as tagged field
TOPIC_CONFIGS_TAG; null (absent) says nothing about them. A topic state may then list no partition
states at all: it only tells the topic's new settings.
"""

import uuid
from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import ZERO_UUID, Message, V, i16, i32, i64
from .leader_and_isr import TOPIC_CONFIGS_TAG


class UpdateMetadataPartitionState(Message):
    partition_index: i32 = 0
    controller_epoch: i32 = 0
    leader: i32 = 0
    leader_epoch: i32 = 0
    isr: list[i32] = []
    partition_epoch: i32 = 0
    replicas: list[i32] = []
    offline_replicas: list[i32] = []


class UpdateMetadataTopicConfig(Message):
    name: str = ""
    value: str = ""


class UpdateMetadataTopicState(Message):
    topic_name: str = ""
    topic_id: Annotated[uuid.UUID, V("7+")] = ZERO_UUID
    partition_states: list[UpdateMetadataPartitionState] = []
    # epochlog: the topic's decided settings; null (absent): not said.
    configs: Annotated[list[UpdateMetadataTopicConfig] | None,
                       V("6+", nullable="6+", tag=TOPIC_CONFIGS_TAG, tagged="6+")] = None


class UpdateMetadataEndpoint(Message):
    port: i32 = 0
    host: str = ""
    listener: str = ""
    security_protocol: i16 = 0


class UpdateMetadataBroker(Message):
    id: i32 = 0
    endpoints: list[UpdateMetadataEndpoint] = []
    rack: Annotated[str | None, V(nullable="0+")] = None


class UpdateMetadataRequest(Message):
    controller_id: i32 = 0
    controller_epoch: i32 = 0
    broker_epoch: i64 = -1
    topic_states: list[UpdateMetadataTopicState] = []
    live_brokers: list[UpdateMetadataBroker] = []


class UpdateMetadataResponse(Message):
    error_code: i16 = 0


API = Api(key=ApiKey.UPDATE_METADATA, name="UpdateMetadata",
          min_version=5, max_version=7, flexible_from=6,
          request=UpdateMetadataRequest, response=UpdateMetadataResponse)
