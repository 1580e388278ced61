"""Our consumer-group client (client.group, through client.Consumer) against real broker processes.

What is checked, and why:
- members joining one by one and closing one by one, eager (range) and cooperative
  (cooperative-sticky): at every moment no partition is owned by two members, every stable point
  covers all partitions, every record is read exactly once (commits on revoke and close), and the
  listener's calls hand partitions over in order (a partition is assigned only after its previous
  owner was told it was revoked; an eager member revokes everything before each rejoin);
- a member whose event loop stalls (as a stopped process: heartbeats stop too) is expelled after
  session_timeout_ms; when it runs again its commit fails (CommitFailedError), it reports its
  partitions lost and rejoins;
- heartbeats go on while the application is busy between polls: three session timeouts without
  poll() (within max_poll_interval_ms) change nothing;
- max_poll_interval_ms: a member whose heartbeats go on but whose application stopped calling
  poll() leaves the group; the next poll() reports the partitions lost and rejoins;
- static membership: a restarted member (same group_instance_id) gets its partitions back without a
  rebalance (the generation is unchanged, the others hear nothing); two live members with one
  instance id: FENCED_INSTANCE_ID raised from poll();
- commits carry leader epochs (committed(), and OffsetFetch v7 read directly from the
  coordinator); auto-commit commits only what the previous poll() returned;
- a pattern subscription picks up a topic created later;
- poll() longer than max_poll_interval_ms is polling; unsubscribe() leaves at once;
- a member closed while its SyncGroup is on the wire still commits (close lets the sync finish);
  a round that completed while the application was not polling is not taken once the member has
  left meanwhile (its partitions are reported lost instead);
- the coordinator SIGKILLed: commits go through the new one at once, nothing is lost.

Members run their poll loops as tasks of the test's event loop, except where a whole process must
stall: that member gets a thread with its own loop, which the test blocks. Two tests hold one
SyncGroup back for a moment (a wrapper around the member's request method) to make a window
certain that is otherwise a matter of timing.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from epochlog.client import (
    CommitFailedError,
    Consumer,
    KafkaError,
    Producer,
    RebalanceListener,
)
from epochlog.client.group_member import Phase
from epochlog.client.types import ConsumerRecord, TopicPartition
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest
from epochlog.protocol.apis.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
)
from epochlog.protocol.error_codes import ErrorCode
from tests.broker.cluster import Cluster, call

BROKER_ARGS = ("--set", "offsets_topic_num_partitions=3",
               "--set", "group_initial_rebalance_delay_ms=0",
               "--set", "group_min_session_timeout_ms=1000")
SESSION_MS = 2000
HEARTBEAT_MS = 200
WAIT_S = 30.0
FAST: dict[str, Any] = {"session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS,
                        "max_poll_interval_ms": 10_000, "auto_offset_reset": "earliest",
                        "retry_backoff_ms": 50}
EAGER, COOPERATIVE = ("range",), ("cooperative-sticky",)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("group-consumer"), brokers=2,
                 broker_args=BROKER_ARGS) as c:
        yield c


async def produce(cluster: Cluster, topic: str, partitions: int, count: int,
                  start: int = 0) -> list[bytes]:
    """count records spread over the partitions, values b"<n>" from start; acknowledged."""
    values = [b"%d" % n for n in range(start, start + count)]
    async with Producer(cluster.bootstrap, linger_ms=1) as p:
        await asyncio.gather(*(p.send_and_wait(topic, value=v, partition=i % partitions)
                               for i, v in enumerate(values)))
    return values


async def until(what: str, done: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


class Ledger:
    """Every member's listener calls, in the order they happened (one lock: members may run on
    other threads), checked as they come: a partition is handed to a member only when no other
    member owns it, and given up (revoked) only by its owner. The one exception is an expelled
    member's: its partitions are handed out before it learns it was expelled, so such a handover
    is pending until that member reports the partition lost; one never reported is an error."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, frozenset[TopicPartition]]] = []
        self.owner: dict[TopicPartition, str] = {}
        self.taken: set[tuple[TopicPartition, str]] = set()  # (tp, expelled owner) not yet lost
        self.violations: list[str] = []
        self.lock = threading.Lock()

    def record(self, member: str, kind: str, partitions: set[TopicPartition]) -> None:
        with self.lock:
            self.events.append((member, kind, frozenset(partitions)))
            for tp in sorted(partitions):
                owner = self.owner.get(tp)
                if kind == "assigned":
                    if owner is not None:
                        self.taken.add((tp, owner))
                    self.owner[tp] = member
                elif owner == member:
                    del self.owner[tp]
                elif kind == "lost" and (tp, member) in self.taken:
                    self.taken.discard((tp, member))
                else:
                    self.violations.append(f"{member} {kind} {tp}, owned by {owner}")

    @property
    def errors(self) -> list[str]:
        with self.lock:
            return self.violations + [f"{tp} assigned while {owner} owned it, and {owner} never "
                                      "reported it lost" for tp, owner in sorted(self.taken)]

    def of(self, member: str) -> list[tuple[str, frozenset[TopicPartition]]]:
        with self.lock:
            return [(kind, parts) for m, kind, parts in self.events if m == member]


class Listener(RebalanceListener):
    def __init__(self, name: str, ledger: Ledger, consumer: Consumer | None = None) -> None:
        self.name, self.ledger, self.consumer = name, ledger, consumer

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.ledger.record(self.name, "revoked", revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await asyncio.sleep(0)  # a coroutine callback is awaited
        self.ledger.record(self.name, "assigned", assigned)

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.ledger.record(self.name, "lost", lost)


class Member:
    """A Consumer in the group with a task polling it, keeping what it read."""

    def __init__(self, name: str, cluster: Cluster, group: str, ledger: Ledger,
                 topics: list[str] | None = None, pattern: str | None = None,
                 poll_ms: int = 50, process_ms: int = 0, **settings: Any) -> None:
        self.name = name
        self.consumer = Consumer(cluster.bootstrap, group_id=group, client_id=name,
                                 **{**FAST, **settings})
        self.topics, self.pattern = topics, pattern
        self.listener = Listener(name, ledger, self.consumer)
        self.records: list[ConsumerRecord] = []
        self.poll_ms, self.process_ms = poll_ms, process_ms
        self.polling = asyncio.Event()
        self.polling.set()
        self._stop = False
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> Member:
        await self.consumer.start()
        self.consumer.subscribe(self.topics, pattern=self.pattern, listener=self.listener)
        self._task = asyncio.get_running_loop().create_task(self._loop())
        return self

    async def _loop(self) -> None:
        while not self._stop:
            await self.polling.wait()
            if self._stop:
                return
            records = await self.consumer.poll(timeout_ms=self.poll_ms)
            if records and self.process_ms:
                await asyncio.sleep(self.process_ms / 1000)  # the application at work
            self.records += records

    async def stop_polling(self) -> None:
        """Stop calling poll() (the poll under way finishes)."""
        self.polling.clear()
        await asyncio.sleep(self.poll_ms / 1000 + 0.1)

    async def close(self) -> None:
        self._stop = True
        self.polling.set()
        try:
            if self._task is not None:
                await self._task  # raises what poll() raised
        finally:
            await self.consumer.close()

    def owned(self) -> set[TopicPartition]:
        return set(self.consumer.group_metadata()["assigned"])

    def generation(self) -> int:
        return int(self.consumer.group_metadata()["generation"])

    def values(self) -> list[bytes]:
        return [r.value or b"" for r in self.records]


def twice(members: list[Member]) -> dict[str, list[str]]:
    """Records read more than once: partition -> "member:offset" of each reading, in order."""
    readers: dict[tuple[int, int], list[str]] = {}
    for m in members:
        for r in m.records:
            readers.setdefault((r.partition, r.offset), []).append(m.name)
    out: dict[str, list[str]] = {}
    for (p, o), names in sorted(readers.items()):
        if len(names) > 1:
            out.setdefault(f"p{p}", []).append(f"{o}:{'+'.join(names)}")
    return out


def stable(members: list[Member], partitions: set[TopicPartition]) -> bool:
    """Every partition owned by exactly one member, all in one generation, each member reading
    exactly what it owns, and none left without a partition while there are enough to go round
    (a cooperative rebalance passes through a generation where one member still owns everything
    and the newcomer nothing: that is not the split the test waits for)."""
    owned = [m.owned() for m in members]
    generations = {m.generation() for m in members}
    return (sum(len(o) for o in owned) == len(partitions) and set().union(*owned) == partitions
            and len(generations) == 1 and generations != {-1}
            and (len(partitions) < len(members) or all(owned))
            and all(m.consumer.assignment() == o for m, o in zip(members, owned, strict=True)))


class Overlaps:
    """Samples the members' owned partitions every few ms: none may ever be owned twice."""

    def __init__(self, members: list[Member]) -> None:
        self.members = members
        self.seen: list[str] = []
        self.samples = 0
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            owners: dict[TopicPartition, str] = {}
            for m in list(self.members):
                for tp in m.owned():
                    if tp in owners:
                        self.seen.append(f"{tp} owned by {owners[tp]} and {m.name}")
                    owners[tp] = m.name
            self.samples += 1
            await asyncio.sleep(0.005)

    async def stop(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


# ------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize("strategy", [EAGER, COOPERATIVE], ids=["range", "cooperative"])
async def test_members_join_and_leave_reading_every_record_once(cluster: Cluster,
                                                                strategy: tuple[str]) -> None:
    topic, group = f"join-leave-{strategy[0]}", f"g-join-leave-{strategy[0]}"
    cluster.create_topic(topic, partitions=6)
    partitions = {TopicPartition(topic, p) for p in range(6)}
    ledger = Ledger()
    members: list[Member] = []
    overlaps = Overlaps(members)
    sent: list[bytes] = []
    sending = True

    async def keep_producing() -> None:
        while sending:
            sent.extend(await produce(cluster, topic, 6, 30, start=len(sent)))
            await asyncio.sleep(0.05)

    producer = asyncio.get_running_loop().create_task(keep_producing())
    closed: list[Member] = []
    try:
        for name in ("m1", "m2", "m3"):
            members.append(await Member(name, cluster, group, ledger, [topic], poll_ms=20,
                                        process_ms=30, max_poll_records=20,
                                        partition_assignment_strategy=strategy).start())
            await until(f"{name} joined and the group settled", lambda: stable(members,
                                                                               partitions))
            await asyncio.sleep(0.3)  # records flow at this stable point
        generations = {m.generation() for m in members}
        while members:
            gone = members.pop(0)
            await gone.close()
            closed.append(gone)
            if members:
                seen = frozenset(generations)

                def settled_anew(seen: frozenset[int] = seen) -> bool:
                    return stable(members, partitions) and members[0].generation() not in seen

                await until(f"{gone.name} left and the group settled", settled_anew)
                generations |= {m.generation() for m in members}
                await asyncio.sleep(0.3)
            else:
                break
            if len(members) == 1:
                sending = False
                await producer
                await until("the last member read everything", lambda: set(sent) <= {
                    v for m in closed + members for v in m.values()})
    finally:
        sending = False
        await asyncio.gather(producer, return_exceptions=True)
        await overlaps.stop()
        for m in members:
            await m.close()

    read = [v for m in closed for v in m.values()]
    assert overlaps.samples > 100 and not overlaps.seen, overlaps.seen[:5]
    assert not ledger.errors, ledger.errors[:5]
    assert len(read) == len(sent) and set(read) == set(sent), (
        f"{len(sent)} sent, {len(read)} read, {len(set(read))} distinct, "
        f"{len(set(sent) - set(read))} missing; read twice: {twice(closed)}")
    # Each member's listener: assigned first; eagerly, everything owned is revoked before each
    # rejoin (so each assigned set is the member's whole new assignment).
    for m in closed:
        events = ledger.of(m.name)
        assert events[0][0] == "assigned" and events[-1][0] == "revoked", events
        owned: set[TopicPartition] = set()
        for kind, parts in events:
            if kind == "assigned":
                if strategy == EAGER:
                    assert not owned, f"{m.name}: assigned {parts} while owning {owned}"
                owned |= parts
            else:
                assert kind == "revoked", events
                if strategy == EAGER:
                    assert parts == owned, f"{m.name}: eager revoke of {parts} of {owned}"
                owned -= parts
        assert not owned
    if strategy == COOPERATIVE:  # partitions moved by cooperative revokes, not only at close
        assert any(kind == "revoked" and parts != frozenset() for m in closed
                   for kind, parts in ledger.of(m.name)[:-1])


async def test_close_during_a_sync_still_commits(cluster: Cluster) -> None:
    """A member closed while its SyncGroup is on the wire holds the new generation, whose
    commits the coordinator refuses until the sync completes: close() lets it complete, so the
    commit of what was read goes through. (The SyncGroup is held back 0.5 s to make the window
    certain.)"""
    topic, group = "close-sync", "g-close-sync"
    cluster.create_topic(topic, partitions=2)
    partitions = {TopicPartition(topic, p) for p in range(2)}
    sent = await produce(cluster, topic, 2, 20)
    ledger = Ledger()
    a = await Member("a", cluster, group, ledger, [topic], auto_commit_interval_ms=60_000,
                     partition_assignment_strategy=COOPERATIVE).start()
    b: Member | None = None
    try:
        await until("a read everything", lambda: set(a.values()) == set(sent))
        group_member = a.consumer._group
        assert group_member is not None
        syncing = asyncio.Event()
        request = group_member._request

        async def held(key: int, message: Any, timeout_ms: int | None = None) -> Any:
            if key == ApiKey.SYNC_GROUP:  # SyncGroup
                syncing.set()
                await asyncio.sleep(0.5)
            return await request(key, message, timeout_ms)

        group_member._request = held  # type: ignore[method-assign]
        b = await Member("b", cluster, group, ledger, [topic],
                         partition_assignment_strategy=COOPERATIVE).start()
        await asyncio.wait_for(syncing.wait(), WAIT_S)
        await a.close()
        got = await b.consumer.committed(partitions)
        assert {tp: v and v[0] for tp, v in got.items()} == {tp: 10 for tp in partitions}, got
    finally:
        await a.close()
        if b is not None:
            await b.close()


def _frozen_member(cluster: Cluster, group: str, topic: str, ledger: Ledger,
                   out: dict[str, Any], commands: Any) -> None:
    """A member with its own event loop in this thread; the test stalls the loop (as if the
    process were stopped) and sends commands: ("poll_until_lost",), ("commit",), ("close",)."""
    async def main() -> None:
        consumer = Consumer(cluster.bootstrap, group_id=group, client_id="frozen",
                            enable_auto_commit=False, **FAST)
        await consumer.start()
        consumer.subscribe([topic], listener=Listener("frozen", ledger))
        out["loop"] = asyncio.get_running_loop()
        out["consumer"] = consumer
        out["read"] = []
        try:
            while True:
                try:
                    command = commands.get_nowait()
                except queue.Empty:
                    command = None
                if command == "close":
                    return
                if command == "commit":
                    try:  # named offsets: a commit() of nothing read yet is a no-op
                        await consumer.commit({tp: 0 for tp in consumer.assignment()})
                        out["commit"] = "ok"
                    except KafkaError as exc:
                        out["commit"] = exc
                out["read"] += await consumer.poll(timeout_ms=50)
                out["generation"] = consumer.group_metadata()["generation"]
                out["owned"] = set(consumer.group_metadata()["assigned"])
        finally:
            await consumer.close()

    asyncio.run(main())


async def test_a_stalled_member_is_expelled_and_rejoins_reporting_lost(cluster: Cluster
                                                                     ) -> None:
    topic, group = "stall", "g-stall"
    cluster.create_topic(topic, partitions=4)
    partitions = {TopicPartition(topic, p) for p in range(4)}
    await produce(cluster, topic, 4, 40)
    ledger = Ledger()
    out: dict[str, Any] = {}
    commands: queue.Queue[str] = queue.Queue()
    thread = threading.Thread(target=_frozen_member,
                              args=(cluster, group, topic, ledger, out, commands), daemon=True)
    thread.start()
    other = await Member("other", cluster, group, ledger, [topic]).start()
    try:
        await until("two members share the partitions", lambda: len(other.owned()) == 2 and
                    len(out.get("owned", ())) == 2)
        frozen_owned = set(out["owned"])
        stalled, resume = threading.Event(), threading.Event()

        def stall() -> None:  # the loop is stopped until the test lets it go (bounded)
            stalled.set()
            resume.wait(WAIT_S)

        stalled_at = time.monotonic()
        out["loop"].call_soon_threadsafe(stall)
        try:
            assert await asyncio.to_thread(stalled.wait, WAIT_S), "the loop never stalled"
            await until("the other member takes every partition",
                        lambda: other.owned() == partitions)
            took = time.monotonic() - stalled_at
            assert took >= SESSION_MS / 1000 * 0.9, \
                f"expelled after {took:.2f}s, before the session"
            # Queued while the loop is still stopped, so it is the first thing the loop does
            # when it runs again: commit in the generation the group has left behind.
            commands.put("commit")
        finally:
            resume.set()
        await until("the stalled member ran its commit", lambda: "commit" in out)
        assert isinstance(out["commit"], CommitFailedError), out["commit"]
        await until("the stalled member reported its partitions lost",
                    lambda: ("lost", frozenset(frozen_owned)) in ledger.of("frozen"))
        await until("it rejoined", lambda: stable([other], partitions - out.get("owned", set()))
                    and len(out.get("owned", ())) == 2)
        assert ledger.of("frozen")[-2:] == [("lost", frozenset(frozen_owned)),
                                            ("assigned", frozenset(out["owned"]))]
        assert not ledger.errors, ledger.errors
    finally:
        commands.put("close")
        await asyncio.to_thread(thread.join, WAIT_S)
        await other.close()
    assert not thread.is_alive()


async def test_max_poll_interval_leaves_the_group_and_poll_rejoins(cluster: Cluster) -> None:
    topic, group = "max-poll", "g-max-poll"
    cluster.create_topic(topic, partitions=4)
    partitions = {TopicPartition(topic, p) for p in range(4)}
    await produce(cluster, topic, 4, 40)
    ledger = Ledger()
    slow = await Member("slow", cluster, group, ledger, [topic], max_poll_interval_ms=1500,
                        enable_auto_commit=False).start()
    busy = await Member("busy", cluster, group, ledger, [topic]).start()
    try:
        await until("two members", lambda: stable([slow, busy], partitions))
        slow_owned = slow.owned()
        await slow.stop_polling()
        paused = time.monotonic()
        await until("busy takes every partition", lambda: busy.owned() == partitions)
        waited = time.monotonic() - paused
        # Heartbeats went on (session 2 s): only the poll interval could make it leave.
        assert waited >= 1.2, waited  # not before max_poll_interval_ms
        assert slow.generation() == -1
        with pytest.raises(CommitFailedError):  # offsets named: commit() of nothing read is a
            await slow.consumer.commit({tp: 1 for tp in slow_owned})  # no-op, as in Java
        assert ("lost", frozenset(slow_owned)) not in ledger.of("slow")  # not before poll()
        slow.polling.set()
        await until("slow rejoined", lambda: stable([slow, busy], partitions))
        lost = ("lost", frozenset(slow_owned))
        # the listener's call comes from the poll that takes the assignment, which may run just
        # after the member's state shows it (seen beside a CPU hog): wait for the call itself
        await until("slow's listener to be told of its new assignment",
                    lambda: lost in ledger.of("slow")
                    and len(ledger.of("slow")) > ledger.of("slow").index(lost) + 1)
        events = ledger.of("slow")
        lost_at = events.index(lost)
        assert events[lost_at + 1][0] == "assigned", events
        assert not ledger.errors, ledger.errors
    finally:
        await slow.close()
        await busy.close()


async def test_a_round_completed_while_not_polling_is_not_taken_after_leaving(
        cluster: Cluster) -> None:
    """A round that completes after poll() returned waits for the next poll() to be taken; if the
    member meanwhile left the group (max_poll_interval_ms), that assignment is stale: the next
    poll() reports what it owned lost and joins again, rather than taking the stale assignment."""
    topic, group = "stale-round", "g-stale-round"
    cluster.create_topic(topic, partitions=4)
    partitions = {TopicPartition(topic, p) for p in range(4)}
    ledger = Ledger()
    settings: dict[str, Any] = {"partition_assignment_strategy": COOPERATIVE}
    a = await Member("a", cluster, group, ledger, [topic], poll_ms=5, max_poll_interval_ms=1500,
                     **settings).start()
    b = await Member("b", cluster, group, ledger, [topic], **settings).start()
    c: Member | None = None
    try:
        await until("two members", lambda: stable([a, b], partitions))
        a_owned = a.owned()
        group_a = a.consumer._group
        assert group_a is not None
        syncing = asyncio.Event()
        request = group_a._request

        async def held(key: int, message: Any, timeout_ms: int | None = None) -> Any:
            # SyncGroup, held back so that a's poll() returns before it is done
            if key == ApiKey.SYNC_GROUP:
                syncing.set()
                await asyncio.sleep(0.3)
            return await request(key, message, timeout_ms)

        group_a._request = held  # type: ignore[method-assign]
        c = await Member("c", cluster, group, ledger, [topic], **settings).start()
        await asyncio.wait_for(syncing.wait(), WAIT_S)
        a.polling.clear()  # a stops polling with the round under way
        await until("a's round completes", lambda: group_a.machine.phase is Phase.STABLE)
        events = len(ledger.of("a"))
        await until("a leaves (max_poll_interval_ms)", lambda: a.generation() == -1)
        await until("b and c take everything", lambda: stable([b, c], partitions))
        a.polling.set()
        await until("a reports", lambda: len(ledger.of("a")) > events)
        assert ledger.of("a")[events] == ("lost", frozenset(a_owned)), ledger.of("a")
        await until("three members", lambda: stable([a, b, c], partitions))
    finally:
        for m in (a, b, c):
            if m is not None:
                await m.close()


async def test_unsubscribe_gives_up_at_once_and_subscribe_rejoins(cluster: Cluster) -> None:
    topic, group = "unsubscribe", "g-unsubscribe"
    cluster.create_topic(topic, partitions=4)
    partitions = {TopicPartition(topic, p) for p in range(4)}
    ledger = Ledger()
    # A session far longer than WAIT_S: b can only take everything within WAIT_S because a
    # left (LeaveGroup), not because its session expired.
    long_session = {"session_timeout_ms": 120_000, "max_poll_interval_ms": 120_000}
    a = await Member("a", cluster, group, ledger, [topic], **long_session).start()
    b = await Member("b", cluster, group, ledger, [topic], **long_session).start()
    try:
        await until("two members", lambda: stable([a, b], partitions))
        a_owned = a.owned()
        await a.stop_polling()
        await a.consumer.unsubscribe()
        assert ledger.of("a")[-1] == ("revoked", frozenset(a_owned))
        assert a.consumer.assignment() == set() and a.consumer.subscription() == set()
        await until("b takes every partition (a left)", lambda: b.owned() == partitions)
        assert await a.consumer.poll(timeout_ms=100) == []
        a.consumer.subscribe([topic])
        a.polling.set()
        await until("a rejoined", lambda: stable([a, b], partitions))
        assert not ledger.errors, ledger.errors
    finally:
        await a.close()
        await b.close()


async def test_static_member_restart_keeps_its_partitions_without_a_rebalance(
        cluster: Cluster) -> None:
    topic, group = "static", "g-static"
    cluster.create_topic(topic, partitions=4)
    partitions = {TopicPartition(topic, p) for p in range(4)}
    first = await produce(cluster, topic, 4, 40)
    ledger = Ledger()
    a = await Member("a", cluster, group, ledger, [topic], group_instance_id="a-1",
                     session_timeout_ms=10_000).start()
    b = await Member("b", cluster, group, ledger, [topic], group_instance_id="b-1",
                     session_timeout_ms=10_000).start()
    try:
        await until("two static members", lambda: stable([a, b], partitions))
        await until("both read the first records",
                    lambda: set(first) == set(a.values() + b.values()))
        generation, a_owned, b_events = a.generation(), a.owned(), len(ledger.of("b"))
        await a.close()  # static: no LeaveGroup; its place is kept for the session
        again = await Member("a-again", cluster, group, ledger, [topic],
                             group_instance_id="a-1", session_timeout_ms=10_000).start()
        await until("the restarted member is assigned", lambda: bool(again.owned()))
        assert again.owned() == a_owned and again.generation() == generation
        assert b.generation() == generation and len(ledger.of("b")) == b_events, ledger.events
        second = await produce(cluster, topic, 4, 40, start=40)
        await until("the second records read", lambda: set(second) <= set(
            again.values() + b.values()))
        read = a.values() + again.values() + b.values()
        assert sorted(read) == sorted(first + second)  # resumed from a's commit on close

        # A second process with the same instance id while the first is alive: one is fenced,
        # and poll() raises FENCED_INSTANCE_ID (again on every later poll).
        twin = await Member("twin", cluster, group, ledger, [topic], group_instance_id="a-1",
                            session_timeout_ms=10_000).start()
        try:
            await until("a member fenced", lambda: again._task is not None and
                        again._task.done() or twin._task is not None and twin._task.done())
            fenced = again if again._task is not None and again._task.done() else twin
            exc = fenced._task.exception() if fenced._task is not None else None
            assert isinstance(exc, KafkaError) and exc.code == ErrorCode.FENCED_INSTANCE_ID, exc
            with pytest.raises(KafkaError) as raised:
                await fenced.consumer.poll(timeout_ms=10)
            assert raised.value.code == ErrorCode.FENCED_INSTANCE_ID
        finally:
            try:
                await twin.close()
            except KafkaError:
                pass
    finally:
        await b.close()
        for m in (a, again):
            try:
                await m.close()
            except KafkaError:
                pass


async def test_commits_carry_leader_epochs_and_fail_after_the_group_moved_on(
        cluster: Cluster) -> None:
    topic, group = "commits", "g-commits"
    cluster.create_topic(topic, partitions=2, replication_factor=2)
    sent = await produce(cluster, topic, 2, 20)
    epochs = {p: e for p, (_, e) in cluster.leaders(topic).items()}
    async with Consumer(cluster.bootstrap, group_id=group, enable_auto_commit=False,
                        **FAST) as c:
        c.subscribe([topic])
        got: list[ConsumerRecord] = []
        deadline = time.monotonic() + WAIT_S
        while len(got) < len(sent) and time.monotonic() < deadline:
            got += await c.poll(timeout_ms=100)
        assert sorted(r.value or b"" for r in got) == sorted(sent)
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        await c.commit()
        assert await c.committed([tp0, tp1]) == {tp0: (10, epochs[0]), tp1: (10, epochs[1])}
        await c.commit({tp0: (7, 3), tp1: 4})
        assert await c.committed([tp0, tp1, TopicPartition(topic, 9)]) == {
            tp0: (7, 3), tp1: (4, -1), TopicPartition(topic, 9): None}
        node = call("127.0.0.1", cluster.any_broker().port, 10, FindCoordinatorRequest(
            key_type=0, coordinator_keys=[group])).coordinators[0].node_id
        answer = cluster.brokers[node].call(ApiKey.OFFSET_FETCH, OffsetFetchRequest(
            group_id=group, topics=[OffsetFetchRequestTopic(name=topic,
                                                            partition_indexes=[0, 1])]),
            version=7)
        assert {(p.partition_index, p.committed_offset, p.committed_leader_epoch)
                for t in answer.topics for p in t.partitions} == {(0, 7, 3), (1, 4, -1)}


async def test_auto_commit_commits_only_what_poll_returned_before(cluster: Cluster) -> None:
    topic, group = "auto-commit", "g-auto-commit"
    cluster.create_topic(topic, partitions=1)
    tp = TopicPartition(topic, 0)
    await produce(cluster, topic, 1, 50)
    async with Consumer(cluster.bootstrap, group_id=group, auto_commit_interval_ms=100,
                        max_poll_records=5, **FAST) as c:
        c.subscribe([topic])
        first: list[ConsumerRecord] = []
        deadline = time.monotonic() + WAIT_S
        while not first and time.monotonic() < deadline:
            first = await c.poll(timeout_ms=100)
        assert [r.offset for r in first] == [0, 1, 2, 3, 4]
        await asyncio.sleep(0.2)
        second = await c.poll(timeout_ms=100)  # the auto-commit due now: what first returned
        assert [r.offset for r in second] == [5, 6, 7, 8, 9]
        await until("the auto-commit", lambda: c._group is not None and
                    c._group._auto_commit is not None and c._group._auto_commit.done())
        assert (await c.committed([tp]))[tp] == (5, first[-1].leader_epoch)
        await asyncio.sleep(0.2)
        await c.poll(timeout_ms=0)
        await until("the next auto-commit", lambda: c._group is not None and
                    c._group._auto_commit is not None and c._group._auto_commit.done())
        assert (await c.committed([tp]))[tp] == (10, second[-1].leader_epoch)


async def test_a_crashed_member_is_resumed_at_its_first_unprocessed_record(
        cluster: Cluster) -> None:
    """At-least-once through auto-commit: a member stalls for good right after poll() handed it
    records; the member taking its partition starts at or before the first of them."""
    topic, group = "auto-crash", "g-auto-crash"
    cluster.create_topic(topic, partitions=1)
    await produce(cluster, topic, 1, 50)
    ledger = Ledger()
    out: dict[str, Any] = {}
    commands: queue.Queue[str] = queue.Queue()

    def crashing() -> None:
        async def main() -> None:
            consumer = Consumer(cluster.bootstrap, group_id=group, auto_commit_interval_ms=50,
                                max_poll_records=3, **FAST)
            await consumer.start()
            consumer.subscribe([topic], listener=Listener("crash", ledger))
            out["handed"] = []
            while len(out["handed"]) < 12:
                records = await consumer.poll(timeout_ms=100)
                out["handed"] += records
                await asyncio.sleep(0.06)  # the next poll's auto-commit is due
            out["loop"] = asyncio.get_running_loop()
            while commands.empty():  # "processing" the last records when the process dies
                time.sleep(0.05)  # noqa: ASYNC251 (the whole loop stalls, as a hung process)
            await consumer.close()
        asyncio.run(main())

    thread = threading.Thread(target=crashing, daemon=True)
    thread.start()
    try:
        await until("the member handed records", lambda: "loop" in out)
        first_unprocessed = out["handed"][-3].offset
        successor = await Member("successor", cluster, group, ledger, [topic]).start()
        try:
            await until("the successor reads", lambda: bool(successor.records),
                        timeout_s=WAIT_S)
            start = successor.records[0].offset
            assert 0 < start <= first_unprocessed, (start, first_unprocessed)
        finally:
            await successor.close()
    finally:
        commands.put("go")
        await asyncio.to_thread(thread.join, WAIT_S)


async def test_pattern_subscription_picks_up_a_new_topic(cluster: Cluster) -> None:
    group = "g-pattern"
    cluster.create_topic("pat-one", partitions=2)
    ledger = Ledger()
    members = [await Member(name, cluster, group, ledger, pattern=r"pat-.*",
                            metadata_max_age_ms=300).start() for name in ("p1", "p2")]
    try:
        one = {TopicPartition("pat-one", p) for p in range(2)}
        await until("pat-one shared", lambda: stable(members, one))
        generation = members[0].generation()
        cluster.create_topic("pat-two", partitions=2)
        cluster.create_topic("other-two", partitions=1)
        both = one | {TopicPartition("pat-two", p) for p in range(2)}
        await until("pat-two picked up", lambda: stable(members, both))
        assert members[0].generation() > generation
        sent = await produce(cluster, "pat-two", 2, 10)
        await until("pat-two read", lambda: set(sent) <= {v for m in members
                                                          for v in m.values()})
        assert all(m.consumer.subscription() == {"pat-one", "pat-two"} for m in members)
    finally:
        for m in members:
            await m.close()


async def test_a_long_poll_is_polling(cluster: Cluster) -> None:
    """An application waiting in poll(timeout_ms) longer than max_poll_interval_ms is polling,
    as in Java's poll loop: it keeps its place, whether it has partitions (an idle topic) or
    none (more members than partitions)."""
    topic, group = "long-poll", "g-long-poll"
    cluster.create_topic(topic, partitions=1)
    ledger = Ledger()
    settings = {**FAST, "max_poll_interval_ms": 1000}
    async with Consumer(cluster.bootstrap, group_id=group, **settings) as c1, \
            Consumer(cluster.bootstrap, group_id=group, **settings) as c2:
        c1.subscribe([topic], listener=Listener("c1", ledger))
        c2.subscribe([topic], listener=Listener("c2", ledger))
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not (
                c1.group_metadata()["generation"] == c2.group_metadata()["generation"] > 0
                and len(c1.assignment()) + len(c2.assignment()) == 1):
            await asyncio.gather(c1.poll(timeout_ms=50), c2.poll(timeout_ms=50))
        generation = c1.group_metadata()["generation"]
        events = len(ledger.events)
        assert await c1.poll(timeout_ms=200) == await c2.poll(timeout_ms=200) == []
        await asyncio.gather(c1.poll(timeout_ms=2500), c2.poll(timeout_ms=2500))  # idle topic
        assert c1.group_metadata()["generation"] == c2.group_metadata()["generation"] == \
            generation
        assert len(ledger.events) == events, ledger.events


async def test_the_coordinator_killed_members_go_on_and_commit(cluster: Cluster) -> None:
    """SIGKILL the group's coordinator: the members find the new one, keep their commits going
    (a commit() waits for the move rather than failing), and nothing is lost. Last in the module:
    it restarts a broker."""
    topic, group = "coord-kill", "g-coord-kill"
    cluster.create_topic(topic, partitions=4, replication_factor=2)
    partitions = {TopicPartition(topic, p) for p in range(4)}
    ledger = Ledger()
    members = [await Member(name, cluster, group, ledger, [topic], auto_commit_interval_ms=200,
                            request_timeout_ms=10_000, fetch_max_wait_ms=200).start()
               for name in ("k1", "k2")]
    sent = await produce(cluster, topic, 4, 40)
    node = -1
    try:
        await until("two members", lambda: stable(members, partitions))
        await until("the first records read", lambda: set(sent) <= {
            v for m in members for v in m.values()})
        node = call("127.0.0.1", cluster.any_broker().port, 10, FindCoordinatorRequest(
            key_type=0, coordinator_keys=[group])).coordinators[0].node_id
        await asyncio.to_thread(cluster.brokers[node].stop, 9)  # SIGKILL
        for m in members:  # at once: the commit waits for the new coordinator
            await m.consumer.commit()
        more = await produce(cluster, topic, 4, 40, start=40)
        await until("the records after the kill read", lambda: set(more) <= {
            v for m in members for v in m.values()})
        for m in members:
            await m.consumer.commit()  # through the new coordinator
        ends = {tp: 20 for tp in partitions}
        for m in members:
            got = await m.consumer.committed(partitions)
            assert {tp: got[tp] and got[tp][0] for tp in m.owned()} == {  # type: ignore[index]
                tp: ends[tp] for tp in m.owned()}, got
    finally:
        for m in members:
            await m.close()
        if node > 0:
            broker = cluster.brokers[node]
            await asyncio.to_thread(broker.start)
            await asyncio.to_thread(broker.wait_started)
    read = [v for m in members for v in m.values()]
    assert sorted(set(read)) == sorted(sent + more)


async def test_a_listener_that_raises_does_not_stall_the_rebalance(cluster: Cluster) -> None:
    """As in Java: the round completes (the group is not held up by one member's bug), and the
    member's poll() raises the listener's error once, afterwards."""
    topic, group = "listener-raises", "g-listener-raises"
    cluster.create_topic(topic, partitions=4)
    partitions = {TopicPartition(topic, p) for p in range(4)}

    class Raising(RebalanceListener):
        revoked = 0

        def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
            Raising.revoked += 1
            raise RuntimeError("a bug in on_partitions_revoked")

    a = await Member("a", cluster, group, Ledger(), [topic], partition_assignment_strategy=EAGER
                     ).start()
    a.consumer.subscribe([topic], listener=Raising())
    b: Member | None = None
    raised: list[BaseException] = []
    try:
        await until("a alone", lambda: a.owned() == partitions)
        a._stop = True  # this test polls a itself, to see what poll() raises
        await a.polling.wait()
        await asyncio.sleep(0.2)
        b = await Member("b", cluster, group, Ledger(), [topic],
                         partition_assignment_strategy=EAGER).start()
        deadline = time.monotonic() + WAIT_S
        while not (stable([a, b], partitions) and raised) and time.monotonic() < deadline:
            try:
                await a.consumer.poll(timeout_ms=50)
            except RuntimeError as exc:
                raised.append(exc)
        assert stable([a, b], partitions), "the round completed despite the listener"
        assert Raising.revoked == 1 and [str(e) for e in raised] == ["a bug in "
                                                                      "on_partitions_revoked"]
        for _ in range(5):
            await a.consumer.poll(timeout_ms=20)  # raised once, not on every poll
    finally:
        if b is not None:
            await b.close()
        await a.consumer.close()


async def test_assign_with_a_group_id_resumes_from_committed_offsets_and_auto_commits(
        cluster: Cluster) -> None:
    """assign() with a group_id, as Java's consumer: positions start from the group's committed
    offsets (auto_offset_reset where none), auto-commit and close commit (no generation)."""
    topic, group = "manual-assign", "g-manual-assign"
    cluster.create_topic(topic, partitions=2)
    tps = [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    await produce(cluster, topic, 2, 20)
    settings = {**FAST, "auto_commit_interval_ms": 100}
    async with Consumer(cluster.bootstrap, group_id=group, **settings) as first:
        first.assign(tps)
        read: list[ConsumerRecord] = []
        await until_read(first, read, 20)
        epochs = {r.partition: r.leader_epoch for r in read}
    async with Consumer(cluster.bootstrap, group_id=group, **settings) as second:
        assert await second.committed(tps) == {tp: (10, epochs[tp.partition]) for tp in tps}, \
            "close committed the positions, with their epochs"
        new = await produce(cluster, topic, 2, 4, start=20)
        second.assign(tps)
        assert await second.position(tps[0]) == 10, "from the committed offset, not earliest"
        read = []
        await until_read(second, read, 4)
        assert sorted(r.value or b"" for r in read) == sorted(new)
        deadline = time.monotonic() + WAIT_S
        while await second.committed(tps) != {tp: (12, epochs[tp.partition]) for tp in tps}:
            assert time.monotonic() < deadline, "auto-commit did not commit what was read"
            await second.poll(timeout_ms=50)


async def until_read(consumer: Consumer, read: list[ConsumerRecord], count: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while len(read) < count:
        assert time.monotonic() < deadline, f"read {len(read)} of {count} records"
        read += await consumer.poll(timeout_ms=100)
    assert len(read) == count, f"read {len(read)} records, expected {count}"


async def test_closing_during_a_parked_join_leaves_at_once(cluster: Cluster) -> None:
    """A JoinGroup waits at the coordinator for the whole rebalance, and a broker answers one
    connection in order: a LeaveGroup sent behind it would wait as long. close() gives that
    connection up and leaves on a new one."""
    topic, group = "parked-join", "g-parked-join"
    cluster.create_topic(topic, partitions=2)
    # A rebalance that would park b's JoinGroup far longer than WAIT_S
    slow = {"session_timeout_ms": 120_000, "max_poll_interval_ms": 120_000}
    a = await Member("a", cluster, group, Ledger(), [topic], **slow).start()
    b = Consumer(cluster.bootstrap, group_id=group, client_id="b", **{**FAST, **slow})
    try:
        await until("a alone", lambda: a.owned() == {TopicPartition(topic, 0),
                                                      TopicPartition(topic, 1)})
        await a.stop_polling()  # a will not rejoin: the rebalance b starts waits for 120 s
        await b.start()
        b.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while not (b._group is not None and b._group.machine.phase is Phase.JOINING and
                   b._group.machine.member_id):  # its second JoinGroup, which parks
            assert time.monotonic() < deadline, "b's JoinGroup never went out"
            await b.poll(timeout_ms=50)
        await asyncio.sleep(0.3)  # parked at the coordinator
        # Behind the parked JoinGroup, close would wait the whole 120 s rebalance
        await asyncio.wait_for(b.close(), WAIT_S)
    finally:
        await b.close()
        await a.close()


async def test_heartbeats_keep_a_busy_member_in_the_group(cluster: Cluster) -> None:
    """An application busy for three session timeouts between polls (well within
    max_poll_interval_ms) keeps its partitions: heartbeats go on without poll()."""
    topic, group = "busy-app", "g-busy-app"
    cluster.create_topic(topic, partitions=4)
    partitions = {TopicPartition(topic, p) for p in range(4)}
    ledger = Ledger()
    busy = await Member("busy", cluster, group, ledger, [topic],
                        max_poll_interval_ms=20_000).start()
    other = await Member("other", cluster, group, ledger, [topic]).start()
    try:
        await until("two members", lambda: stable([busy, other], partitions))
        generation, events = busy.generation(), len(ledger.events)
        await busy.stop_polling()
        await asyncio.sleep(3 * SESSION_MS / 1000)
        assert busy.generation() == other.generation() == generation
        assert len(ledger.events) == events, ledger.events[events:]  # nobody was told a thing
        busy.polling.set()
        await asyncio.sleep(0.3)
        assert stable([busy, other], partitions) and busy.generation() == generation
    finally:
        await busy.close()
        await other.close()


async def test_cooperative_members_committing_after_every_poll_settle(cluster: Cluster) -> None:
    """Cooperative members read (and commit) during a round. A commit landing between a
    member's JoinGroup and SyncGroup answers is refused (CompletingRebalance); that refusal once
    asked for another round, whose own window caught the next commit: the group rebalanced for
    ever (found by tests/chaos/test_group_kill.py). Now the commit waits for the sync."""
    topic, group = "coop-commits", "g-coop-commits"
    cluster.create_topic(topic, partitions=4)
    await produce(cluster, topic, 4, 2000)
    stop = asyncio.Event()
    generations: dict[str, int] = {}
    failures: list[str] = []

    async def member(name: str) -> None:
        async with Consumer(cluster.bootstrap, group_id=group, client_id=name,
                            partition_assignment_strategy=COOPERATIVE,
                            enable_auto_commit=False, **FAST) as c:
            c.subscribe([topic])
            while not stop.is_set():
                await c.poll(timeout_ms=100)
                try:
                    await c.commit()
                except CommitFailedError as exc:
                    failures.append(str(exc))
                generations[name] = int(c.group_metadata()["generation"])

    a = asyncio.get_running_loop().create_task(member("a"))
    try:
        await until("a alone", lambda: generations.get("a", -1) > 0)
        b = asyncio.get_running_loop().create_task(member("b"))
        try:
            await until("both in one generation", lambda: len(set(generations.values())) == 1
                        and len(generations) == 2 and -1 not in generations.values())
            await asyncio.sleep(1.0)  # the cooperative second round
            settled = dict(generations)
            await asyncio.sleep(3.0)
            assert generations == settled, f"still rebalancing: {settled} -> {generations}"
        finally:
            stop.set()
            await b
    finally:
        stop.set()
        await a
