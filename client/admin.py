"""The asyncio admin client: topics, partitions, leaders, offsets and settings of a cluster.

    async with Admin(bootstrap_servers="127.0.0.1:9092") as admin:
        await admin.create_topics([NewTopic("orders", num_partitions=3, replication_factor=2,
                                            topic_configs={"retention.ms": "60000"})])
        topics = await admin.describe_topics(["orders"])   # leaders, leader epochs, ISR
        offsets = await admin.list_offsets({TopicPartition("orders", 0): "latest"})
        await admin.elect_leaders("preferred", [TopicPartition("orders", 0)])

Names follow aiokafka's AIOKafkaAdminClient and kafka-python's KafkaAdminClient (NewTopic,
create_topics, delete_topics, describe_cluster, create_partitions, describe_configs) and
confluent-kafka's AdminClient where those lack a call (list_offsets, elect_leaders).

Rules: controller-side requests (CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders,
DescribeConfigs) go to any broker, which relays them to the controller (epochlog) or is the
controller (Kafka brokers answer NOT_CONTROLLER otherwise: the request is sent again to the
controller named by fresh metadata). ListOffsets goes to each partition's leader with the leader
epoch we know (KIP-320), retried after a metadata refresh (offsets_lookup.py). Errors
are raised as client.errors classes, naming the topic or partition; calls with per-item results
raise the first item's error unless `raise_errors=False`, when they return the errors instead.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, NamedTuple, TypeVar

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.alter_configs import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
)
from epochlog.protocol.apis.create_partitions import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from epochlog.protocol.apis.create_topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from epochlog.protocol.apis.delete_records import (
    DeleteRecordsPartition,
    DeleteRecordsRequest,
    DeleteRecordsTopic,
)
from epochlog.protocol.apis.delete_topics import DeleteTopicsRequest, DeleteTopicState
from epochlog.protocol.apis.describe_cluster import DescribeClusterRequest
from epochlog.protocol.apis.describe_configs import DescribeConfigsRequest, DescribeConfigsResource
from epochlog.protocol.apis.describe_log_dirs import DescribeLogDirsRequest
from epochlog.protocol.apis.describe_topic_partitions import (
    Cursor,
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from epochlog.protocol.apis.elect_leaders import ElectLeadersRequest, TopicPartitions
from epochlog.protocol.apis.incremental_alter_configs import (
    AlterableConfig as IncrementalConfig,
)
from epochlog.protocol.apis.incremental_alter_configs import (
    AlterConfigsResource as IncrementalResource,
)
from epochlog.protocol.apis.incremental_alter_configs import IncrementalAlterConfigsRequest
from epochlog.protocol.apis.metadata import MetadataResponse
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import Message

from .admin_groups import GroupAdmin, GroupDescription, GroupListing
from .admin_txns import TransactionDescription, TransactionListing, TxnAdmin
from .cluster import (
    SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_DEFAULT,
    SOCKET_CONNECTION_SETUP_TIMEOUT_MS_DEFAULT,
    Bootstrap,
    ClusterClient,
)
from .errors import (
    KafkaError,
    KafkaTimeoutError,
    error_for,
)
from .offsets_lookup import (
    SPECS,
    ListOffsetsResult,
    OffsetSpec,
    list_offsets,
    retrying,
)
from .security import context_for
from .types import TopicPartition

E = ErrorCode
DESCRIBE_PAGES_MAX = 10_000  # DescribeTopicPartitions answers followed for one describe
_ELECTION_TYPES = {"preferred": 0, "unclean": 1}
_RESOURCE_TYPES = {"topic": 2, "broker": 4}
_OPS = {"set": 0, "delete": 1, "append": 2, "subtract": 3}

T = TypeVar("T")


@dataclass(frozen=True)
class NewTopic:
    """A topic to create. -1 lets the cluster choose (its default partitions / replication);
    replica_assignments maps partition -> broker ids, instead of both counts."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignments: Mapping[int, Sequence[int]] = field(default_factory=dict)
    topic_configs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class BrokerDescription:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: list[BrokerDescription]


@dataclass(frozen=True)
class PartitionDescription:
    partition: int
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int]
    error: KafkaError | None = None
    # KIP-966's eligible leader replicas: from describe_topic_partitions; None from Metadata
    eligible_leader_replicas: list[int] | None = None


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]
    is_internal: bool = False


class LogDirDescription(NamedTuple):
    path: str
    partition_bytes: dict[TopicPartition, int]
    total_bytes: int
    usable_bytes: int


class ConfigResource(NamedTuple):
    resource_type: Literal["topic", "broker"]
    name: str


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    source: int  # Kafka's: 1 the topic's own, 4 the broker's (static), 5 the default
    is_sensitive: bool
    synonyms: list[tuple[str, str | None, int]] = field(default_factory=list)  # (name, value,
    # source), strongest first, with include_synonyms


class AlterConfigOp(NamedTuple):
    name: str
    op: Literal["set", "delete", "append", "subtract"]
    value: str | None = None


class Admin:
    def __init__(self, bootstrap_servers: Bootstrap = "127.0.0.1:9092", *,
                 client_id: str = "epochlog-admin", request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100,
                 socket_connection_setup_timeout_ms: int =
                 SOCKET_CONNECTION_SETUP_TIMEOUT_MS_DEFAULT,
                 socket_connection_setup_timeout_max_ms: int =
                 SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_DEFAULT,
                 security_protocol: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.cluster = ClusterClient(
            bootstrap_servers, client_id=client_id, request_timeout_ms=request_timeout_ms,
            socket_connection_setup_timeout_ms=socket_connection_setup_timeout_ms,
            socket_connection_setup_timeout_max_ms=socket_connection_setup_timeout_max_ms,
            ssl_context=context_for(security_protocol, ssl_context))
        self._timeout_ms = request_timeout_ms
        self._backoff_s = retry_backoff_ms / 1000
        self._groups = GroupAdmin(self.cluster, self._backoff_s)
        self._txns = TxnAdmin(self._groups)

    async def start(self) -> None:
        await self.cluster.refresh([])

    async def close(self) -> None:
        await self.cluster.close()

    async def __aenter__(self) -> Admin:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # --------------------------------------------------------------------------- topics
    async def create_topics(self, new_topics: Sequence[NewTopic], *, timeout_ms: int | None = None,
                            validate_only: bool = False, raise_errors: bool = True,
                            wait_for_leaders: bool = True) -> dict[str, KafkaError | None]:
        """Create topics (with settings); per topic None or its error. The cluster's metadata
        follows a creation shortly after; wait_for_leaders waits (within the timeout) until every
        partition of each created topic has a leader, so the topic is usable on return."""
        request = CreateTopicsRequest(topics=[CreatableTopic(
            name=t.name, num_partitions=-1 if t.replica_assignments else t.num_partitions,
            replication_factor=-1 if t.replica_assignments else t.replication_factor,
            assignments=[CreatableReplicaAssignment(partition_index=p, broker_ids=list(ids))
                         for p, ids in sorted(t.replica_assignments.items())],
            configs=[CreatableTopicConfig(name=k, value=v) for k, v in t.topic_configs.items()])
            for t in new_topics], timeout_ms=self._op_timeout(timeout_ms),
            validate_only=validate_only)
        answer = await self._controller_request(ApiKey.CREATE_TOPICS, request)
        results = {r.name: _error(r.error_code, f"create topic {r.name}", r.error_message)
                   for r in answer.topics}
        _results(results, raise_errors)
        if wait_for_leaders and not validate_only:
            created = [name for name, error in results.items() if error is None]
            await self._wait_metadata(created, self._has_leaders,
                                      self._op_timeout(timeout_ms) / 1000, "create topics")
        return results

    async def _wait_metadata(self, topics: Sequence[str], ready: Callable[[str], bool],
                             timeout_s: float, what: str) -> None:
        """Refresh metadata until ready(topic) holds for each topic (the cluster's metadata
        follows the controller's decisions shortly after it answers)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        pending = list(topics)
        while pending:
            await self._refresh(pending)
            pending = [t for t in pending if not ready(t)]
            if not pending:
                return
            if loop.time() >= deadline:
                raise KafkaTimeoutError(f"{what}: metadata of {', '.join(pending)} did not "
                                        f"show it within {timeout_s:.0f} s")
            await asyncio.sleep(self._backoff_s)

    def _has_leaders(self, topic: str, count: int = 1) -> bool:
        views = self.cluster.partitions_of(topic)
        return (self.cluster.topic_errors.get(topic) == 0 and len(views) >= count
                and all(v.leader >= 0 for v in views))

    async def delete_topics(self, topics: Sequence[str], *, timeout_ms: int | None = None,
                            raise_errors: bool = True, wait: bool = True
                            ) -> dict[str, KafkaError | None]:
        """Delete topics; per topic None or its error. wait: until metadata no longer shows
        them."""
        request = DeleteTopicsRequest(topics=[DeleteTopicState(name=t) for t in topics],
                                      topic_names=list(topics),
                                      timeout_ms=self._op_timeout(timeout_ms))
        answer = await self._controller_request(ApiKey.DELETE_TOPICS, request)
        results = {r.name or "": _error(r.error_code, f"delete topic {r.name}", r.error_message)
                   for r in answer.responses}
        _results(results, raise_errors)
        if wait:
            deleted = [name for name, error in results.items() if error is None]
            await self._wait_metadata(
                deleted, lambda t: self.cluster.topic_errors.get(t) ==
                E.UNKNOWN_TOPIC_OR_PARTITION, self._op_timeout(timeout_ms) / 1000,
                "delete topics")
            for (topic, index) in [k for k in self.cluster.partitions if k[0] in deleted]:
                del self.cluster.partitions[(topic, index)]
        return results

    async def create_partitions(self, new_counts: Mapping[str, int], *,
                                assignments: Mapping[str, Sequence[Sequence[int]]] | None = None,
                                timeout_ms: int | None = None, validate_only: bool = False,
                                raise_errors: bool = True, wait_for_leaders: bool = True
                                ) -> dict[str, KafkaError | None]:
        """Grow each topic to new_counts[topic] partitions (optionally naming the new ones'
        replicas); wait_for_leaders: until metadata shows them all with leaders."""
        chosen = assignments or {}
        request = CreatePartitionsRequest(topics=[CreatePartitionsTopic(
            name=name, count=count,
            assignments=[CreatePartitionsAssignment(broker_ids=list(ids))
                         for ids in chosen[name]] if name in chosen else None)
            for name, count in new_counts.items()], timeout_ms=self._op_timeout(timeout_ms),
            validate_only=validate_only)
        answer = await self._controller_request(ApiKey.CREATE_PARTITIONS, request)
        results = {r.name: _error(r.error_code, f"create partitions of {r.name}", r.error_message)
                   for r in answer.results}
        _results(results, raise_errors)
        if wait_for_leaders and not validate_only:
            grown = [name for name, error in results.items() if error is None]
            await self._wait_metadata(grown, lambda t: self._has_leaders(t, new_counts[t]),
                                      self._op_timeout(timeout_ms) / 1000, "create partitions")
        return results

    async def list_topics(self) -> list[str]:
        await self._refresh(None)
        return sorted(name for name, code in self.cluster.topic_errors.items() if code == 0)

    async def describe_topics(self, topics: Sequence[str] | None = None
                              ) -> dict[str, TopicDescription]:
        """Partitions of each topic (all topics if None), with leaders, leader epochs, replicas
        and ISR, from fresh metadata. UnknownTopicOrPartitionError for a topic that does not
        exist."""
        answer = await self._refresh(topics)
        out = {}
        for t in answer.topics:
            name = t.name or ""
            if t.error_code:
                raise error_for(t.error_code, f"describe topic {name}")
            out[name] = TopicDescription(name, sorted(
                (PartitionDescription(p.partition_index, p.leader_id, p.leader_epoch,
                                      list(p.replica_nodes), list(p.isr_nodes),
                                      list(p.offline_replicas),
                                      _error(p.error_code, f"{name}-{p.partition_index}"))
                 for p in t.partitions), key=lambda d: d.partition), t.is_internal)
        return out

    async def describe_topic_partitions(self, topics: Sequence[str] | None = None
                                        ) -> dict[str, TopicDescription]:
        """As describe_topics, through DescribeTopicPartitions (KIP-966): each partition also
        carries its eligible leader replicas. Pages through the whole answer."""
        out: dict[str, list[PartitionDescription]] = {}
        cursor: Cursor | None = None
        for _ in range(DESCRIBE_PAGES_MAX):
            request = DescribeTopicPartitionsRequest(
                topics=[TopicRequest(name=t) for t in topics or ()], cursor=cursor)
            answer = await self._controller_request(ApiKey.DESCRIBE_TOPIC_PARTITIONS, request)
            for t in answer.topics:
                name = t.name or ""
                if t.error_code:
                    raise error_for(t.error_code, f"describe topic {name}")
                out.setdefault(name, []).extend(
                    PartitionDescription(p.partition_index, p.leader_id, p.leader_epoch,
                                         list(p.replica_nodes), list(p.isr_nodes),
                                         list(p.offline_replicas), None,
                                         None if p.eligible_leader_replicas is None
                                         else list(p.eligible_leader_replicas))
                    for p in t.partitions)
            cursor = answer.next_cursor
            if cursor is None:
                return {name: TopicDescription(name, sorted(parts, key=lambda d: d.partition))
                        for name, parts in out.items()}
        raise KafkaError(f"describe topic partitions: still paging after {DESCRIBE_PAGES_MAX} "
                         "answers")

    # --------------------------------------------------------------------------- cluster
    async def describe_cluster(self) -> ClusterDescription:
        return await self._retrying(self._describe_cluster)

    async def _describe_cluster(self) -> ClusterDescription:
        conn = await self.cluster.any_connection()
        if APIS[ApiKey.DESCRIBE_CLUSTER].key in conn.server_versions:
            answer = await self.cluster.request(conn, 60, DescribeClusterRequest())
            if answer.error_code:
                raise error_for(answer.error_code, "describe cluster")
            return ClusterDescription(answer.cluster_id, answer.controller_id, sorted(
                (BrokerDescription(b.broker_id, b.host, b.port, b.rack) for b in answer.brokers),
                key=lambda b: b.node_id))
        meta = await self.cluster.refresh([])  # older brokers: the same facts from Metadata
        return ClusterDescription(meta.cluster_id, meta.controller_id, sorted(
            (BrokerDescription(b.node_id, b.host, b.port, b.rack) for b in meta.brokers),
            key=lambda b: b.node_id))

    async def elect_leaders(self, election_type: Literal["preferred", "unclean"] = "preferred",
                            partitions: Iterable[TopicPartition] | None = None, *,
                            timeout_ms: int | None = None, raise_errors: bool = True
                            ) -> dict[TopicPartition, KafkaError | None]:
        """Elect leaders (None: every partition). ELECTION_NOT_NEEDED counts as success."""
        if election_type not in _ELECTION_TYPES:
            raise ValueError(f"election_type must be 'preferred' or 'unclean', not "
                             f"{election_type!r}")
        by_topic: dict[str, list[int]] = {}
        for tp in partitions or ():
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = ElectLeadersRequest(
            election_type=_ELECTION_TYPES[election_type],
            topic_partitions=None if partitions is None else [
                TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()],
            timeout_ms=self._op_timeout(timeout_ms))
        answer = await self._controller_request(ApiKey.ELECT_LEADERS, request)
        if answer.error_code:
            raise error_for(answer.error_code, f"elect {election_type} leaders")
        results: dict[TopicPartition, KafkaError | None] = {}
        for topic in answer.replica_election_results:
            for p in topic.partition_result:
                code = 0 if p.error_code == E.ELECTION_NOT_NEEDED else p.error_code
                results[TopicPartition(topic.topic, p.partition_id)] = _error(
                    code, f"elect leader of {topic.topic}-{p.partition_id}", p.error_message)
        self.cluster.request_update()  # leaders moved
        return _results(results, raise_errors)

    async def describe_configs(self, resources: Sequence[ConfigResource], *,
                               include_synonyms: bool = False
                               ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        """Every setting of each resource, with its value in force and where it comes from.
        A topic's go through any broker to the controller; a broker's are asked of that broker
        (its id as the name), as Kafka requires; ConfigResource("broker", "") is the cluster's
        dynamic defaults."""
        for r in resources:
            if r.resource_type not in _RESOURCE_TYPES:
                raise ValueError(f"resource_type must be 'topic' or 'broker', not "
                                 f"{r.resource_type!r}")
            if r.resource_type == "broker" and not (r.name.isdigit() or r.name == ""):
                raise ValueError(f"a broker resource is named by the broker's id (or empty for "
                                 f"the cluster-wide defaults), not {r.name!r}")
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        topics = [r for r in resources if r.resource_type == "topic" or r.name == ""]
        if topics:
            answer = await self._controller_request(ApiKey.DESCRIBE_CONFIGS,
                                                    _describe_request(topics, include_synonyms))
            out.update(_described(answer))
        for r in resources:
            if r.resource_type == "broker" and r.name:
                answer = await self._retrying(self._at(
                    int(r.name), ApiKey.DESCRIBE_CONFIGS, _describe_request([r], include_synonyms)))
                out.update(_described(answer))
        return {r: out[r] for r in resources}

    async def alter_configs(self, configs: Mapping[ConfigResource, Mapping[str, str | None]], *,
                            validate_only: bool = False) -> None:
        """Replace each topic's own settings with these (None: back to the default), as
        Kafka's (deprecated) alterConfigs. Brokers put changes into force within a few
        seconds. Raises the first resource's error (InvalidConfigError naming the setting)."""
        request = AlterConfigsRequest(validate_only=validate_only, resources=[
            AlterConfigsResource(resource_type=_RESOURCE_TYPES[r.resource_type],
                                 resource_name=r.name,
                                 configs=[AlterableConfig(name=k, value=v) for k, v in c.items()])
            for r, c in configs.items()])
        answer = await self._controller_request(ApiKey.ALTER_CONFIGS, request)
        for resp in answer.responses:
            _raise_for(resp, "alter configs")

    async def incremental_alter_configs(
            self, changes: Mapping[ConfigResource, Sequence[AlterConfigOp]], *,
            validate_only: bool = False) -> None:
        """Change only the settings named: AlterConfigOp(name, "set", value), (name, "delete"),
        and for list settings (name, "append", value) and (name, "subtract", value)."""
        request = IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
            IncrementalResource(
                resource_type=_RESOURCE_TYPES[r.resource_type], resource_name=r.name,
                configs=[IncrementalConfig(name=op.name, config_operation=_OPS[op.op],
                                           value=op.value) for op in ops])
            for r, ops in changes.items()])
        answer = await self._controller_request(ApiKey.INCREMENTAL_ALTER_CONFIGS, request)
        for resp in answer.responses:
            _raise_for(resp, "alter configs")

    # --------------------------------------------------------------------------- offsets
    async def list_offsets(self, specs: Mapping[TopicPartition, OffsetSpec], *,
                           isolation_level: Literal["read_uncommitted", "read_committed"]
                           = "read_uncommitted") -> dict[TopicPartition, ListOffsetsResult]:
        """Per partition: "earliest", "latest", "max_timestamp", or a timestamp in ms (the first
        offset whose timestamp is at or after it; offset -1 if none). Each answer carries the
        leader epoch of that offset (KIP-320)."""
        return await list_offsets(
            self.cluster, {tp: SPECS[s] if isinstance(s, str) else int(s)
                           for tp, s in specs.items()},
            read_committed=isolation_level == "read_committed", backoff_s=self._backoff_s)

    async def delete_records(self, before: Mapping[TopicPartition, int], *,
                             timeout_ms: int | None = None) -> dict[TopicPartition, int]:
        """Make each partition's records below an offset unreadable (-1: below the high
        watermark), as Kafka's deleteRecords: the low watermark per partition once every
        in-sync replica moved its log start. Raises the first partition's error."""
        await self._refresh(sorted({tp.topic for tp in before}))
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in before:
            view = self.cluster.partitions.get((tp.topic, tp.partition))
            if view is None or view.leader < 0:
                code = self.cluster.topic_errors.get(tp.topic) or E.UNKNOWN_TOPIC_OR_PARTITION
                raise error_for(code, f"delete records of {tp.topic}-{tp.partition}")
            by_leader.setdefault(view.leader, []).append(tp)
        out: dict[TopicPartition, int] = {}
        for node, tps in sorted(by_leader.items()):
            topics: dict[str, list[DeleteRecordsPartition]] = {}
            for tp in tps:
                topics.setdefault(tp.topic, []).append(DeleteRecordsPartition(
                    partition_index=tp.partition, offset=before[tp]))
            request = DeleteRecordsRequest(timeout_ms=self._op_timeout(timeout_ms), topics=[
                DeleteRecordsTopic(name=t, partitions=ps) for t, ps in topics.items()])
            answer = await self._retrying(self._at(node, ApiKey.DELETE_RECORDS, request))
            for t in answer.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise error_for(p.error_code, f"delete records of {t.name}-"
                                                      f"{p.partition_index} at broker {node}")
                    out[TopicPartition(t.name, p.partition_index)] = p.low_watermark
        return out

    async def describe_log_dirs(self) -> dict[int, LogDirDescription]:
        """Each broker's data dir: its path, the bytes of each partition it holds, and the disk's
        total and usable bytes (-1 if the broker does not say)."""
        await self._refresh([])
        out: dict[int, LogDirDescription] = {}
        for node in sorted(self.cluster.brokers):
            answer = await self._retrying(self._at(node, ApiKey.DESCRIBE_LOG_DIRS,
                                                   DescribeLogDirsRequest(topics=None)))
            for d in answer.results:
                if d.error_code:
                    raise error_for(d.error_code, f"describe the log dir {d.log_dir} of broker "
                                                  f"{node}")
                out[node] = LogDirDescription(d.log_dir, {
                    TopicPartition(t.name, p.partition_index): p.partition_size
                    for t in d.topics for p in t.partitions}, d.total_bytes, d.usable_bytes)
        return out

    # --------------------------------------------------------------------------- groups
    async def list_consumer_groups(self) -> list[GroupListing]:
        """Every group of the cluster (each broker lists those it coordinates), by id."""
        return await self._groups.list_groups()

    async def describe_consumer_groups(self, group_ids: Sequence[str]
                                       ) -> dict[str, GroupDescription]:
        """State, protocol and members (with their assignments while Stable) of each group;
        a group nobody knows is described as "Dead" with no members, as Kafka does."""
        return await self._groups.describe_groups(group_ids)

    async def delete_consumer_groups(self, group_ids: Sequence[str], *,
                                     raise_errors: bool = True
                                     ) -> dict[str, KafkaError | None]:
        """Delete Empty groups and their committed offsets (GroupNotEmptyError while a group
        has members, GroupIdNotFoundError for one that does not exist)."""
        return _results(await self._groups.delete_groups(group_ids), raise_errors)

    async def list_consumer_group_offsets(self, group_id: str,
                                          partitions: Iterable[TopicPartition] | None = None
                                          ) -> dict[TopicPartition, tuple[int, int]]:
        """(offset, leader epoch) per partition with a committed offset; all of the group's
        partitions when partitions is None."""
        return await self._groups.list_offsets(group_id, partitions)

    async def alter_consumer_group_offsets(
            self, group_id: str, offsets: Mapping[TopicPartition, int | tuple[int, int]]
    ) -> None:
        """Commit offsets (or (offset, leader epoch) pairs) for a group with no live members:
        how offsets are reset. A group with members refuses (UnknownMemberIdError)."""
        await self._groups.alter_offsets(group_id, offsets)

    async def delete_consumer_group_offsets(self, group_id: str,
                                            partitions: Iterable[TopicPartition], *,
                                            raise_errors: bool = True
                                            ) -> dict[TopicPartition, KafkaError | None]:
        """Remove committed offsets (GroupSubscribedToTopicError for a topic a live member
        subscribes to)."""
        return _results(await self._groups.delete_offsets(group_id, partitions), raise_errors)

    # --------------------------------------------------------------------- transactions
    async def list_transactions(self, states: Iterable[str] = (),
                                producer_ids: Iterable[int] = (),
                                open_longer_than_ms: int = -1) -> list[TransactionListing]:
        """Every transactional id the cluster's coordinators hold, with its producer id and
        state (Kafka's names: "Ongoing", "PrepareCommit", ...), filtered by states, producer
        ids, or transactions open longer than open_longer_than_ms."""
        return await self._txns.list_transactions(states, producer_ids, open_longer_than_ms)

    async def describe_transactions(self, transactional_ids: Sequence[str]
                                    ) -> dict[str, TransactionDescription]:
        """Each id's state, producer id and epoch, timeout, start time and the partitions of
        its open transaction (TransactionalIdNotFoundError for one nobody knows)."""
        return await self._txns.describe_transactions(transactional_ids)

    # --------------------------------------------------------------------------- helpers
    def _at(self, node: int, key: int, request: Message) -> Callable[[], Awaitable[Any]]:
        async def ask() -> Any:
            return await self.cluster.request_broker(node, key, request)
        return ask

    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """call(), again on a fresh connection if the one it used broke (offsets_lookup.py)."""
        return await retrying(call, self._backoff_s)

    async def _refresh(self, topics: Sequence[str] | None) -> MetadataResponse:
        return await self._retrying(lambda: self.cluster.refresh(
            None if topics is None else list(topics)))

    def _op_timeout(self, timeout_ms: int | None) -> int:
        return self._timeout_ms if timeout_ms is None else timeout_ms

    async def _controller_request(self, key: int, request: Message) -> Any:
        return await self._retrying(lambda: self._controller_request_once(key, request))

    async def _controller_request_once(self, key: int, request: Message) -> Any:
        """Send to any broker (epochlog relays to its controller); a Kafka broker that is not
        the controller answers NOT_CONTROLLER: then ask the controller metadata names."""
        answer = await self.cluster.request(await self.cluster.any_connection(), key, request)
        if _has_code(answer, E.NOT_CONTROLLER):
            await self.cluster.refresh([])
            answer = await self.cluster.request_broker(self.cluster.controller_id, key, request)
        return answer


def _describe_request(resources: Sequence[ConfigResource], synonyms: bool
                      ) -> DescribeConfigsRequest:
    return DescribeConfigsRequest(include_synonyms=synonyms, resources=[DescribeConfigsResource(
        resource_type=_RESOURCE_TYPES[r.resource_type], resource_name=r.name,
        configuration_keys=None) for r in resources])


def _described(answer: Any) -> dict[ConfigResource, dict[str, ConfigEntry]]:
    kinds = {v: k for k, v in _RESOURCE_TYPES.items()}
    out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
    for r in answer.results:
        resource = ConfigResource(kinds.get(r.resource_type, "topic"),  # type: ignore[arg-type]
                                  r.resource_name)
        _raise_for(r, "describe configs")
        out[resource] = {c.name: ConfigEntry(c.name, c.value, c.read_only, c.config_source,
                                             c.is_sensitive,
                                             [(y.name, y.value, y.source) for y in c.synonyms])
                         for c in r.configs}
    return out


def _raise_for(result: Any, what: str) -> None:
    if result.error_code:
        raise error_for(result.error_code, f"{what} of {result.resource_name}"
                        + (f" ({result.error_message})" if result.error_message else ""))


def _has_code(answer: Any, code: int) -> bool:
    for name in ("topics", "responses", "results", "replica_election_results"):
        for item in getattr(answer, name, None) or ():
            if getattr(item, "error_code", 0) == code:
                return True
    return getattr(answer, "error_code", 0) == code


def _error(code: int, what: str, message: str | None = None) -> KafkaError | None:
    if not code:
        return None
    return error_for(code, what + (f" ({message})" if message else ""))


def _results(results: dict[Any, KafkaError | None], raise_errors: bool
             ) -> dict[Any, KafkaError | None]:
    if raise_errors:
        for error in results.values():
            if error is not None:
                raise error
    return results
