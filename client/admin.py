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
epoch we know (KIP-320); NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH and
LEADER_NOT_AVAILABLE refresh metadata and retry, at most ATTEMPTS_MAX times with backoff. Errors
are raised as client.errors classes, naming the topic or partition; calls with per-item results
raise the first item's error unless `raise_errors=False`, when they return the errors instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, NamedTuple, TypeVar

from protocol.apis.create_partitions import (CreatePartitionsAssignment, CreatePartitionsRequest,
                                             CreatePartitionsTopic)
from protocol.apis.create_topics import (CreatableReplicaAssignment, CreatableTopic,
                                         CreatableTopicConfig, CreateTopicsRequest)
from protocol.apis.delete_topics import DeleteTopicsRequest, DeleteTopicState
from protocol.apis.describe_cluster import DescribeClusterRequest
from protocol.apis.describe_configs import DescribeConfigsRequest, DescribeConfigsResource
from protocol.apis.elect_leaders import ElectLeadersRequest, TopicPartitions
from protocol.apis.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from protocol.apis.metadata import MetadataResponse
from protocol.error_codes import ErrorCode
from protocol.registry import APIS
from protocol.schema import Message

from .cluster import ClusterClient
from .errors import (KafkaConnectionError, KafkaError, KafkaTimeoutError,
                     UnknownTopicOrPartitionError, error_for)
from .types import TopicPartition

E = ErrorCode
ATTEMPTS_MAX = 5
_RETRY_LEADERSHIP = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH,
                               E.UNKNOWN_LEADER_EPOCH, E.LEADER_NOT_AVAILABLE,
                               E.UNKNOWN_TOPIC_OR_PARTITION, E.OFFSET_NOT_AVAILABLE})
_OFFSET_SPECS = {"earliest": -2, "latest": -1, "max_timestamp": -3}
_ELECTION_TYPES = {"preferred": 0, "unclean": 1}
_RESOURCE_TYPES = {"topic": 2, "broker": 4}

T = TypeVar("T")
OffsetSpec = Literal["earliest", "latest", "max_timestamp"] | int


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


@dataclass(frozen=True)
class TopicDescription:
    name: str
    partitions: list[PartitionDescription]
    is_internal: bool = False


class ListOffsetsResult(NamedTuple):
    offset: int
    timestamp: int
    leader_epoch: int


class ConfigResource(NamedTuple):
    resource_type: Literal["topic", "broker"]
    name: str


@dataclass(frozen=True)
class ConfigEntry:
    name: str
    value: str | None
    read_only: bool
    source: int
    is_sensitive: bool


class Admin:
    def __init__(self, bootstrap_servers: str = "127.0.0.1:9092", *,
                 client_id: str = "epochlog-admin", request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100) -> None:
        self.cluster = ClusterClient(bootstrap_servers, client_id=client_id,
                                     request_timeout_ms=request_timeout_ms)
        self._timeout_ms = request_timeout_ms
        self._backoff_s = retry_backoff_ms / 1000

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
        answer = await self._controller_request(19, request)
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
        answer = await self._controller_request(20, request)
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
        answer = await self._controller_request(37, request)
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

    # --------------------------------------------------------------------------- cluster
    async def describe_cluster(self) -> ClusterDescription:
        return await self._retrying(self._describe_cluster)

    async def _describe_cluster(self) -> ClusterDescription:
        conn = await self.cluster.any_connection()
        if APIS[60].key in conn.server_versions:
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
        answer = await self._controller_request(43, request)
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

    async def describe_configs(self, resources: Sequence[ConfigResource]
                               ) -> dict[ConfigResource, dict[str, ConfigEntry]]:
        for r in resources:
            if r.resource_type not in _RESOURCE_TYPES:
                raise ValueError(f"resource_type must be 'topic' or 'broker', not "
                                 f"{r.resource_type!r}")
        request = DescribeConfigsRequest(resources=[DescribeConfigsResource(
            resource_type=_RESOURCE_TYPES[r.resource_type], resource_name=r.name,
            configuration_keys=None) for r in resources])
        answer = await self._controller_request(32, request)
        kinds = {v: k for k, v in _RESOURCE_TYPES.items()}
        out: dict[ConfigResource, dict[str, ConfigEntry]] = {}
        for r in answer.results:
            resource = ConfigResource(kinds.get(r.resource_type, "topic"),  # type: ignore[arg-type]
                                      r.resource_name)
            if r.error_code:
                raise error_for(r.error_code, f"describe configs of {r.resource_name}"
                                + (f" ({r.error_message})" if r.error_message else ""))
            out[resource] = {c.name: ConfigEntry(c.name, c.value, c.read_only, c.config_source,
                                                 c.is_sensitive) for c in r.configs}
        return out

    # --------------------------------------------------------------------------- offsets
    async def list_offsets(self, specs: Mapping[TopicPartition, OffsetSpec], *,
                           isolation_level: Literal["read_uncommitted", "read_committed"]
                           = "read_uncommitted") -> dict[TopicPartition, ListOffsetsResult]:
        """Per partition: "earliest", "latest", "max_timestamp", or a timestamp in ms (the first
        offset whose timestamp is at or after it; offset -1 if none). Each answer carries the
        leader epoch of that offset (KIP-320)."""
        wanted = {tp: _OFFSET_SPECS[s] if isinstance(s, str) else int(s)
                  for tp, s in specs.items()}
        out: dict[TopicPartition, ListOffsetsResult] = {}
        await self._refresh(sorted({tp.topic for tp in wanted}))
        for attempt in range(ATTEMPTS_MAX):
            retry: dict[TopicPartition, KafkaError] = {}
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in wanted:
                view = self.cluster.partitions.get((tp.topic, tp.partition))
                if view is None:
                    if self.cluster.topic_errors.get(tp.topic, 0) not in (0, E.LEADER_NOT_AVAILABLE):
                        raise error_for(self.cluster.topic_errors[tp.topic],
                                        f"list offsets of {tp.topic}-{tp.partition}")
                    retry[tp] = UnknownTopicOrPartitionError(f"no metadata for {tp}")
                elif view.leader < 0:
                    retry[tp] = error_for(E.LEADER_NOT_AVAILABLE, f"{tp.topic}-{tp.partition}")
                else:
                    by_leader.setdefault(view.leader, []).append(tp)
            answers = await asyncio.gather(*(
                self._list_offsets_at(node, tps, wanted, isolation_level)
                for node, tps in by_leader.items()))
            for got in answers:
                for tp, result in got.items():
                    if isinstance(result, ListOffsetsResult):
                        out[tp] = result
                    elif result.retriable:
                        retry[tp] = result
                    else:
                        raise result
            wanted = {tp: wanted[tp] for tp in retry}
            if not wanted:
                return out
            if attempt == ATTEMPTS_MAX - 1:
                raise next(iter(retry.values()))
            await asyncio.sleep(self._backoff_s * (attempt + 1))
            await self._refresh(sorted({tp.topic for tp in wanted}))
        return out

    async def _list_offsets_at(self, node: int, tps: list[TopicPartition],
                               wanted: Mapping[TopicPartition, int], isolation_level: str
                               ) -> dict[TopicPartition, ListOffsetsResult | KafkaError]:
        by_topic: dict[str, list[ListOffsetsPartition]] = {}
        for tp in tps:
            view = self.cluster.partitions[(tp.topic, tp.partition)]
            by_topic.setdefault(tp.topic, []).append(ListOffsetsPartition(
                partition_index=tp.partition, current_leader_epoch=view.leader_epoch,
                timestamp=wanted[tp]))
        request = ListOffsetsRequest(
            replica_id=-1, isolation_level=1 if isolation_level == "read_committed" else 0,
            topics=[ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
        out: dict[TopicPartition, ListOffsetsResult | KafkaError] = {}
        try:
            answer = await self.cluster.request_broker(node, 2, request)
        except (ConnectionError, OSError, asyncio.TimeoutError, TimeoutError) as exc:
            return {tp: KafkaConnectionError(f"list offsets at broker {node}: {exc}")
                    for tp in tps}
        for t in answer.topics:
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                if p.error_code:
                    out[tp] = error_for(p.error_code, f"list offsets of {t.name}-"
                                                      f"{p.partition_index} at broker {node}")
                else:
                    out[tp] = ListOffsetsResult(p.offset, p.timestamp, p.leader_epoch)
        return out

    # --------------------------------------------------------------------------- helpers
    async def _retrying(self, call: Callable[[], Awaitable[T]]) -> T:
        """call(), again on a fresh connection if the one it used broke (a broker restarted),
        at most ATTEMPTS_MAX times with backoff."""
        for attempt in range(ATTEMPTS_MAX):
            try:
                return await call()
            except (ConnectionError, OSError, asyncio.TimeoutError, TimeoutError) as exc:
                if attempt == ATTEMPTS_MAX - 1:
                    raise KafkaConnectionError(f"no answer after {ATTEMPTS_MAX} attempts: "
                                               f"{exc}") from exc
                await asyncio.sleep(self._backoff_s * (attempt + 1))
        raise AssertionError("unreachable")

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
