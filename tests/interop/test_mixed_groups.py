"""One consumer group, four clients: epochlog's own Consumer beside confluent-kafka (librdkafka),
kafka-python and aiokafka members, on one 3-broker cluster.

In Kafka's classic group protocol the coordinator only relays bytes: the group's leader, a
consumer, decodes every member's subscription and encodes every member's assignment. So a group
mixing clients works only if each client reads what the others write. What is checked here:

- four clients in one group on each protocol they share ("range", "roundrobin"), led once by
  ours and otherwise by a real client: disjoint assignments covering every partition (each
  member's own view, and the leader's bytes as DescribeGroups relays them), every record read
  once, and every member's commit visible through OffsetFetch v7 with the leader epoch of the
  partition for the clients that send one (ours, confluent-kafka, kafka-python) and -1 for
  aiokafka (it sends OffsetCommit v3, older than the epoch field of v6);
- resuming: the group closes (committing), more records are written, and a different mix, with
  different clients on different partitions, reads exactly those; then one member (`epochlog
  consume --group`, a static member) is SIGKILLed and restarted under its group.instance.id:
  nothing is lost, and only records after its last commit are read twice;
- cooperative-sticky (KIP-429) with librdkafka's incremental rebalancing while members join and
  leave: from each member's own listener over time, no partition is ever owned by two members
  at once, no member reads a partition it does not own, and every record is read once;
- which request versions each client sends (the brokers' per-API request counters, read before
  and after each client runs alone), the assignor names it offers, and whether its commits carry
  leader epochs and it keeps its place as a static member. `test_versions_each_client_uses`
  prints the table (`pytest -s`) and asserts the facts we rely on.

Each member runs on its own thread (the async ones with their own event loop), so that one
member blocking in a JoinGroup never holds up another's rejoin. A member commits what it has
read from its rebalance listener before giving partitions up, as Kafka's documentation advises,
so records are read exactly once across rebalances; a crash is the exception the test allows.
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from epochlog.client import Consumer
from epochlog.client.console import EXIT_INTERRUPTED
from epochlog.client.consumer_protocol import decode_assignment
from epochlog.client.group import RebalanceListener
from epochlog.client.types import TopicPartition
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_groups import DescribeGroupsRequest
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest
from epochlog.protocol.apis.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from epochlog.protocol.error_codes import ErrorCode as E
from tests.broker.cluster import WAIT_S, Cluster, call, free_port
from tests.kafka_python_quirks import rejoin_if_lost

confluent = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

from aiokafka.abc import ConsumerRebalanceListener as AioListener
from aiokafka.coordinator.assignors.range import RangePartitionAssignor as AioRange
from aiokafka.coordinator.assignors.roundrobin import (
    RoundRobinPartitionAssignor as AioRoundRobin,
)
from kafka.coordinator.assignors.range import RangePartitionAssignor as KpRange
from kafka.coordinator.assignors.roundrobin import (
    RoundRobinPartitionAssignor as KpRoundRobin,
)

BROKER_ARGS = ["--set", "offsets_topic_num_partitions=5",
               "--set", "group_initial_rebalance_delay_ms=0",
               "--set", "group_min_session_timeout_ms=1000"]
PARTITIONS = 8
ALL = frozenset(range(PARTITIONS))
SESSION_MS, HEARTBEAT_MS = 6000, 300
POLL_MS = 100
SETTLE_S = 0.5  # after the last expected record: anything read meanwhile would be a re-read
# Topics are made before one broker restart, so that the partitions it led have leader epoch 1:
# a committed epoch of 0 then is not a client's default passing for the right answer.
TOPICS = ("mixed-range-epochlog", "mixed-roundrobin-confluent-kafka", "mixed-range-kafka-python",
          "mixed-roundrobin-aiokafka", "resume", "sticky", "versions")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    c = Cluster(tmp_path_factory.mktemp("mixed-groups"), brokers=3, broker_args=BROKER_ARGS)
    metrics = {i: free_port() for i in c.brokers}
    for i, b in c.brokers.items():
        b.extra += ["--set", f"metrics_listen=127.0.0.1:{metrics[i]}"]
    with c:
        for topic in TOPICS:
            c.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        before = c.leaders(TOPICS[0])
        c.restart_broker(before[0][0])
        for topic in TOPICS:
            c.wait_leaders(topic, PARTITIONS)
        c.metrics_ports = metrics  # type: ignore[attr-defined]
        yield c


# ------------------------------------------------------------------------------------ helpers
def until(what: str, done: Callable[[], bool], timeout_s: float = WAIT_S * 2) -> None:
    """Wait for a condition that the members' own threads make true (bounded)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def produce(cluster: Cluster, topic: str, first: int, count: int) -> dict[bytes, int]:
    """count records, dealt to the partitions in turn: value -> partition."""
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                   "linger.ms": 5})
    sent = {}
    for i in range(first, first + count):
        value = f"{topic}-{i}".encode()
        producer.produce(topic, value=value, partition=i % PARTITIONS)
        sent[value] = i % PARTITIONS
    assert producer.flush(WAIT_S) == 0
    return sent


_coordinators: dict[tuple[int, str], int] = {}


def coordinator_port(cluster: Cluster, group: str) -> int:
    """The coordinator's port, asked once per group (no broker moves after the fixture's
    restart), so that our own FindCoordinator requests do not show in the request counters
    test_versions_each_client_uses reads."""
    known = _coordinators.get((id(cluster), group))
    if known is not None:
        return known
    found: list[int] = []

    def ask() -> bool:
        answer = cluster.any_broker().call(ApiKey.FIND_COORDINATOR,
                                           FindCoordinatorRequest(coordinator_keys=[group]))
        c = answer.coordinators[0]
        assert c.error_code in (0, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS), c
        if c.error_code == 0:
            found.append(c.port)
        return bool(found)

    until(f"the coordinator of {group}", ask)
    _coordinators[(id(cluster), group)] = found[-1]
    return found[-1]


def offset_fetch_v7(cluster: Cluster, group: str, topic: str) -> dict[int, tuple[int, int]]:
    """partition -> (committed offset, committed leader epoch), by OffsetFetch v7."""
    answer = call("127.0.0.1", coordinator_port(cluster, group), 9, OffsetFetchRequest(
        group_id=group, topics=[OffsetFetchRequestTopic(name=topic,
                                                        partition_indexes=sorted(ALL))],
        require_stable=True), version=7)
    assert answer.error_code == 0, answer
    assert all(p.error_code == 0 for t in answer.topics for p in t.partitions), answer
    return {p.partition_index: (p.committed_offset, p.committed_leader_epoch)
            for t in answer.topics for p in t.partitions}


def describe(cluster: Cluster, group: str) -> Any:
    return call("127.0.0.1", coordinator_port(cluster, group), 15,
                DescribeGroupsRequest(groups=[group])).groups[0]


# ------------------------------------------------------------------------------------ members
@dataclass(frozen=True)
class Read:
    member: str
    partition: int
    offset: int
    value: bytes
    at: float


class Member:
    """One group member on its own thread. The test talks to it through `run(fn)` (fn runs on
    the member's thread, between polls) and reads what it recorded: the records it was handed,
    in order, and its rebalance listener's calls, timed, in `owned_log`."""

    kind: ClassVar[str]
    sends_leader_epoch: ClassVar[bool] = True

    def __init__(self, cluster: Cluster, topic: str, group: str, client_id: str, *,
                 strategy: str | None = "range", instance_id: str | None = None) -> None:
        """strategy: the one assignor to offer (None: the client's default list)."""
        self.cluster, self.topic, self.group = cluster, topic, group
        self.client_id, self.strategy, self.instance_id = client_id, strategy, instance_id
        self.reads: list[Read] = []
        self.owned_log: list[tuple[float, str, frozenset[int]]] = []
        self.errors: list[BaseException] = []
        self.assigned: frozenset[int] = frozenset()
        self._calls: queue.Queue[tuple[Callable[[], Any], Future[Any]]] = queue.Queue()
        self._stop = threading.Event()
        self._opened: Future[None] = Future()
        self._finished: Future[None] = Future()
        self._thread = threading.Thread(target=self._thread_main, name=client_id, daemon=True)

    def __repr__(self) -> str:
        return self.client_id

    # --- from the test's thread
    def start(self) -> Member:
        self._thread.start()
        self._opened.result(WAIT_S)
        return self

    def run(self, fn: Callable[[], Any]) -> Any:
        done: Future[Any] = Future()
        self._calls.put((fn, done))
        return done.result(WAIT_S)

    def commit(self) -> None:
        self.run(self.commit_now)

    def close(self) -> None:
        """Commit what was read, then close the client (it leaves the group)."""
        if self._thread.is_alive():
            self._stop.set()
            self._finished.result(WAIT_S * 2)
            self._thread.join(WAIT_S)
        assert not self.errors, f"{self}: {self.errors!r}"

    def values(self) -> list[bytes]:
        return [r.value for r in self.reads]

    # --- on the member's thread
    def _took(self, got: Iterable[tuple[int, int, bytes]]) -> None:
        now = time.monotonic()
        self.reads.extend(Read(self.client_id, p, o, v, now) for p, o, v in got)

    def _owned(self, sign: str, partitions: Iterable[int]) -> None:
        self.owned_log.append((time.monotonic(), sign, frozenset(partitions)))

    def _failed(self, exc: BaseException) -> None:
        self.errors.append(exc)

    def _thread_main(self) -> None:
        raise NotImplementedError

    def _serve(self) -> list[tuple[Callable[[], Any], Future[Any]]]:
        calls = []
        while True:
            try:
                calls.append(self._calls.get_nowait())
            except queue.Empty:
                return calls


class SyncMember(Member):
    def open(self) -> None: ...
    def poll(self) -> list[tuple[int, int, bytes]]: ...
    def assignment(self) -> set[int]: ...
    def commit_now(self) -> None: ...
    def close_client(self) -> None: ...

    def _thread_main(self) -> None:
        try:
            self.open()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            self._opened.set_exception(exc)
            return
        self._opened.set_result(None)
        try:
            while not self._stop.is_set():
                self._took(self.poll())
                self.assigned = frozenset(self.assignment())
                for fn, done in self._serve():
                    try:
                        done.set_result(fn())
                    except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
                        done.set_exception(exc)
            self.commit_now()
            self.close_client()
            self._finished.set_result(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            self._failed(exc)
            self._finished.set_exception(exc)


class AsyncMember(Member):
    async def open(self) -> None: ...
    async def poll(self) -> list[tuple[int, int, bytes]]: ...
    def assignment(self) -> set[int]: ...
    async def commit_now(self) -> None: ...
    async def close_client(self) -> None: ...

    def _thread_main(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        try:
            await self.open()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            self._opened.set_exception(exc)
            return
        self._opened.set_result(None)
        try:
            while not self._stop.is_set():
                self._took(await self.poll())
                self.assigned = frozenset(self.assignment())
                for fn, done in self._serve():
                    try:
                        result = fn()
                        if asyncio.iscoroutine(result):
                            result = await result
                        done.set_result(result)
                    except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
                        done.set_exception(exc)
            await self.commit_now()
            await self.close_client()
            self._finished.set_result(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            self._failed(exc)
            self._finished.set_exception(exc)


class Epochlog(AsyncMember):
    """client.Consumer. Commits by hand from its listener unless auto_commit (then the group
    commits before revoking and on close by itself)."""

    kind = "epochlog"

    def __init__(self, *args: Any, auto_commit: bool = False, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.auto_commit = auto_commit
        self.c: Consumer

    async def open(self) -> None:
        member = self

        class Listener(RebalanceListener):
            async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
                if not member.auto_commit:
                    await member.commit_now({tp for tp in revoked})
                member._owned("-", (tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
                member._owned("+", (tp.partition for tp in assigned))

            def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
                member._owned("-", (tp.partition for tp in lost))

        strategy = {} if self.strategy is None else {
            "partition_assignment_strategy": (self.strategy,)}
        self.c = Consumer(self.cluster.bootstrap, client_id=self.client_id, group_id=self.group,
                          group_instance_id=self.instance_id, auto_offset_reset="earliest",
                          enable_auto_commit=self.auto_commit, session_timeout_ms=SESSION_MS,
                          heartbeat_interval_ms=HEARTBEAT_MS, fetch_max_wait_ms=POLL_MS,
                          **strategy)
        await self.c.start()
        self.c.subscribe([self.topic], listener=Listener())

    async def poll(self) -> list[tuple[int, int, bytes]]:
        return [(r.partition, r.offset, r.value or b"")
                for r in await self.c.poll(timeout_ms=POLL_MS)]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    async def commit_now(self, only: set[TopicPartition] | None = None) -> None:
        if self.auto_commit and only is None:
            return  # close() commits
        offsets = {tp: v for tp, v in self.c.next_offsets().items()
                   if only is None or tp in only}
        try:
            await self.c.commit(offsets)
        except Exception as exc:
            self._failed(exc)
            raise

    async def close_client(self) -> None:
        await self.c.close()

    def leader_id(self) -> str:
        # Only a group's members learn who leads (JoinGroup tells them); ours keeps it here.
        return str(self.c.group_metadata()["leader_id"])


class ConfluentKafka(SyncMember):
    kind = "confluent-kafka"

    def open(self) -> None:
        config: dict[str, Any] = {
            "bootstrap.servers": self.cluster.bootstrap, "group.id": self.group,
            "client.id": self.client_id, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": HEARTBEAT_MS, "fetch.wait.max.ms": POLL_MS}
        if self.strategy is not None:
            config["partition.assignment.strategy"] = self.strategy
        if self.instance_id is not None:
            config["group.instance.id"] = self.instance_id
        self.c = confluent.Consumer(config)
        self.closing = False

        def on_assign(consumer: Any, partitions: list[Any]) -> None:
            self._owned("+", (tp.partition for tp in partitions))

        def on_revoke(consumer: Any, partitions: list[Any]) -> None:
            if not self.closing:  # closing: committed just before, nothing polled since
                try:
                    self.commit_now()
                except Exception as exc:  # noqa: BLE001 - reported by close()
                    self._failed(exc)
            self._owned("-", (tp.partition for tp in partitions))

        def on_lost(consumer: Any, partitions: list[Any]) -> None:
            self._owned("-", (tp.partition for tp in partitions))

        self.c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke,
                         on_lost=on_lost)

    def poll(self) -> list[tuple[int, int, bytes]]:
        got = []
        for m in self.c.consume(500, POLL_MS / 1000):
            if m.error() is None:
                got.append((m.partition(), m.offset(), m.value()))
            elif m.error().code() != confluent.KafkaError._PARTITION_EOF:
                self._failed(confluent.KafkaException(m.error()))
        return got

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit_now(self) -> None:
        try:
            self.c.commit(asynchronous=False)
        except confluent.KafkaException as exc:
            if exc.args[0].code() != confluent.KafkaError._NO_OFFSET:
                raise

    def close_client(self) -> None:
        # close() revokes the assignment through on_revoke; a commit from there can fail with
        # _DESTROY ("Broker handle destroyed for termination") on a loaded machine, and there is
        # nothing left to commit: the loop committed just before, and nothing was polled since.
        self.closing = True
        self.c.close()

    def member_id(self) -> str:
        return self.c.memberid()


class KafkaPython(SyncMember):
    """kafka-python 3 runs rebalance listeners on its IO thread, where its blocking commit()
    refuses to run and no public awaitable commit exists: its auto-commit, which commits what
    poll() returned before every rebalance and on close, does the listener's job."""

    kind = "kafka-python"

    def open(self) -> None:
        strategy = {} if self.strategy is None else {"partition_assignment_strategy": (
            {"range": KpRange, "roundrobin": KpRoundRobin}[self.strategy],)}
        self.c = kafka.KafkaConsumer(
            bootstrap_servers=self.cluster.bootstrap, group_id=self.group,
            client_id=self.client_id, group_instance_id=self.instance_id,
            auto_offset_reset="earliest", enable_auto_commit=True, session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS, fetch_max_wait_ms=POLL_MS, **strategy)
        # kafka-python's leader assigns from its own metadata: learn the partitions first (see
        # test_groups_interop.py).
        assert self.c.partitions_for_topic(self.topic), "kafka-python sees no partitions"
        member = self

        class Listener(kafka.ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: set[Any]) -> None:
                member._owned("-", (tp.partition for tp in revoked))

            def on_partitions_assigned(self, assigned: set[Any]) -> None:
                member._owned("+", (tp.partition for tp in assigned))

        self.c.subscribe([self.topic], listener=Listener())

    def poll(self) -> list[tuple[int, int, bytes]]:
        # A rebalance's auto-commit gets the time left of the poll() it runs in: 100 ms was
        # seen to run out ("Pre-rebalance offset commit failed"), which re-reads records.
        rejoin_if_lost(self.c)  # kafka-python's lost join (tests/kafka_python_quirks.py)
        got = self.c.poll(timeout_ms=1000)
        return [(r.partition, r.offset, r.value) for rs in got.values() for r in rs]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    def commit_now(self) -> None:
        """Commit what was read. kafka-python refuses while it rebalances (another member just
        left): its poll finishes the rebalance (auto-committing before it revokes), then the
        commit is tried again; what that poll returns counts as read."""
        deadline = time.monotonic() + WAIT_S
        while self.c.assignment():
            try:
                self.c.commit()
                return
            except kafka.errors.RebalanceInProgressError:
                assert time.monotonic() < deadline, "kafka-python rebalanced until the deadline"
                self._took(self.poll())

    def close_client(self) -> None:
        self.c.close()


class AioKafka(AsyncMember):
    kind = "aiokafka"
    sends_leader_epoch = False

    async def open(self) -> None:
        strategy = {} if self.strategy is None else {"partition_assignment_strategy": (
            {"range": AioRange, "roundrobin": AioRoundRobin}[self.strategy],)}
        self.c = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=self.cluster.bootstrap, group_id=self.group,
            client_id=self.client_id, group_instance_id=self.instance_id,
            auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS, fetch_max_wait_ms=POLL_MS, **strategy)
        await self.c.start()
        member = self

        class Listener(AioListener):
            async def on_partitions_revoked(self, revoked: set[Any]) -> None:
                try:
                    await member.commit_now()
                except Exception as exc:  # noqa: BLE001 - reported by close()
                    member._failed(exc)
                member._owned("-", (tp.partition for tp in revoked))

            async def on_partitions_assigned(self, assigned: set[Any]) -> None:
                member._owned("+", (tp.partition for tp in assigned))

        self.c.subscribe([self.topic], listener=Listener())

    async def poll(self) -> list[tuple[int, int, bytes]]:
        got = await self.c.getmany(timeout_ms=POLL_MS)
        return [(r.partition, r.offset, r.value) for rs in got.values() for r in rs]

    def assignment(self) -> set[int]:
        return {tp.partition for tp in self.c.assignment()}

    async def commit_now(self) -> None:
        if self.c.assignment():
            await self.c.commit()

    async def close_client(self) -> None:
        await self.c.stop()


KINDS: dict[str, type[Member]] = {k.kind: k for k in (Epochlog, ConfluentKafka, KafkaPython,
                                                      AioKafka)}


def close_all(members: Iterable[Member]) -> None:
    errors = []
    for m in members:
        try:
            m.close()
        except BaseException as exc:  # noqa: BLE001 - close the rest before failing
            errors.append(f"{m}: {exc!r}")
    assert not errors, errors


def stable_split(cluster: Cluster, group: str, members: list[Member]) -> bool:
    """Every member owns a part, the parts are disjoint and cover every partition, and the
    coordinator agrees: the group is Stable with these members, holding the assignment bytes
    its leader encoded, which say what each member says it owns."""
    parts = [m.assigned for m in members]
    if not all(parts) or sum(map(len, parts)) != PARTITIONS or frozenset().union(*parts) != ALL:
        return False
    group_state = describe(cluster, group)
    if group_state.group_state != "Stable" or len(group_state.members) != len(members):
        return False
    by_client = {d.client_id: d for d in group_state.members}
    for m in members:
        d = by_client.get(m.client_id)
        if d is None:
            return False
        leaders_view = {tp.partition for tp in decode_assignment(d.member_assignment).partitions}
        if leaders_view != m.assigned:
            return False
    return True


def read_all(members: list[Member], expected: Iterable[bytes], what: str) -> list[Read]:
    """Wait until the members between them read every expected value, then a little longer;
    every read, in member order."""
    wanted = set(expected)
    until(what, lambda: wanted <= {v for m in members for v in m.values()})
    time.sleep(SETTLE_S)
    return [r for m in members for r in m.reads]


def assert_once(reads: list[Read], expected: set[bytes]) -> None:
    counts = Counter(r.value for r in reads)
    twice = sorted(v for v, n in counts.items() if n > 1)
    assert not twice, f"read more than once: {twice[:10]}"
    assert set(counts) == expected


# ------------------------------------------------------------------ 1. four clients, one group
@pytest.mark.parametrize("strategy, leader", [("range", "epochlog"),
                                              ("roundrobin", "confluent-kafka"),
                                              ("range", "kafka-python"),
                                              ("roundrobin", "aiokafka")])
def test_four_clients_share_one_group(cluster: Cluster, strategy: str, leader: str) -> None:
    """The first member to join leads while it stays (the coordinator keeps its leader), so the
    chosen leader joins alone first; the others follow, and the leader decodes their
    subscriptions and encodes their assignments."""
    topic = group = f"mixed-{strategy}-{leader}"
    order = [leader] + [k for k in KINDS if k != leader]
    members: list[Member] = []
    try:
        for kind in order:
            members.append(KINDS[kind](cluster, topic, group, f"{kind}-{strategy}",
                                       strategy=strategy).start())
            if kind == leader:
                until(f"{leader} to lead alone", lambda: members[0].assigned == ALL)
        until(f"the {strategy} split among {order}", lambda: stable_split(cluster, group, members))
        ours = next(m for m in members if isinstance(m, Epochlog))
        ids = {d.member_id: d.client_id for d in describe(cluster, group).members}
        assert ids[ours.run(ours.leader_id)] == f"{leader}-{strategy}"
        assert describe(cluster, group).protocol_data == strategy

        sent = produce(cluster, topic, 0, 50 * PARTITIONS)
        reads = read_all(members, sent, "every record")
        assert_once(reads, set(sent))
        for m in members:
            assert {r.partition for r in m.reads} == m.assigned, m
        for m in members:
            m.commit()
        committed = offset_fetch_v7(cluster, group, topic)
        epochs = cluster.leaders(topic)
        for m in members:
            for p in m.assigned:
                end = max(r.offset for r in m.reads if r.partition == p) + 1
                epoch = epochs[p][1] if m.sends_leader_epoch else -1
                # A partition that a late rebalance moved through a member committing without
                # epochs comes back positioned at that commit, epoch unknown (-1): seen beside a
                # CPU hog, kafka-python then committing (50, -1) for a partition aiokafka held.
                passed_through = any(not o.sends_leader_epoch and o is not m
                                     and any(r.partition == p for r in o.reads)
                                     for o in members)
                allowed = {(end, epoch)} | ({(end, -1)} if passed_through else set())
                assert committed[p] in allowed, (m, p, committed[p], epochs[p])
        assert {e for _, e in epochs.values()} >= {0, 1}  # the fixture made some epochs 1
    finally:
        close_all(members)


# -------------------------------------------------------------------- 2. resuming after restarts
CLI_LINE = re.compile(rb"^(\d+):(\d+):(.*)$")


class ConsoleConsumer:
    """`epochlog consume TOPIC --group G --group-instance-id ID --print-offset` as a child
    process: a static member whose lines are collected by a thread."""

    def __init__(self, cluster: Cluster, topic: str, group: str, instance_id: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "epochlog", "consume", topic, "--group", group,
             "--group-instance-id", instance_id, "--print-offset", "--from-beginning",
             "--bootstrap-server", cluster.bootstrap],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.reads: list[Read] = []
        self.stderr: list[bytes] = []
        self._threads = [threading.Thread(target=self._out, daemon=True),
                         threading.Thread(target=self._err, daemon=True)]
        for t in self._threads:
            t.start()

    def _out(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            found = CLI_LINE.match(line.rstrip(b"\n"))
            assert found, line
            self.reads.append(Read("console", int(found[1]), int(found[2]), found[3],
                                   time.monotonic()))

    def _err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr.extend(self.proc.stderr)

    def values(self) -> list[bytes]:
        return [r.value for r in self.reads]

    def stop(self, sig: int) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError("epochlog consume did not stop:\n" +
                                 b"".join(self.stderr[-20:]).decode(errors="replace")) from None
        for t in self._threads:
            t.join(WAIT_S)
        return rc


def test_a_mixed_group_resumes_after_clean_and_unclean_restarts(cluster: Cluster) -> None:
    topic = group = "resume"
    # Range orders dynamic members by member id, which begins with the client id: the client
    # ids' first letters decide who reads which partitions.
    first = [Epochlog(cluster, topic, group, "a-epochlog"),
             ConfluentKafka(cluster, topic, group, "b-confluent"),
             KafkaPython(cluster, topic, group, "c-kafka-python"),
             AioKafka(cluster, topic, group, "d-aiokafka")]
    batch1 = produce(cluster, topic, 0, 40 * PARTITIONS)
    try:
        for m in first:  # each join is a rebalance while records are read: commits on revoke
            m.start()
        until("the first mix to split the partitions",
              lambda: stable_split(cluster, group, first))
        assert_once(read_all(first, batch1, "the first batch"), set(batch1))
        owner_before = {p: m.kind for m in first for p in m.assigned}
    finally:
        close_all(first)  # each commits, then leaves
    at_close = offset_fetch_v7(cluster, group, topic)
    assert {p: o for p, (o, _) in at_close.items()} == {p: 40 for p in ALL}

    batch2 = produce(cluster, topic, 40 * PARTITIONS, 40 * PARTITIONS)
    second = [AioKafka(cluster, topic, group, "a-aiokafka"),
              Epochlog(cluster, topic, group, "b-epochlog"),
              ConfluentKafka(cluster, topic, group, "c-confluent")]
    try:
        for m in second:
            m.start()
        until("the second mix to split the partitions",
              lambda: stable_split(cluster, group, second))
        assert_once(read_all(second, batch2, "the second batch"), set(batch2))
        owner_after = {p: m.kind for m in second for p in m.assigned}
        moved = [p for p in ALL if owner_before[p] != owner_after[p]]
        assert len(moved) >= PARTITIONS // 2, (owner_before, owner_after)
    finally:
        close_all(second)

    # A crash: the console consumer (auto-commit every 5 s from its start) joins the group,
    # reads its share, and is SIGKILLed before its first auto-commit; restarted as the same
    # static member it takes its own place back at once (KIP-345) and resumes from the last
    # commit, so what it read after that commit is read twice, and nothing else is.
    third: list[Member] = [KafkaPython(cluster, topic, group, "k-kafka-python"),
                           ConfluentKafka(cluster, topic, group, "c-confluent")]
    console: ConsoleConsumer | None = None
    restarted: ConsoleConsumer | None = None
    try:
        for m in third:
            m.start()
        until("the third mix to split the partitions",
              lambda: stable_split(cluster, group, third))
        console = ConsoleConsumer(cluster, topic, group, "console")
        started = time.monotonic()
        until("the console consumer to join", lambda: stable_with_console(cluster, group, third))
        batch3 = produce(cluster, topic, 80 * PARTITIONS, 40 * PARTITIONS)
        until("the third mix to read the third batch",
              lambda: set(batch3) <= set(console.values()) | {v for m in third
                                                             for v in m.values()})
        console.stop(signal.SIGKILL)
        killed_after_s = time.monotonic() - started
        crashed_at = offset_fetch_v7(cluster, group, topic)
        again = {r.value for r in console.reads if r.offset >= crashed_at[r.partition][0]}
        if killed_after_s < 4.5:  # before its first auto-commit: none of its reads committed
            assert again == set(console.values()) and again
        restarted = ConsoleConsumer(cluster, topic, group, "console")

        def all_reads() -> list[Read]:
            return console.reads + restarted.reads + [r for m in third for r in m.reads]

        until("what the crashed member had not committed to be read again",
              lambda: again <= {v for v, n in Counter(r.value for r in all_reads()).items()
                                if n > 1})
        time.sleep(SETTLE_S)
        assert restarted.stop(signal.SIGTERM) == EXIT_INTERRUPTED  # as produce's
        for m in third:
            m.commit()
        counts = Counter(r.value for r in all_reads())
        assert set(counts) == set(batch3), "records lost or foreign records read"
        assert {v for v, n in counts.items() if n > 1} == again
        assert max(counts.values()) <= 2
        assert {p: o for p, (o, _) in offset_fetch_v7(cluster, group, topic).items()} == \
            {p: 120 for p in ALL}
    finally:
        for c in (console, restarted):
            if c is not None and c.proc.poll() is None:
                c.stop(signal.SIGKILL)
        close_all(third)


def stable_with_console(cluster: Cluster, group: str, members: list[Member]) -> bool:
    """The group is Stable with members plus the console consumer, which owns the rest."""
    described = describe(cluster, group)
    if described.group_state != "Stable" or len(described.members) != len(members) + 1:
        return False
    parts = [m.assigned for m in members]
    theirs = frozenset().union(*parts)
    return all(parts) and sum(map(len, parts)) == len(theirs) and bool(ALL - theirs)


# ------------------------------------------------------------------ 3. cooperative-sticky
def owned_intervals(m: Member, closed_at: float) -> dict[int, list[tuple[float, float]]]:
    """partition -> [(from, until)] as the member's listener saw it; still owned at the end:
    until closed_at."""
    since: dict[int, float] = {}
    out: dict[int, list[tuple[float, float]]] = {}
    for at, sign, parts in m.owned_log:
        for p in parts:
            if sign == "+":
                assert p not in since, f"{m}: told {p} was assigned while it owned it"
                since[p] = at
            else:
                assert p in since, f"{m}: told {p} was revoked while it did not own it"
                out.setdefault(p, []).append((since.pop(p), at))
    for p, start in since.items():
        out.setdefault(p, []).append((start, closed_at))
    return out


def owned_after_revoke(m: Member) -> list[frozenset[int]]:
    """What the member still owned after each time its listener was told of a revoke."""
    owned: frozenset[int] = frozenset()
    after = []
    for _, sign, parts in m.owned_log:
        owned = owned | parts if sign == "+" else owned - parts
        if sign == "-" and parts:
            after.append(owned)
    return after


class Producer(threading.Thread):
    """Writes a few records every 50 ms until stopped, so that records arrive while members
    join and leave."""

    def __init__(self, cluster: Cluster, topic: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic = cluster, topic
        self.sent: dict[bytes, int] = {}
        self.halt = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.halt.wait(0.05):
            self.sent.update(produce(self.cluster, self.topic, i, PARTITIONS))
            i += PARTITIONS

    def stop(self) -> dict[bytes, int]:
        self.halt.set()
        self.join(WAIT_S)
        return self.sent


def test_cooperative_sticky_with_librdkafka_never_owns_a_partition_twice(cluster: Cluster
                                                                          ) -> None:
    """Ours (one auto-committing, one committing from its listener) and confluent-kafka on
    cooperative-sticky, members joining and leaving while records are written. Under KIP-429 a
    partition moves in two rounds: its owner gives it up (the only partitions any member gives
    up), and only a later round hands it to another member."""
    topic = group = "sticky"
    coop = "cooperative-sticky"
    a = Epochlog(cluster, topic, group, "a-epochlog", strategy=coop, auto_commit=True)
    b = ConfluentKafka(cluster, topic, group, "b-confluent", strategy=coop)
    c = Epochlog(cluster, topic, group, "c-epochlog", strategy=coop)
    d = ConfluentKafka(cluster, topic, group, "d-confluent", strategy=coop)
    everyone = [a, b, c, d]
    producer = Producer(cluster, topic)
    closed_at: dict[Member, float] = {}
    try:
        a.start()
        until("a to own every partition", lambda: a.assigned == ALL)
        producer.start()
        steps: list[tuple[str, Member, list[Member]]] = [
            ("join", b, [a, b]), ("join", c, [a, b, c]), ("leave", b, [a, c]),
            ("join", d, [a, c, d]), ("leave", a, [c, d])]
        for step, member, group_now in steps:
            if step == "join":
                member.start()
            else:
                member.close()
                closed_at[member] = time.monotonic()
            until(f"{step} {member}: {group_now} to split the partitions",
                  lambda group_now=group_now: stable_split(cluster, group, group_now))
            assert describe(cluster, group).protocol_data == coop
        sent = producer.stop()
        assert_once(read_all(everyone, sent, "every record written"), set(sent))
        for m in (c, d):
            m.close()
            closed_at[m] = time.monotonic()
    finally:
        producer.halt.set()
        close_all(everyone)
    assert all(m.owned_log for m in everyone)
    for m in (a, b, c):  # each gave up only part of what it owned while staying (KIP-429)
        assert any(owned_after_revoke(m)), m
    intervals = {m: owned_intervals(m, closed_at[m]) for m in everyone}
    for p in ALL:
        spans = sorted((s, e, m) for m in everyone for s, e in intervals[m].get(p, []))
        for (_, e1, m1), (s2, _, m2) in itertools.pairwise(spans):
            assert e1 <= s2, f"partition {p}: {m1} owned it until {e1}, {m2} from {s2}"
    for m in everyone:
        for r in m.reads:
            assert any(s <= r.at <= e for s, e in intervals[m].get(r.partition, [])), \
                f"{m} read {r.value!r} of partition {r.partition} when it did not own it"
    for m in (b, c, d):  # a joined alone: it only ever gave up partitions
        assert m.owned_log[0][1] == "+"


# ------------------------------------------------------------------ 4. what each client sends
GROUP_APIS = ("FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
              "OffsetCommit", "OffsetFetch")
REQUESTS = re.compile(r'^epochlog_broker_requests_total\{([^}]*)\} (\S+)$', re.MULTILINE)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def request_counts(cluster: Cluster) -> Counter[tuple[str, int]]:
    """(API, version) -> requests clients sent, summed over the brokers' /metrics."""
    counts: Counter[tuple[str, int]] = Counter()
    for port in cluster.metrics_ports.values():  # type: ignore[attr-defined]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as r:
            text = r.read().decode()
        for labels, value in REQUESTS.findall(text):
            label = dict(LABEL.findall(labels))
            if label["listener"] == "EXTERNAL" and label["api"] in GROUP_APIS:
                counts[(label["api"], int(label["version"]))] += int(float(value))
    return counts


def offered_protocols(cluster: Cluster, group: str, client_id: str) -> str:
    """The assignor names a member offered in JoinGroup, from the coordinator's log."""
    port = coordinator_port(cluster, group)
    broker = next(b for b in cluster.brokers.values() if b.port == port)
    return broker.wait_line(rf"member \S+ joined \(client {re.escape(client_id)}, "
                            r"protocols (\S*), instance").group(1)


@dataclass
class ClientFacts:
    versions: dict[str, list[int]]
    protocols: str
    chosen: str
    commit_epochs: str  # "leader epoch" or "-1"
    resumed_commit_epochs: str  # a commit of a position resumed from a commit, nothing read
    static_member: bool  # group.instance.id seen by the coordinator
    static_leaves: bool  # a static member sends LeaveGroup on close


def client_facts(cluster: Cluster, kind: str, sent: Iterable[bytes]) -> ClientFacts:
    """One member of `kind` alone in a new group reads, commits and closes; then a static one
    resumes, commits without reading, and closes. The brokers' request counters before and
    after each give the versions; our own requests stay out of those windows."""
    topic, group = "versions", f"versions-{kind}"
    coordinator_port(cluster, group)
    epochs = {p: e for p, (_, e) in cluster.leaders(topic).items()}
    cls = KINDS[kind]

    def epochs_of(committed: dict[int, tuple[int, int]]) -> str:
        got = {p: e for p, (_, e) in committed.items()}
        return "leader epoch" if got == epochs else "-1" if set(got.values()) == {-1} else \
            f"other: {got}"

    counted = request_counts(cluster)
    member = cls(cluster, topic, group, f"{kind}-dynamic", strategy=None).start()
    try:
        until(f"{kind} to read", lambda: set(sent) <= set(member.values()))
        chosen = describe(cluster, group).protocol_data
        until(f"{kind} to heartbeat", lambda: any(
            n > counted[k] for k, n in request_counts(cluster).items() if k[0] == "Heartbeat"))
        member.commit()
    finally:
        member.close()
    used = request_counts(cluster) - counted
    committed = offset_fetch_v7(cluster, group, topic)
    protocols = offered_protocols(cluster, group, f"{kind}-dynamic")

    counted = request_counts(cluster)
    static = cls(cluster, topic, group, f"{kind}-static", strategy=None,
                 instance_id=f"{kind}-instance").start()
    try:
        until(f"static {kind} to be assigned", lambda: static.assigned == ALL)
        instance_ids = [m.group_instance_id for m in describe(cluster, group).members]
        static.commit()
    finally:
        static.close()
    static_used = request_counts(cluster) - counted
    resumed = offset_fetch_v7(cluster, group, topic)
    assert {p: o for p, (o, _) in resumed.items()} == {p: 10 for p in ALL}
    used += static_used
    return ClientFacts(
        versions={api: sorted(v for a, v in used if a == api) for api in GROUP_APIS},
        protocols=protocols, chosen=chosen, commit_epochs=epochs_of(committed),
        resumed_commit_epochs=epochs_of(resumed) if any(
            a == "OffsetCommit" for a, _ in static_used) else "none sent",
        static_member=instance_ids == [f"{kind}-instance"],
        static_leaves=any(a == "LeaveGroup" for a, _ in static_used))


def test_versions_each_client_uses(cluster: Cluster) -> None:
    sent = produce(cluster, "versions", 0, 10 * PARTITIONS)
    facts = {kind: client_facts(cluster, kind, sent) for kind in KINDS}
    print("\nclient | " + " | ".join(GROUP_APIS) + " | offered (chosen) | commit epochs | "
          "resumed commit epochs | static | static close leaves")
    for kind, f in facts.items():
        print(f"{kind} | " + " | ".join(",".join(map(str, f.versions[a])) or "-"
                                         for a in GROUP_APIS) +
              f" | {f.protocols} ({f.chosen}) | {f.commit_epochs} | {f.resumed_commit_epochs}"
              f" | {f.static_member} | {f.static_leaves}")
    ours = facts["epochlog"]
    # ours: the newest version of each API both sides speak (the broker's highest)
    assert ours.versions == {"FindCoordinator": [4], "JoinGroup": [7], "SyncGroup": [5],
                             "Heartbeat": [4], "LeaveGroup": [4], "OffsetCommit": [8],
                             "OffsetFetch": [7]}
    assert ours.protocols == "range,cooperative-sticky" and ours.chosen == "range"
    # KIP-320: the epoch goes with the offset, also when a resumed position is committed
    assert ours.commit_epochs == ours.resumed_commit_epochs == "leader epoch"
    assert ours.static_member and not ours.static_leaves  # KIP-345: its place is kept
    for kind in ("confluent-kafka", "kafka-python"):
        assert facts[kind].commit_epochs == "leader epoch", (kind, facts[kind])
    assert facts["aiokafka"].commit_epochs == "-1"
    assert facts["aiokafka"].versions["OffsetCommit"] == [3]  # before the epoch field (v6)
    assert all(f.static_member for f in facts.values()), facts
