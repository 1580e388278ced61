"""Control requests to brokers, built from the model: LeaderAndIsr v4, UpdateMetadata v7,
StopReplica v3, and OffsetForLeaderEpoch v4 as unclean recovery's log-end query
(unclean_recovery.py).

Every request carries the controller's epoch and the destination's broker epoch (KIP-380); a
broker refuses older ones (see docs/control-plane.md). UpdateMetadata carries every listener of
every live broker (each broker answers Metadata with the listener a request came on);
LeaderAndIsr's live_leaders name each leader's INTERNAL endpoint when it has one, since followers
fetch there. UpdateMetadata v7 also carries each topic's id, which brokers answer in Metadata
v10+ (a topic being deleted is no longer known by id: it goes with the zero id).

Topic settings travel in both (epochlog's tagged field `configs` on a topic state, protocol
notes in leader_and_isr.py): a LeaderAndIsr carries the decided settings of every topic it names,
so a broker opens their logs with them; an UpdateMetadata carries those of the topics whose
settings changed, a topic state with no partition states if nothing else changed. Pure functions:
no state is read here but what the caller passes.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TypeVar

from epochlog.protocol.apis.leader_and_isr import (
    LeaderAndIsrLiveLeader,
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicConfig,
    LeaderAndIsrTopicState,
)
from epochlog.protocol.apis.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from epochlog.protocol.apis.stop_replica import (
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
)
from epochlog.protocol.apis.update_metadata import (
    UpdateMetadataBroker,
    UpdateMetadataEndpoint,
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicConfig,
    UpdateMetadataTopicState,
)
from epochlog.protocol.schema import ZERO_UUID

from .model import LEADER_DURING_DELETE, Broker, Partition

LEADER_AND_ISR_KEY, LEADER_AND_ISR_VERSION = 4, 4
STOP_REPLICA_KEY, STOP_REPLICA_VERSION = 5, 3
UPDATE_METADATA_KEY, UPDATE_METADATA_VERSION = 6, 7
LOG_END_QUERY_KEY, LOG_END_QUERY_VERSION = 23, 4  # OffsetForLeaderEpoch

# (topic, partition index, state, is_new)
LaiItem = tuple[str, int, Partition, bool]
# (topic, partition index, state or None when deleted (then replicas only))
UmItem = tuple[str, int, Partition | None, tuple[int, ...]]
# (topic, partition index, leader epoch, delete the data)
StopItem = tuple[str, int, int, bool]
# topic -> its decided settings (topic_settings.decided), by Kafka's names
Settings = Mapping[str, Mapping[str, str]]
_Config = TypeVar("_Config", LeaderAndIsrTopicConfig, UpdateMetadataTopicConfig)


def leader_and_isr(controller_id: int, controller_epoch: int, broker_epoch: int,
                   items: Iterable[LaiItem], brokers: Mapping[int, Broker],
                   settings: Settings) -> LeaderAndIsrRequest:
    """settings: those of every topic named (a topic left out goes with none: null)."""
    by_topic: dict[str, list[LeaderAndIsrPartitionState]] = defaultdict(list)
    leaders: set[int] = set()
    for topic, index, p, is_new in items:
        by_topic[topic].append(LeaderAndIsrPartitionState(
            partition_index=index, controller_epoch=controller_epoch, leader=p.leader,
            leader_epoch=p.leader_epoch, isr=list(p.isr), partition_epoch=p.partition_epoch,
            replicas=list(p.replicas), is_new=is_new))
        leaders.add(p.leader)
    live_leaders = []
    for leader in sorted(leaders):
        b = brokers.get(leader)
        if b is not None and b.live:
            host, port = b.endpoint
            live_leaders.append(LeaderAndIsrLiveLeader(broker_id=leader, host_name=host,
                                                       port=port))
    return LeaderAndIsrRequest(
        controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        topic_states=[LeaderAndIsrTopicState(
            topic_name=t, partition_states=ps,
            configs=_configs(LeaderAndIsrTopicConfig, settings.get(t)))
            for t, ps in sorted(by_topic.items())],
        live_leaders=live_leaders)


def update_metadata(controller_id: int, controller_epoch: int, broker_epoch: int,
                    items: Iterable[UmItem], brokers: Mapping[int, Broker],
                    topic_ids: Mapping[str, uuid.UUID] | None = None,
                    settings: Settings | None = None) -> UpdateMetadataRequest:
    """topic_ids: each topic's id (v7); a topic not in it (being deleted) goes with the zero id.
    settings: the topics whose settings changed, with them (also a topic no item names)."""
    ids = topic_ids or {}
    settings = settings or {}
    by_topic: dict[str, list[UpdateMetadataPartitionState]] = defaultdict(list)
    for topic in settings:
        by_topic[topic] = []
    for topic, index, p, replicas in items:
        if p is None:
            state = UpdateMetadataPartitionState(
                partition_index=index, controller_epoch=controller_epoch,
                leader=LEADER_DURING_DELETE, replicas=list(replicas))
        else:
            state = UpdateMetadataPartitionState(
                partition_index=index, controller_epoch=controller_epoch, leader=p.leader,
                leader_epoch=p.leader_epoch, isr=list(p.isr), partition_epoch=p.partition_epoch,
                replicas=list(p.replicas),
                offline_replicas=offline_replicas(brokers, topic, index, p))
        by_topic[topic].append(state)
    return UpdateMetadataRequest(
        controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        topic_states=[UpdateMetadataTopicState(
            topic_name=t, topic_id=ids.get(t, ZERO_UUID), partition_states=ps,
            configs=_configs(UpdateMetadataTopicConfig, settings.get(t)))
            for t, ps in sorted(by_topic.items())],
        live_brokers=[_um_broker(b) for _, b in sorted(brokers.items()) if b.live])


def _configs(cls: type[_Config], settings: Mapping[str, str] | None) -> list[_Config] | None:
    return None if settings is None else [cls(name=n, value=v)
                                          for n, v in sorted(settings.items())]


def offline_replicas(brokers: Mapping[int, Broker], topic: str, index: int, p: Partition
                     ) -> list[int]:
    """The replicas of topic-index whose broker has no live generation or lists that replica's
    log offline."""
    out = []
    for r in p.replicas:
        b = brokers.get(r)
        if b is None or not b.live or (topic, index) in b.offline_replicas:
            out.append(r)
    return out


def stop_replica(controller_id: int, controller_epoch: int, broker_epoch: int,
                 items: Iterable[StopItem]) -> StopReplicaRequest:
    by_topic: dict[str, list[StopReplicaPartitionState]] = defaultdict(list)
    for topic, index, leader_epoch, delete in items:
        by_topic[topic].append(StopReplicaPartitionState(
            partition_index=index, leader_epoch=leader_epoch, delete_partition=delete))
    return StopReplicaRequest(
        controller_id=controller_id, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        topic_states=[StopReplicaTopicState(topic_name=t, partition_states=ps)
                      for t, ps in sorted(by_topic.items())])


def _um_broker(b: Broker) -> UpdateMetadataBroker:
    return UpdateMetadataBroker(
        id=b.broker_id, rack=b.rack,
        endpoints=[UpdateMetadataEndpoint(port=lst.port, host=lst.host, listener=lst.name,
                                          security_protocol=lst.security_protocol)
                   for lst in b.listeners])


def log_end_query(replica_id: int, items: Iterable[tuple[str, int, int]]
                  ) -> OffsetForLeaderEpochRequest:
    """Each (topic, partition, its current leader epoch): what the replica holds. No fencing
    (current_leader_epoch -1); the epoch asked for is the partition's, at or above any a replica
    can have written."""
    by_topic: dict[str, list[OffsetForLeaderPartition]] = defaultdict(list)
    for topic, index, leader_epoch in items:
        by_topic[topic].append(OffsetForLeaderPartition(
            partition=index, current_leader_epoch=-1, leader_epoch=leader_epoch))
    return OffsetForLeaderEpochRequest(replica_id=replica_id, topics=[
        OffsetForLeaderTopic(topic=t, partitions=parts) for t, parts in sorted(by_topic.items())])
