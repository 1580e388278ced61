"""The requests the controller serves: wire messages in, calls on ControllerState, answers out.

Each handler is registered in `HANDLERS` with the version range the controller advertises (the
protocol's own range, narrowed where a version lacks a field the controller needs), and
ApiVersions is built from that table. Handlers are synchronous and pure apart from the state
they are given; the service persists the records they caused before it sends their answer.

| key | API | versions | notes |
| --- | --- | --- | --- |
| 3 | Metadata | 1-12 | cluster state as the controller sees it; never creates topics |
| 7 | ControlledShutdown | 2-3 | not v1: without a broker epoch a stale retry passes |
| 18 | ApiVersions | 0-3 | only the APIs below |
| 19 | CreateTopics | 2-7 | |
| 20 | DeleteTopics | 1-6 | v6 by name or topic id |
| 32 | DescribeConfigs | 1-4 | topic resources only |
| 37 | CreatePartitions | 0-3 | |
| 43 | ElectLeaders | 0-2 | v0 is preferred election |
| 56 | AlterPartition | 0-3 | v2+ names topics by id; v3 ISR members with broker epochs |
| 62 | BrokerRegistration | 0 | |
| 63 | BrokerHeartbeat | 0 | |
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.alter_partition import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResponsePartition,
    AlterPartitionResponseTopic,
)
from epochlog.protocol.apis.api_versions import ApiVersion, ApiVersionsResponse
from epochlog.protocol.apis.broker_heartbeat import BrokerHeartbeatRequest, BrokerHeartbeatResponse
from epochlog.protocol.apis.broker_registration import (
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
)
from epochlog.protocol.apis.controlled_shutdown import (
    ControlledShutdownRequest,
    ControlledShutdownResponse,
    RemainingPartition,
)
from epochlog.protocol.apis.create_partitions import (
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreatePartitionsTopicResult,
)
from epochlog.protocol.apis.create_topics import (
    CreatableTopicConfigs,
    CreatableTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
)
from epochlog.protocol.apis.delete_topics import (
    DeletableTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
)
from epochlog.protocol.apis.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
    DescribeConfigsSynonym,
)
from epochlog.protocol.apis.elect_leaders import (
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    ReplicaElectionResult,
)
from epochlog.protocol.apis.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import ZERO_UUID, Message

from . import outbound, topic_settings
from .config_handlers import alter_configs, incremental_alter_configs
from .describe_partitions import describe_topic_partitions
from .model import NO_LEADER
from .records import Listener
from .state import ControllerState

E = ErrorCode
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4

Handler = Callable[[ControllerState, Any, int, int], Message]


@dataclass(frozen=True)
class Served:
    min_version: int
    max_version: int
    handle: Handler | None  # None: answered by the server itself (ApiVersions)


def api_versions_response(error: int = 0) -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=error, api_keys=[
        ApiVersion(api_key=k, min_version=s.min_version, max_version=s.max_version)
        for k, s in sorted(HANDLERS.items())])


# ---------------------------------------------------------------------------- broker lifecycle
def broker_registration(state: ControllerState, req: BrokerRegistrationRequest, version: int,
                        now_ms: int) -> BrokerRegistrationResponse:
    listeners = [Listener(lst.name, lst.host, lst.port, lst.security_protocol)
                 for lst in req.listeners]
    error, epoch = state.register_broker(req.broker_id, req.incarnation_id, req.rack, listeners,
                                         now_ms, req.cluster_id, req.previous_broker_epoch,
                                         req.replica_capacity)
    return BrokerRegistrationResponse(error_code=error, broker_epoch=epoch)


def broker_heartbeat(state: ControllerState, req: BrokerHeartbeatRequest, version: int,
                     now_ms: int) -> BrokerHeartbeatResponse:
    r = state.heartbeat(req.broker_id, req.broker_epoch, now_ms, req.want_shut_down,
                        req.offline_log_dirs)
    return BrokerHeartbeatResponse(error_code=r.error, is_caught_up=r.error == 0,
                                   is_fenced=r.is_fenced, should_shut_down=r.should_shut_down)


def controlled_shutdown(state: ControllerState, req: ControlledShutdownRequest, version: int,
                        now_ms: int) -> ControlledShutdownResponse:
    error, remaining = state.controlled_shutdown(req.broker_id, req.broker_epoch, now_ms)
    return ControlledShutdownResponse(error_code=error, remaining_partitions=[
        RemainingPartition(topic_name=t, partition_index=i) for t, i in remaining])


def alter_partition(state: ControllerState, req: AlterPartitionRequest, version: int,
                    now_ms: int) -> AlterPartitionResponse:
    error = state.check_generation(req.broker_id, req.broker_epoch, "AlterPartition")
    if error:
        return AlterPartitionResponse(error_code=error)
    topics = []
    for t in req.topics:
        topic = state.topic_by_id(t.topic_id) if version >= 2 else state.topics.get(t.topic_name)
        unknown = E.UNKNOWN_TOPIC_ID if version >= 2 else E.UNKNOWN_TOPIC_OR_PARTITION
        parts = []
        for pd in t.partitions:
            if topic is None:
                parts.append(AlterPartitionResponsePartition(partition_index=pd.partition_index,
                                                             error_code=unknown))
                continue
            if version >= 3:
                isr = [m.broker_id for m in pd.new_isr_with_epochs]
                epochs: list[int] | None = [m.broker_epoch for m in pd.new_isr_with_epochs]
            else:
                isr, epochs = list(pd.new_isr), None
            err, p = state.alter_partition(req.broker_id, topic.name, pd.partition_index,
                                           pd.leader_epoch, pd.partition_epoch, isr, epochs)
            part = AlterPartitionResponsePartition(partition_index=pd.partition_index,
                                                   error_code=err)
            if p is not None:
                part.leader_id, part.leader_epoch = p.leader, p.leader_epoch
                part.isr, part.partition_epoch = list(p.isr), p.partition_epoch
            parts.append(part)
        topics.append(AlterPartitionResponseTopic(topic_name=t.topic_name, topic_id=t.topic_id,
                                                  partitions=parts))
    return AlterPartitionResponse(topics=topics)


# ------------------------------------------------------------------------------------ admin
def create_topics(state: ControllerState, req: CreateTopicsRequest, version: int,
                  now_ms: int) -> CreateTopicsResponse:
    results = []
    for t in req.topics:
        assignments = {a.partition_index: a.broker_ids for a in t.assignments}
        configs = {c.name: c.value for c in t.configs}
        r = state.create_topic(t.name, t.num_partitions, t.replication_factor, assignments,
                               configs, req.validate_only)
        out = CreatableTopicResult(name=t.name, error_code=r.error, error_message=r.message,
                                   topic_id=r.topic_id)
        if r.error == 0:
            out.num_partitions, out.replication_factor = r.num_partitions, r.replication_factor
            out.configs = _created_configs(state, r.configs)
        results.append(out)
    return CreateTopicsResponse(topics=results)


def _created_configs(state: ControllerState, overrides: dict[str, str]
                     ) -> list[CreatableTopicConfigs]:
    return [CreatableTopicConfigs(name=e.name, value=e.value, config_source=e.source)
            for e in topic_settings.effective(overrides, state.topic_defaults,
                                                 state.dynamic_defaults)]


def delete_topics(state: ControllerState, req: DeleteTopicsRequest, version: int,
                  now_ms: int) -> DeleteTopicsResponse:
    wanted: list[tuple[str | None, Any]] = (
        [(t.name, t.topic_id) for t in req.topics] if version >= 6
        else [(name, ZERO_UUID) for name in req.topic_names])
    results = []
    for name, topic_id in wanted:
        if name is None and topic_id != ZERO_UUID:
            topic = state.topic_by_id(topic_id)
            name = topic.name if topic is not None else None
        found = state.topics.get(name) if name is not None else None
        if found is None:
            error = E.UNKNOWN_TOPIC_ID if (version >= 6 and topic_id != ZERO_UUID) \
                else E.UNKNOWN_TOPIC_OR_PARTITION
            results.append(DeletableTopicResult(name=name, topic_id=topic_id, error_code=error))
            continue
        topic_id = found.topic_id
        results.append(DeletableTopicResult(name=found.name, topic_id=topic_id,
                                            error_code=state.delete_topic(found.name)))
    return DeleteTopicsResponse(responses=results)


def create_partitions(state: ControllerState, req: CreatePartitionsRequest, version: int,
                      now_ms: int) -> CreatePartitionsResponse:
    results = []
    for t in req.topics:
        assignments = [a.broker_ids for a in t.assignments] if t.assignments else None
        error, message = state.create_partitions(t.name, t.count, assignments, req.validate_only)
        results.append(CreatePartitionsTopicResult(name=t.name, error_code=error,
                                                   error_message=message))
    return CreatePartitionsResponse(results=results)


def elect_leaders(state: ControllerState, req: ElectLeadersRequest, version: int,
                  now_ms: int) -> ElectLeadersResponse:
    election_type = req.election_type if version >= 1 else 0
    wanted = req.topic_partitions
    if wanted is None:  # null: every partition
        pairs = [(name, sorted(t.partitions)) for name, t in sorted(state.topics.items())]
    else:
        pairs = [(tp.topic, list(tp.partitions)) for tp in wanted]
    results = []
    for topic, indexes in pairs:
        parts = []
        for index in indexes:
            error, message = state.elect_leader(topic, index, election_type)
            parts.append(PartitionResult(partition_id=index, error_code=error,
                                         error_message=message))
        results.append(ReplicaElectionResult(topic=topic, partition_result=parts))
    return ElectLeadersResponse(replica_election_results=results)


def describe_configs(state: ControllerState, req: DescribeConfigsRequest, version: int,
                     now_ms: int) -> DescribeConfigsResponse:
    """Topic resources: every setting with its value in force, source and synonyms. BROKER
    resources are answered by the brokers themselves (a broker relays only topics here)."""
    results = []
    for res in req.resources:
        out = DescribeConfigsResult(resource_type=res.resource_type,
                                    resource_name=res.resource_name, error_message=None)
        topic = state.topics.get(res.resource_name) \
            if res.resource_type == RESOURCE_TOPIC else None
        if res.resource_type == RESOURCE_BROKER and res.resource_name == "":
            out.configs = _dynamic_defaults(state, res.configuration_keys)
        elif res.resource_type != RESOURCE_TOPIC:
            out.error_code = E.INVALID_REQUEST
            out.error_message = "the controller describes topic resources; ask a broker for " \
                                "its own settings"
        elif topic is None:
            out.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
            out.error_message = f"no topic {res.resource_name!r}"
        else:
            keys = res.configuration_keys
            out.configs = [DescribeConfigsResourceResult(
                name=e.name, value=e.value, read_only=False, config_source=e.source,
                is_sensitive=False,
                synonyms=[DescribeConfigsSynonym(name=n, value=v, source=src)
                          for n, v, src in e.synonyms] if req.include_synonyms else [],
                config_type=topic_settings.SPECS[e.name].config_type,
                documentation=topic_settings.SPECS[e.name].doc
                if req.include_documentation else None)
                for e in topic_settings.effective(topic.configs, state.topic_defaults,
                                                 state.dynamic_defaults)
                if not keys or e.name in keys]
        results.append(out)
    return DescribeConfigsResponse(results=results)


def _dynamic_defaults(state: ControllerState, keys: list[str] | None
                      ) -> list[DescribeConfigsResourceResult]:
    """The default BROKER resource, as Kafka describes it: the dynamic cluster-wide defaults
    only, under Kafka's broker setting names."""
    out = []
    for name, value in sorted(state.dynamic_defaults.items()):
        spec = topic_settings.SPECS[name]
        broker_name = spec.broker_name or name
        if keys and broker_name not in keys:
            continue
        out.append(DescribeConfigsResourceResult(
            name=broker_name, value=value, read_only=False,
            config_source=topic_settings.SOURCE_DYNAMIC_DEFAULT, is_sensitive=False,
            synonyms=[DescribeConfigsSynonym(name=broker_name, value=value,
                                             source=topic_settings.SOURCE_DYNAMIC_DEFAULT)],
            config_type=spec.config_type, documentation=spec.doc))
    return out


def metadata(state: ControllerState, req: MetadataRequest, version: int,
             now_ms: int) -> MetadataResponse:
    live = {i: b for i, b in state.brokers.items() if b.live}
    brokers = [MetadataResponseBroker(node_id=i, host=b.endpoint[0], port=b.endpoint[1],
                                      rack=b.rack) for i, b in sorted(live.items())]
    names: list[str | None]
    if req.topics is None:
        names = list(sorted(state.topics))
    else:
        names = []
        for t in req.topics:
            if t.name is None and t.topic_id != ZERO_UUID:
                found = state.topic_by_id(t.topic_id)
                names.append(found.name if found else None)
            else:
                names.append(t.name)
    topics = []
    for name in names:
        topic = state.topics.get(name) if name is not None else None
        if topic is None:
            topics.append(MetadataResponseTopic(error_code=E.UNKNOWN_TOPIC_OR_PARTITION,
                                                name=name))
            continue
        parts = [MetadataResponsePartition(
            error_code=E.LEADER_NOT_AVAILABLE if p.leader == NO_LEADER else 0,
            partition_index=i, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
            offline_replicas=outbound.offline_replicas(state.brokers, topic.name, i, p))
            for i, p in sorted(topic.partitions.items())]
        topics.append(MetadataResponseTopic(name=name, topic_id=topic.topic_id,
                                            partitions=parts))
    return MetadataResponse(brokers=brokers, cluster_id=state.cluster_id,
                            controller_id=state.controller_id, topics=topics)


def _every_version(key: ApiKey, handler: Handler | None) -> Served:
    api = APIS[key]
    return Served(api.min_version, api.max_version, handler)


HANDLERS: dict[int, Served] = {
    ApiKey.METADATA: Served(1, APIS[ApiKey.METADATA].max_version, metadata),
    ApiKey.CONTROLLED_SHUTDOWN: Served(2, APIS[ApiKey.CONTROLLED_SHUTDOWN].max_version,
                                       controlled_shutdown),
    ApiKey.API_VERSIONS: Served(0, APIS[ApiKey.API_VERSIONS].max_version, None),
    ApiKey.CREATE_TOPICS: _every_version(ApiKey.CREATE_TOPICS, create_topics),
    ApiKey.DELETE_TOPICS: _every_version(ApiKey.DELETE_TOPICS, delete_topics),
    ApiKey.DESCRIBE_CONFIGS: _every_version(ApiKey.DESCRIBE_CONFIGS, describe_configs),
    ApiKey.ALTER_CONFIGS: _every_version(ApiKey.ALTER_CONFIGS, alter_configs),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _every_version(ApiKey.INCREMENTAL_ALTER_CONFIGS,
                                                     incremental_alter_configs),
    ApiKey.CREATE_PARTITIONS: _every_version(ApiKey.CREATE_PARTITIONS, create_partitions),
    ApiKey.ELECT_LEADERS: _every_version(ApiKey.ELECT_LEADERS, elect_leaders),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: _every_version(ApiKey.DESCRIBE_TOPIC_PARTITIONS,
                                                     describe_topic_partitions),
    ApiKey.ALTER_PARTITION: _every_version(ApiKey.ALTER_PARTITION, alter_partition),
    ApiKey.BROKER_REGISTRATION: _every_version(ApiKey.BROKER_REGISTRATION, broker_registration),
    ApiKey.BROKER_HEARTBEAT: _every_version(ApiKey.BROKER_HEARTBEAT, broker_heartbeat),
}
