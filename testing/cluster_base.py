"""What every cluster backend shares: the network-fault bookkeeping, the fault record, and the
questions asked of a running cluster over Kafka's protocol.

Two backends build on it: `Cluster` (cluster.py: child processes on this machine) and
`ComposeCluster` (compose_cluster.py: the containers of a Compose project). Each backend says
how to reach a node and how to make the network it has look like the wanted cuts; this base
keeps the public API the same across both:

- network faults are kept as data, a set of cut links `(from, to)` between network keys ("c"
  for the controller, the broker id as text, "clients" for the test's side) and a map key ->
  `Slow`; `partition`, `isolate`, `slow` and `heal` change that data and call the backend's
  `_apply_network()`, undoing the change if that raised (nothing half-applied is recorded);
- every fault that took effect is reported to `on_fault(kind, targets, detail)` (History's
  `record_fault` has that signature), which stamps it with the time;
- leaders, coordinators, topics and replication are asked with Metadata, FindCoordinator and
  CreateTopics requests (requests.py), every wait bounded (`until`).

A backend implements: `broker_ids`, `_endpoint(node)` (host, port it is asked at), `_running(node)`
(up and meant to be), `_askable()` (nodes that answer Metadata, in the order to ask them),
`_log_mark(broker)` / `_logged(broker, text, start)` (its log), and `_apply_network()`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest
from epochlog.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.schema import Message

from .network import CLIENTS, Slow
from .nodes import CONTROLLER, NodeId
from .processes import WAIT_S
from .requests import call, until
from .settings_routing import text_of

FaultRecorder = Callable[[str, tuple[int | str, ...], str], None]
FAULTS_MAX = 100_000  # entries kept in a cluster's faults


@dataclass(frozen=True)
class FaultEntry:
    """One fault the cluster applied, when it took effect."""
    kind: str  # kill, stop, restart, pause, resume, partition, isolate, slow, heal, inject
    targets: tuple[int | str, ...]
    detail: str
    monotonic_s: float  # time.monotonic() when it took effect
    wall_ms: int  # the wall clock then, ms since the Unix epoch
ASK_S = 5.0  # one harness query (metadata, coordinator) to one node
DELAY_MS_MAX = 60_000


class ClusterBase:
    """The fault bookkeeping and the queries of a cluster (see the module's notes)."""

    controller = CONTROLLER

    def __init__(self, on_fault: FaultRecorder | None) -> None:
        self.on_fault = on_fault
        self.faults: list[FaultEntry] = []  # every fault applied, in order (FAULTS_MAX kept)
        self._lock = threading.RLock()
        self._cuts: set[tuple[str, str]] = set()  # (from, to) in network keys
        self._slow: dict[str, Slow] = {}

    # ------------------------------------------------------------------ backend's part
    @property
    def broker_ids(self) -> list[int]:
        raise NotImplementedError

    def _endpoint(self, node: NodeId) -> tuple[str, int]:
        raise NotImplementedError

    def _running(self, node: NodeId) -> bool:
        raise NotImplementedError

    def _askable(self) -> list[NodeId]:
        raise NotImplementedError

    def _log_mark(self, broker: int) -> int:
        raise NotImplementedError

    def _logged(self, broker: int, text: str, start: int) -> bool:
        raise NotImplementedError

    def _apply_network(self) -> None:
        raise NotImplementedError

    # ---------------------------------------------------------------------------- nodes
    def resolve(self, node: NodeId) -> NodeId:
        """A node id as given (a broker id, its digits as text, or "controller"), checked."""
        if node == CONTROLLER:
            return CONTROLLER
        if isinstance(node, int) and not isinstance(node, bool) and node in self.broker_ids:
            return node
        if isinstance(node, str) and node.isdigit() and int(node) in self.broker_ids:
            return int(node)
        raise KeyError(f"no node {node!r}: brokers are {sorted(self.broker_ids)} and "
                       f"{CONTROLLER!r}")

    def node_ids(self) -> list[NodeId]:
        return [CONTROLLER, *self.broker_ids]

    def _record(self, kind: str, targets: tuple[int | str, ...], detail: str) -> None:
        if len(self.faults) < FAULTS_MAX:
            self.faults.append(FaultEntry(kind, targets, detail, time.monotonic(),
                                          time.time_ns() // 1_000_000))
        if self.on_fault is not None:
            self.on_fault(kind, targets, detail)

    # --------------------------------------------------------------------- network faults
    def _key(self, node: NodeId) -> str:
        if node == CLIENTS:
            return CLIENTS
        resolved = self.resolve(node)
        return "c" if resolved == CONTROLLER else str(resolved)

    @staticmethod
    def _id_of(key: str) -> NodeId:
        if key == CLIENTS:
            return CLIENTS
        return CONTROLLER if key == "c" else int(key)

    def _group(self, group: NodeId | Iterable[NodeId]) -> list[NodeId]:
        members = [group] if isinstance(group, (int, str)) else list(group)
        for m in members:
            self._key(m)  # raises KeyError for an unknown node
        if not members:
            raise ValueError("a partition's side must name at least one node")
        return members

    def partition(self, *groups: NodeId | Iterable[NodeId], one_way: bool = False) -> None:
        """Cut every link between nodes of different groups: `partition({1}, {2, 3})`.
        Groups may name brokers, "controller" and "clients" (the test's side). With one_way,
        only packets from an earlier group to a later one are dropped (`partition({1}, {2},
        one_way=True)`: 1 cannot reach 2, 2 still reaches 1). Adds to cuts already made;
        heal() removes them all."""
        if len(groups) < 2:
            raise ValueError("partition() needs at least two groups, e.g. partition({1}, {2, 3})")
        sides = [self._group(g) for g in groups]
        flat = [m for side in sides for m in side]
        if len({self._key(m) for m in flat}) != len(flat):
            raise ValueError(f"partition groups overlap: {sides}")
        new: set[tuple[str, str]] = set()
        for i, a_side in enumerate(sides):
            for b_side in sides[i + 1:]:
                for a in a_side:
                    for b in b_side:
                        new.add((self._key(a), self._key(b)))
                        if not one_way:
                            new.add((self._key(b), self._key(a)))
        arrow = " -> " if one_way else " | "
        self._cut(new, "partition", tuple(flat),
                  arrow.join("{" + ", ".join(map(str, s)) + "}" for s in sides)
                  + (" (one way)" if one_way else ""))

    def isolate(self, node: NodeId) -> None:
        """Cut node off from every other node and from clients, both ways."""
        key = self._key(node)
        others = [self._key(n) for n in self.node_ids() if self._key(n) != key] + [CLIENTS]
        new = {(key, o) for o in others} | {(o, key) for o in others}
        self._cut(new, "isolate", (self._id_of(key),), "from every other node and clients")

    def _cut(self, new: set[tuple[str, str]], kind: str, targets: tuple[int | str, ...],
             detail: str) -> None:
        with self._lock:
            before = set(self._cuts)
            self._cuts |= new
            try:
                self._apply_network()
            except BaseException:
                self._cuts = before
                raise
            self._record(kind, targets, detail)

    def slow(self, node: NodeId, delay_ms: int = 100, jitter_ms: int = 0,
             loss_pct: float = 0.0) -> None:
        """Every packet node sends waits delay_ms ± jitter_ms (and loss_pct % are lost), so
        every round trip with it grows by about delay_ms. heal() ends it."""
        if not 0 <= delay_ms <= DELAY_MS_MAX or not 0 <= jitter_ms <= DELAY_MS_MAX:
            raise ValueError(f"delay_ms and jitter_ms must be 0-{DELAY_MS_MAX}")
        if not 0 <= loss_pct <= 100:
            raise ValueError("loss_pct must be 0-100")
        key = self._key(node)
        if key == CLIENTS:
            raise ValueError("slow() takes a broker or the controller, not clients")
        with self._lock:
            before = dict(self._slow)
            self._slow[key] = Slow(int(delay_ms), int(jitter_ms), float(loss_pct))
            try:
                self._apply_network()
            except BaseException:
                self._slow = before
                raise
            self._record("slow", (self._id_of(key),),
                         f"delay {delay_ms} ms ± {jitter_ms} ms, loss {loss_pct}%")

    def heal(self) -> None:
        """Every cut and every slowness removed."""
        with self._lock:
            self._cuts.clear()
            self._slow.clear()
            self._apply_network()
            self._record("heal", (), "every link whole, no delay")

    def network_faults(self, node: NodeId) -> str:
        """The node's active network faults, in words ("" if none)."""
        key = self._key(node)
        with self._lock:
            cut_to = sorted(str(self._id_of(d)) for s, d in self._cuts if s == key)
            cut_from = sorted(str(self._id_of(s)) for s, d in self._cuts if d == key)
            slow = self._slow.get(key)
        parts = []
        if cut_to:
            parts.append("cannot reach " + ",".join(cut_to))
        if cut_from:
            parts.append("unreachable from " + ",".join(cut_from))
        if slow is not None:
            parts.append(f"slow {slow.delay_ms}±{slow.jitter_ms} ms"
                         + (f" loss {slow.loss_pct}%" if slow.loss_pct else ""))
        return "; ".join(parts)

    # --------------------------------------------------------------------------- queries
    def call_node(self, node: NodeId, key: ApiKey | int, message: Message,
                  version: int | None = None, timeout_s: float = ASK_S) -> Any:
        """One request to a node, whatever state the harness thinks it is in."""
        host, port = self._endpoint(self.resolve(node))
        return call(host, port, key, message, version, timeout_s)

    def ask(self, key: ApiKey, message: Message, timeout_s: float = ASK_S) -> Any:
        """One request to the first node that answers (in `_askable()` order, running ones
        only); the answer. Raises ConnectionError when none answered."""
        errors = []
        for node in self._askable():
            if not self._running(node):
                continue
            try:
                return self.call_node(node, key, message, timeout_s=timeout_s)
            except (OSError, TimeoutError, ConnectionError) as exc:
                errors.append(f"{node}: {type(exc).__name__}: {exc}")
        raise ConnectionError("no node answered: " + "; ".join(errors or ["none running"]))

    def metadata(self, topics: list[str] | None = None, broker: int | None = None) -> Any:
        """A Metadata answer (topics None: all) from `broker`, or from ask()'s first source."""
        return self._metadata(topics, broker)

    def _metadata(self, topics: list[str] | None = None, broker: int | None = None,
                  timeout_s: float = ASK_S) -> Any:
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False)
        if broker is not None:
            return self.call_node(broker, ApiKey.METADATA, request, timeout_s=timeout_s)
        return self.ask(ApiKey.METADATA, request, timeout_s=timeout_s)

    def partitions(self, topic: str) -> dict[int, Any]:
        """partition -> its MetadataResponsePartition (leader, epoch, replicas, ISR)."""
        md = self._metadata([topic])
        return {p.partition_index: p for t in md.topics if t.error_code == 0
                for p in t.partitions}

    def leader_of(self, topic: str, partition: int, timeout_s: float = WAIT_S) -> int:
        """The partition's leader, as the controller (or a broker) says; waits while there is
        none (bounded)."""
        def leader() -> int | None:
            p = self.partitions(topic).get(partition)
            return p.leader_id if p is not None and p.leader_id >= 0 else None
        return until(leader, f"a leader of {topic}-{partition}", timeout_s)

    def coordinator_of(self, group: str, timeout_s: float = WAIT_S) -> int:
        """The broker coordinating a consumer group (FindCoordinator; the offsets topic is made
        on the first ask, so this may wait for it, bounded)."""
        request = FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group])

        def coordinator() -> int | None:
            for b in self.broker_ids:
                if not self._running(b):
                    continue
                try:
                    answer = self.call_node(b, ApiKey.FIND_COORDINATOR, request)
                except (OSError, TimeoutError, ConnectionError):
                    continue
                found = answer.coordinators[0] if answer.coordinators else answer
                if found.error_code == ErrorCode.NONE and found.node_id >= 0:
                    return int(found.node_id)
            return None
        return until(coordinator, f"a coordinator for group {group!r}", timeout_s)

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = -1,
                     configs: Mapping[str, object] | None = None, *,
                     timeout_s: float = WAIT_S) -> Any:
        """CreateTopics through a broker (forwarded to the controller), then wait until every
        partition's leader says in its log that it leads, and every running broker's metadata
        has the topic. replication_factor -1: the cluster's default (min(3, live brokers)).
        The CreateTopics result."""
        request = CreateTopicsRequest(topics=[CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication_factor,
            configs=[CreatableTopicConfig(name=k, value=text_of(v))
                     for k, v in (configs or {}).items()])], timeout_ms=int(timeout_s * 1000))
        broker = next((b for b in self.broker_ids if self._running(b)), None)
        if broker is None:
            raise ConnectionError(f"no running broker to create topic {name!r} through")
        marks = {i: self._log_mark(i) for i in self.broker_ids}  # a topic made again: new lines
        result = self.call_node(broker, ApiKey.CREATE_TOPICS, request,
                                timeout_s=timeout_s).topics[0]
        if result.error_code != ErrorCode.NONE:
            raise ValueError(f"creating topic {name!r} failed: "
                             f"{ErrorCode(result.error_code).name} {result.error_message or ''}")
        self.wait_leaders(name, result.num_partitions, timeout_s=timeout_s, since=marks)
        return result

    def wait_leaders(self, topic: str, partitions: int, timeout_s: float = WAIT_S,
                     since: Mapping[int, int] | None = None) -> dict[int, tuple[int, int]]:
        """Until each partition's leader has taken its LeaderAndIsr (its log says so, after
        the marks in `since`) and every running broker's metadata shows those leaders (but
        a broker a network fault touches, which may not learn of it or answer);
        partition -> (leader, leader epoch)."""
        def ready() -> dict[int, tuple[int, int]] | None:
            state = {i: (p.leader_id, p.leader_epoch) for i, p in self.partitions(topic).items()}
            if len(state) != partitions or any(lid < 0 for lid, _ in state.values()):
                return None
            for index, (lid, epoch) in state.items():
                if lid not in self.broker_ids or not self._logged(
                        lid, f"{topic}-{index}: became LEADER at leader epoch {epoch}",
                        (since or {}).get(lid, 0)):
                    return None
            for i in self.broker_ids:
                if self._running(i) and not self.network_faults(i):
                    seen = self._metadata([topic], broker=i).topics
                    if not seen or {p.partition_index: (p.leader_id, p.leader_epoch)
                                    for p in seen[0].partitions} != state:
                        return None
            return state
        return until(ready, f"leaders of {topic}", timeout_s)

    def wait_fully_replicated(self, topic: str, timeout_s: float = 60.0) -> dict[int, Any]:
        """Until every partition has a leader and every replica in its ISR, as the controller
        (or a broker, if the controller cannot answer) says; partition -> its metadata."""
        def full() -> dict[int, Any] | None:
            state = self.partitions(topic)
            if state and all(p.leader_id >= 0 and set(p.isr_nodes) == set(p.replica_nodes)
                             for p in state.values()):
                return state
            return None
        return until(full, f"{topic} fully replicated (every replica in the ISR)", timeout_s,
                     interval_s=0.2)

    def wait_brokers_known(self, timeout_s: float = WAIT_S) -> None:
        """Every running broker's metadata lists every running broker (bounded)."""
        live = {i for i in self.broker_ids if self._running(i)}
        for i in live:
            def knows_all(i: int = i) -> bool:
                return self._known_brokers(i) == live
            until(knows_all, f"broker {i} to know brokers {sorted(live)}", timeout_s)

    def _known_brokers(self, broker: int) -> set[int]:
        return {int(b.node_id) for b in self._metadata([], broker=broker).brokers}
