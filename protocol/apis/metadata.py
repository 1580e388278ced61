"""Metadata (key 3): versions 0-12, flexible from v9.

v0 has no racks, controller id or is_internal, and its topic list is not nullable: an empty
list asks for every topic (v1 on: null does, and empty asks for none). v4 adds
allow_auto_topic_creation; v5 offline_replicas; v7 the partition leader_epoch
(KIP-320); v9 is flexible; v10 topic ids; v12 allows a null topic name when asking by id.
"""

import uuid
from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import ZERO_UUID, Message, V, i16, i32


class MetadataRequestTopic(Message):
    topic_id: Annotated[uuid.UUID, V("10+")] = ZERO_UUID
    name: Annotated[str | None, V(nullable="10+")] = ""


class MetadataRequest(Message):
    topics: Annotated[list[MetadataRequestTopic] | None, V(nullable="1+")] = []
    allow_auto_topic_creation: Annotated[bool, V("4+")] = True
    include_cluster_authorized_operations: Annotated[bool, V("8-10")] = False
    include_topic_authorized_operations: Annotated[bool, V("8+")] = False


class MetadataResponseBroker(Message):
    node_id: i32 = 0
    host: str = ""
    port: i32 = 0
    rack: Annotated[str | None, V("1+", nullable="1+")] = None


class MetadataResponsePartition(Message):
    error_code: i16 = 0
    partition_index: i32 = 0
    leader_id: i32 = 0
    leader_epoch: Annotated[i32, V("7+")] = -1
    replica_nodes: list[i32] = []
    isr_nodes: list[i32] = []
    offline_replicas: Annotated[list[i32], V("5+")] = []


class MetadataResponseTopic(Message):
    error_code: i16 = 0
    name: Annotated[str | None, V(nullable="12+")] = ""
    topic_id: Annotated[uuid.UUID, V("10+")] = ZERO_UUID
    is_internal: Annotated[bool, V("1+")] = False
    partitions: list[MetadataResponsePartition] = []
    topic_authorized_operations: Annotated[i32, V("8+")] = -2147483648


class MetadataResponse(Message):
    throttle_time_ms: Annotated[i32, V("3+")] = 0
    brokers: list[MetadataResponseBroker] = []
    cluster_id: Annotated[str | None, V("2+", nullable="2+")] = None
    controller_id: Annotated[i32, V("1+")] = -1
    topics: list[MetadataResponseTopic] = []
    cluster_authorized_operations: Annotated[i32, V("8-10")] = -2147483648


API = Api(key=ApiKey.METADATA, name="Metadata",
          min_version=0, max_version=12, flexible_from=9,
          request=MetadataRequest, response=MetadataResponse)
