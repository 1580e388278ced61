"""Coordinator failover mid-rebalance, on real processes.

Three brokers; `__consumer_offsets` has replication factor 3. A consumer group reads a 6-partition
topic and commits (librdkafka commits the leader epoch of what it read). Then a new consumer joins,
and while the group is still rebalancing the broker coordinating it (the leader of its
`__consumer_offsets` partition) is SIGKILLed. On the new coordinator:

- the group reaches Stable (DescribeGroups there) and the consumers' assignments, as the broker
  recorded them and as the clients applied them, are disjoint, cover every partition, and each
  consumer has some;
- OffsetFetch v7 answers exactly what was committed before the kill, leader epochs included;
- every record produced is read, and a record is read twice only if it was in the uncommitted
  window (at or after the committed offset, before the end of the log at the kill); the final
  commits carry the leader epoch of the last record read on each partition;
- the History of the producers, the consumers (recorded through epochlog.testing's adapters:
  polls, commits, assignments and losses) and the kill checks clean: nothing lost, nothing
  duplicated, no consumer going back or skipping ahead within one assignment.

Getting the group genuinely mid-rebalance when the kill lands, every time, is the job of the
*holder*: a fourth member driven by hand with raw JoinGroup/SyncGroup/Heartbeat requests. It
subscribes to no topic (the assignors give it nothing), and it can

- hold its rejoin: the join phase cannot end without it, so the group stays PreparingRebalance
  (the consumers' rejoins wait at the coordinator) for as long as we like;
- as the group's leader, hold its SyncGroup: the group stays CompletingRebalance (every member
  joined, the consumers' SyncGroups wait at the coordinator) for as long as we like.

Right before the kill DescribeGroups at the coordinator shows the state and the newcomer in it.
The new coordinator knows only the generation stored before the rebalance (the lost one was
never stored): members come back to it with a generation or member id it does not know, and
their errors (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID) or the leader's rejoin start the rebalance
again there; test_groups_state.py has that sequence step by step.

Member kinds come from `KINDS`, a table of factories: confluent-kafka and epochlog's own Consumer,
each with the eager "range" assignor and with "cooperative-sticky" (KIP-429). A kind only needs
`Member`'s few methods.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import pytest

from epochlog.client.assignors import ASSIGNORS
from epochlog.client.consumer_protocol import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_groups import DescribeGroupsRequest
from epochlog.protocol.apis.heartbeat import HeartbeatRequest
from epochlog.protocol.apis.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from epochlog.protocol.apis.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from epochlog.protocol.apis.sync_group import SyncGroupRequest, SyncGroupRequestAssignment
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.testing import Cluster, History, check, until
from epochlog.testing.nodes import BrokerNode
from epochlog.testing.traffic import produce as produce_to

pytest.importorskip("confluent_kafka")
from epochlog.testing import adapter_confluent, adapter_ours  # noqa: E402 - after the skip

SETTINGS = {"offsets_topic_num_partitions": 3, "group_initial_rebalance_delay_ms": 0,
            "group_min_session_timeout_ms": 1000}
PARTITIONS = 6
BATCH = 300  # read and committed before the rebalance
WINDOW = 120  # read, not committed, before the rebalance: the uncommitted window
AFTER = 180  # produced once the group settled on the new coordinator
SESSION_MS = 10_000
REBALANCE_MS = 30_000  # the consumers' max.poll.interval.ms and the holder's rebalance timeout
HEARTBEAT_S = 0.3
POLL_S = 0.05
WAIT_S = 60.0

Read = tuple[int, int, bytes, int]  # partition, offset, value, leader epoch


# ------------------------------------------------------------------------------ member kinds
class Member(Protocol):
    """What the test needs of a group consumer (confluent-kafka's, later epochlog's own)."""

    def member_id(self) -> str: ...
    def poll(self) -> list[Read]: ...
    def assigned(self) -> set[int]: ...
    def commit(self) -> None: ...  # synchronously, the positions of what it read
    def close(self) -> None: ...


class Confluent:
    def __init__(self, cluster: Cluster, topic: str, group: str, strategy: str,
                 history: History) -> None:
        self.c = adapter_confluent.Consumer({
            "bootstrap.servers": cluster.bootstrap_servers, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "partition.assignment.strategy": strategy, "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": int(HEARTBEAT_S * 1000),
            "max.poll.interval.ms": REBALANCE_MS}, history=history)
        self.c.subscribe([topic])

    def member_id(self) -> str:
        return self.c.memberid() or ""

    def poll(self) -> list[Read]:
        return [(m.partition(), m.offset(), m.value(), m.leader_epoch())
                for m in self.c.consume(500, POLL_S) if m.error() is None]

    def assigned(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit(self) -> None:
        self.c.commit(asynchronous=False)

    def close(self) -> None:
        self.c.close()


class Epochlog:
    """epochlog's own group Consumer, driven from this sync test: its event loop runs in a thread
    of its own (so its heartbeats go on between our polls), and each call is a coroutine sent
    there."""

    def __init__(self, cluster: Cluster, topic: str, group: str, strategy: str,
                 history: History) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.c = adapter_ours.Consumer(
            cluster.bootstrap_servers, history=history, group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False, partition_assignment_strategy=[strategy],
            session_timeout_ms=SESSION_MS, heartbeat_interval_ms=int(HEARTBEAT_S * 1000),
            max_poll_interval_ms=REBALANCE_MS, retry_backoff_ms=50)
        self._run(self.c.start())
        self.c.subscribe([topic])

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S)

    def member_id(self) -> str:
        return str(self.c.group_metadata()["member_id"])

    def poll(self) -> list[Read]:
        return [(r.partition, r.offset, r.value or b"", r.leader_epoch)
                for r in self._run(self.c.poll(timeout_ms=int(POLL_S * 1000)))]

    def assigned(self) -> set[int]:
        return {p for _, p in self.c.assignment()}

    def commit(self) -> None:
        self._run(self.c.commit())

    def close(self) -> None:
        try:
            self._run(self.c.close())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(WAIT_S)
            self.loop.close()


@dataclass(frozen=True)
class Kind:
    name: str
    protocol: str  # the assignor (JoinGroup protocol) its members use; the holder offers it too
    make: Callable[[Cluster, str, str, History], Member]


KINDS = [
    Kind("confluent-range", "range", lambda c, t, g, h: Confluent(c, t, g, "range", h)),
    Kind("confluent-cooperative", "cooperative-sticky",
         lambda c, t, g, h: Confluent(c, t, g, "cooperative-sticky", h)),
    Kind("epochlog-range", "range", lambda c, t, g, h: Epochlog(c, t, g, "range", h)),
    Kind("epochlog-cooperative", "cooperative-sticky",
         lambda c, t, g, h: Epochlog(c, t, g, "cooperative-sticky", h)),
]


# ------------------------------------------------------------------------------- raw requests
def coordinator(cluster: Cluster, group: str) -> BrokerNode:
    """The live broker FindCoordinator names (asking again while there is none, or while the
    broker asked still names one that was killed)."""
    def live() -> BrokerNode | None:
        found = cluster.brokers[cluster.coordinator_of(group)]
        return found if found.alive else None

    return until(live, f"a live coordinator for {group}", WAIT_S)


def describe(broker: BrokerNode, group: str) -> Any:
    return broker.call(ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(groups=[group])).groups[0]


def committed(broker: BrokerNode, group: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (offset, leader epoch), by OffsetFetch v7; asked again while the broker is
    loading the group or has not yet heard it leads the group's partition (FindCoordinator
    answers from the metadata of whichever broker was asked)."""
    def ask() -> Any:
        a = broker.call(ApiKey.OFFSET_FETCH, OffsetFetchRequest(
            group_id=group, topics=[OffsetFetchRequestTopic(
                name=topic, partition_indexes=list(range(PARTITIONS)))]), 7)
        if a.error_code not in (0, E.COORDINATOR_LOAD_IN_PROGRESS, E.NOT_COORDINATOR):
            raise RuntimeError(f"OffsetFetch of {group} failed: {a}")
        return a if a.error_code == 0 else None

    answer = until(ask, f"the offsets of {group}", WAIT_S)
    return {p.partition_index: (p.committed_offset, p.committed_leader_epoch)
            for t in answer.topics for p in t.partitions}


class Holder(threading.Thread):
    """A group member speaking raw JoinGroup/SyncGroup/Heartbeat, subscribed to no topic, that
    can hold its rejoin (`hold_join`) or, as leader, its assignment (`hold_sync`)."""

    def __init__(self, cluster: Cluster, group: str, protocol: str, topic: str) -> None:
        super().__init__(name=f"holder-{group}", daemon=True)
        self.cluster, self.group, self.protocol, self.topic = cluster, group, protocol, topic
        self.hold_join = threading.Event()
        self.hold_sync = threading.Event()
        self.holding_sync = threading.Event()  # set while a leader's SyncGroup is held back
        self.synced = threading.Event()  # set on each successful SyncGroup, cleared on rejoin
        self.stopping = threading.Event()
        self.member_id = ""
        self.generation = -1
        self.coordinator: BrokerNode | None = None
        self.history: list[str] = []  # what it did, for failure messages
        self.failure: BaseException | None = None

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(WAIT_S)

    def run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread (`check`)
            self.failure = exc

    def check(self) -> None:
        """Raise the holder's failure in the test's thread (not an AssertionError: `until`
        would take that for "not yet" and ask again)."""
        if self.failure is not None:
            raise RuntimeError(f"the holder failed: {self.failure!r}; {self.history[-20:]}")

    def _note(self, what: str) -> None:
        self.history.append(f"{time.monotonic():.3f} {what}")

    def _call(self, key: int, message: Any, version: int | None = None) -> Any:
        """A request to the coordinator; None (and the coordinator forgotten) if it is gone."""
        if self.coordinator is None:
            self.coordinator = coordinator(self.cluster, self.group)
        try:
            return self.coordinator.call(key, message, version)
        except OSError as exc:  # the coordinator was killed: refused, reset or timed out
            self._note(f"request {key} to broker {self.coordinator.node_id} failed: {exc!r}")
            self.coordinator = None
            return None

    def _error(self, error: int) -> None:
        if error in (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE):
            self.coordinator = None
        elif error == E.UNKNOWN_MEMBER_ID:
            self.member_id, self.generation = "", -1
        elif error in (E.COORDINATOR_LOAD_IN_PROGRESS, E.REBALANCE_IN_PROGRESS,
                       E.ILLEGAL_GENERATION):
            time.sleep(0.05)
        else:
            raise AssertionError(f"holder: unexpected error {error}")

    def _heartbeat(self) -> int | None:
        answer = self._call(12, HeartbeatRequest(group_id=self.group, generation_id=self.generation,
                                                 member_id=self.member_id))
        return None if answer is None else answer.error_code

    def _loop(self) -> None:
        need_join = True
        while not self.stopping.is_set():
            if need_join and not self.hold_join.is_set():
                need_join = not self._join_and_sync()
                continue
            time.sleep(HEARTBEAT_S)
            if self.generation < 0:
                continue  # nothing to heartbeat for yet (held before the first join)
            error = self._heartbeat()
            if error:
                self._note(f"heartbeat at generation {self.generation}: error {error}")
                need_join = True
                if error == E.UNKNOWN_MEMBER_ID:
                    self.member_id, self.generation = "", -1
            elif error is None:
                need_join = True

    def _join_and_sync(self) -> bool:
        self.synced.clear()
        join = self._call(11, JoinGroupRequest(
            group_id=self.group, session_timeout_ms=SESSION_MS, rebalance_timeout_ms=REBALANCE_MS,
            member_id=self.member_id, protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name=self.protocol, metadata=encode_subscription(
                Subscription(topics=[])))]))
        if join is None:
            return False
        self._note(f"JoinGroup: error {join.error_code}, generation {join.generation_id}, "
                   f"leader {join.leader == join.member_id}")
        if join.error_code == E.MEMBER_ID_REQUIRED:
            self.member_id = join.member_id
            return False
        if join.error_code:
            self._error(join.error_code)
            return False
        self.member_id, self.generation = join.member_id, join.generation_id
        assignments: list[SyncGroupRequestAssignment] = []
        if join.leader == self.member_id:
            assignments = self._assign(join.members)
            while self.hold_sync.is_set() and not self.stopping.is_set():
                self.holding_sync.set()  # heartbeats keep our session while we hold
                time.sleep(HEARTBEAT_S)
                if self._heartbeat() is None:
                    break
            self.holding_sync.clear()
        sync = self._call(14, SyncGroupRequest(
            group_id=self.group, generation_id=self.generation, member_id=self.member_id,
            protocol_type="consumer", protocol_name=self.protocol, assignments=assignments))
        if sync is None:
            return False
        self._note(f"SyncGroup at generation {self.generation}: error {sync.error_code}")
        if sync.error_code:
            self._error(sync.error_code)
            return False
        self.synced.set()
        return True

    def _assign(self, members: list[Any]) -> list[SyncGroupRequestAssignment]:
        """The leader's job, with the project's assignor of the group's protocol."""
        subscriptions = {}
        for m in members:
            sub = decode_subscription(m.metadata)
            sub.group_instance_id = m.group_instance_id
            subscriptions[m.member_id] = sub
        result = ASSIGNORS[self.protocol]().assign({self.topic: PARTITIONS}, subscriptions)
        return [SyncGroupRequestAssignment(member_id=m, assignment=encode_assignment(a))
                for m, a in result.items()]


# ----------------------------------------------------------------------------------- the run
def produce(cluster: Cluster, topic: str, first: int, count: int, history: History
            ) -> set[bytes]:
    """Records first..first+count-1, dealt round-robin over the partitions (recorded)."""
    values = [f"{topic}-{i}".encode() for i in range(first, first + count)]
    produce_to(cluster.bootstrap_servers, topic, values, history=history, timeout_s=WAIT_S,
               placement=lambda n: {"partition": (first + n) % PARTITIONS})
    return set(values)


def per_partition(first: int, count: int) -> Counter[int]:
    return Counter(i % PARTITIONS for i in range(first, first + count))


def partitions_of(assignment: bytes) -> set[int]:
    """The partitions in a member's assignment as DescribeGroups shows it (b"": none)."""
    return {p for _, p in decode_assignment(assignment).partitions} if assignment else set()


class Group:
    """The consumers, what each read, and the holder."""

    def __init__(self, holder: Holder, history: History) -> None:
        self.holder = holder
        self.history = history
        self.members: list[Member] = []
        self.reads: list[Read] = []

    def pump(self) -> None:
        for m in self.members:
            self.reads += m.poll()
        self.holder.check()

    def read_values(self) -> set[bytes]:
        return {v for _, _, v, _ in self.reads}

    def pumping(self, done: Callable[[], bool]) -> Callable[[], bool]:
        """A check for `until` that polls every consumer, then asks done()."""
        def check() -> bool:
            self.pump()
            return done()
        return check

    def read_all(self, values: set[bytes]) -> None:
        until(self.pumping(lambda: values <= self.read_values()),
              f"{len(values)} records to be read", WAIT_S, interval_s=0)

    def settled(self, coord: BrokerNode, group_id: str) -> bool:
        """Stable at `coord` with every consumer and the holder (once started); the assignments
        the broker holds are the ones the clients applied: disjoint, covering, none empty."""
        d = describe(coord, group_id)
        holder = self.holder.is_alive()
        if d.group_state != "Stable" or len(d.members) != len(self.members) + holder:
            return False
        recorded = {m.member_id: partitions_of(m.member_assignment) for m in d.members}
        if holder and (recorded.get(self.holder.member_id) != set()
                       or not self.holder.synced.is_set()):
            return False
        applied = [m.assigned() for m in self.members]
        if [recorded.get(m.member_id()) for m in self.members] != applied:
            return False
        return (all(applied) and sum(map(len, applied)) == PARTITIONS
                and set().union(*applied) == set(range(PARTITIONS)))

    def settle(self, coord: BrokerNode, group_id: str, what: str) -> None:
        until(self.pumping(lambda: self.settled(coord, group_id)), what, WAIT_S, interval_s=0)


def failover_mid_rebalance(make: Callable[..., Cluster], kind: Kind, state: str) -> None:
    history = History()
    cluster = make(brokers=3, settings=SETTINGS, on_fault=history.record_fault)
    topic = f"fo-{kind.name}-{state}"
    group_id = f"{topic}-group"
    cluster.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
    holder = Holder(cluster, group_id, kind.protocol, topic)
    group = Group(holder, history)
    try:
        if state == "CompletingRebalance":
            holder.start()  # first in: the leader, for as long as it stays
            until(group.pumping(holder.synced.is_set), "the holder to lead its group", WAIT_S,
                  interval_s=0)
        group.members += [kind.make(cluster, topic, group_id, history) for _ in range(2)]
        if state == "PreparingRebalance":
            group.settle(coordinator(cluster, group_id), group_id,
                         "two consumers to share the partitions")
            holder.start()
        coord = coordinator(cluster, group_id)
        group.settle(coord, group_id, "two consumers and the holder to be stable")
        if state == "CompletingRebalance":
            assert describe(coord, group_id).members[0].member_id == holder.member_id

        # Read and commit; then read the uncommitted window.
        produced = produce(cluster, topic, 0, BATCH, history)
        group.read_all(produced)
        for m in group.members:
            m.commit()
        window = produce(cluster, topic, BATCH, WINDOW, history)
        group.read_all(window)
        produced |= window
        before = committed(coord, group_id, topic)
        assert {p: o for p, (o, _) in before.items()} == per_partition(0, BATCH)
        epochs = {p: s.leader_epoch for p, s in cluster.partitions(topic).items()}
        assert {p: e for p, (_, e) in before.items()} == epochs, \
            "the commits carry the leader epoch of what was read"

        # A newcomer joins; the holder keeps the group mid-rebalance.
        (holder.hold_join if state == "PreparingRebalance" else holder.hold_sync).set()
        group.members.append(kind.make(cluster, topic, group_id, history))
        newcomer = group.members[-1]

        def mid_rebalance() -> bool:
            d = describe(coord, group_id)
            return (d.group_state == state and len(d.members) == 4
                    and (state != "CompletingRebalance" or holder.holding_sync.is_set())
                    and bool(newcomer.member_id())
                    and newcomer.member_id() in {m.member_id for m in d.members})

        until(group.pumping(mid_rebalance), f"the group to be {state} with the newcomer",
              WAIT_S, interval_s=0)
        assert describe(coord, group_id).group_state == state  # right before the kill
        cluster.kill(coord.node_id)
        holder.hold_join.clear()
        holder.hold_sync.clear()

        new = coordinator(cluster, group_id)
        assert new is not coord
        assert committed(new, group_id, topic) == before  # offsets and epochs, as committed
        group.settle(new, group_id, "the group to be stable on the new coordinator")
        after = produce(cluster, topic, BATCH + WINDOW, AFTER, history)
        group.read_all(after)
        produced |= after
        group.settle(new, group_id, "the group to stay stable while reading")

        # Nothing lost, duplicated or read out of order; read twice only within the
        # uncommitted window.
        assert group.read_values() == produced
        verdict = check(history)
        assert verdict.ok and not verdict.counts, str(verdict)
        assert verdict.stats["values_read"] == verdict.stats["sends_acked"] == len(produced)
        at_kill = per_partition(0, BATCH + WINDOW)
        twice = [(p, o) for (p, o), n in Counter((p, o) for p, o, _, _ in group.reads).items()
                 if n > 1]
        outside = [(p, o) for p, o in twice if not before[p][0] <= o < at_kill[p]]
        assert not outside, f"read twice outside the uncommitted window: {sorted(outside)}"

        # Commits go on at the new coordinator, with the epochs of what was read last.
        for m in group.members:
            m.commit()
        last = {}
        for p, o, _, e in sorted(group.reads):
            last[p] = (o + 1, e)
        assert committed(new, group_id, topic) == last
        assert {p: o for p, (o, _) in last.items()} == per_partition(0, BATCH + WINDOW + AFTER)
    finally:
        try:
            for m in group.members:
                m.close()
        finally:
            holder.stop()


@pytest.mark.parametrize("kind", KINDS, ids=[k.name for k in KINDS])
def test_coordinator_killed_while_the_group_prepares_a_rebalance(
        epochlog_cluster: Callable[..., Cluster], kind: Kind) -> None:
    failover_mid_rebalance(epochlog_cluster, kind, "PreparingRebalance")


@pytest.mark.parametrize("kind", KINDS[::2], ids=[k.name for k in KINDS[::2]])
def test_coordinator_killed_while_the_leader_withholds_the_assignment(
        epochlog_cluster: Callable[..., Cluster], kind: Kind) -> None:
    failover_mid_rebalance(epochlog_cluster, kind, "CompletingRebalance")
