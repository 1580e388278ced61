"""A Consumer's membership in a consumer group: the asyncio driver of `group_member.MemberMachine`.

    consumer = Consumer(bootstrap, group_id="billing", enable_auto_commit=False)
    consumer.subscribe(["orders"], listener=MyListener())
    records = await consumer.poll(timeout_ms=1000)   # joins the group inside poll()
    await consumer.commit()                           # positions with their leader epochs

Theory of operation
-------------------
Every rule of membership (phases, rounds, heartbeats, fencing, retries, timeouts) is the
machine's (client/group_member.py); this module only moves bytes and time for it:
- requests the machine asks for (`Send`, `FindCoordinator`) each run as a task, whose answer or
  failure goes back to the machine with the machine's clock, `time.monotonic()` in ms;
- a ticker task calls `tick()` at the machine's `next_deadline_ms()` (heartbeats, backoffs, the
  session and max_poll_interval_ms watchdogs, commit deadlines);
- `poll_hook()`, called by the consumer's poll(), feeds `poll()` and carries out what it answers
  inside poll(): the listener's callbacks, the consumer's new assignment (starting from committed
  offsets), commits before a revoke; it waits for a round under way until poll()'s deadline.
  A listener that raises does not stop the round (one member must not hold up its group): poll()
  raises the error once the round is over, as Java does.

As in Kafka's Java consumer, rounds run inside poll(): a member that is not polling does not
join, and an eager revoke (with its auto-commit) never gives away records the application was
handed but has not processed. Heartbeats do not depend on poll(); the max_poll_interval_ms
watchdog makes a member that stopped polling leave.

Committed offsets carry leader epochs (KIP-320): the consumer seeks to (offset, epoch) and
validates the position against the leader's log before fetching, so a log truncated below a
committed offset is detected when the group resumes.

The coordinator has its own connection (JoinGroup parks there for a whole rebalance, and must not
hold up fetches to the same broker); FindCoordinator and the leader's Metadata go on an idle
connection for the same reason. The machine's `DropCoordinator` closes it (a LeaveGroup sent
behind a parked JoinGroup would wait for the whole rebalance).

The consumer is reached only through `GroupConsumer`, the part of it the group may use.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from epochlog.protocol.errors import DecodeError
from epochlog.protocol.registry import APIS

from .connection import Connection, NoCommonVersion
from .errors import KafkaError, KafkaTimeoutError
from .group_member import (
    Action,
    Assigned,
    CheckMetadata,
    CommitConsumed,
    CommitFailedError,
    Done,
    DropCoordinator,
    FindCoordinator,
    Lost,
    MemberMachine,
    MemberSettings,
    NeedPartitionCounts,
    Phase,
    Revoked,
    Send,
    names,
)
from .group_offsets import Committed
from .types import TopicPartition

if TYPE_CHECKING:
    from .cluster import ClusterClient

__all__ = ["CommitFailedError", "GroupConsumer", "GroupMember", "RebalanceListener"]

log = logging.getLogger("epochlog.group")

NETWORK_ERRORS = (OSError, ConnectionError, asyncio.TimeoutError, NoCommonVersion, DecodeError,
                  KafkaError)
TICK_MS_MIN = 1  # the ticker never spins faster than this, whatever the machine says


class RebalanceListener:
    """Told of partitions given and taken, inside poll(). Subclass and override; each method may
    be a coroutine. on_partitions_revoked runs before the partitions are given up (commit here,
    if you commit by hand); on_partitions_lost when they were already taken (the member's
    generation expired): committing them is no longer possible. Java's default for lost is
    revoked; so is ours."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        return None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        return self.on_partitions_revoked(lost)


class GroupConsumer(Protocol):
    """What the group may use of its consumer."""

    def group_assign(self, partitions: set[TopicPartition]) -> None:
        """The group's assignment: partitions kept keep their position, new ones wait for
        start_positions()."""

    def assignment(self) -> set[TopicPartition]: ...

    def consumed(self) -> dict[TopicPartition, tuple[int, int]]: ...

    def next_offsets(self) -> dict[TopicPartition, tuple[int, int]]: ...

    def awaiting_committed(self) -> set[TopicPartition]: ...

    def start_positions(self, committed: Mapping[TopicPartition, tuple[int, int] | None]
                        ) -> None: ...

    def wake(self) -> None: ...


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class GroupMember:
    """The group half of a Consumer: the consumer calls `poll_hook()` at the start of each
    poll(), and `commit()`, `committed()`, `close()` as the application asks."""

    def __init__(self, cluster: ClusterClient, consumer: GroupConsumer, *, group_id: str,
                 group_instance_id: str | None, session_timeout_ms: int,
                 heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 partition_assignment_strategy: Iterable[str], enable_auto_commit: bool,
                 auto_commit_interval_ms: int, request_timeout_ms: int, retry_backoff_ms: int,
                 metadata_max_age_ms: int, client_rack: str | None) -> None:
        self.settings = MemberSettings(
            group_id=group_id, group_instance_id=group_instance_id,
            session_timeout_ms=session_timeout_ms, heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            partition_assignment_strategy=tuple(partition_assignment_strategy),
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
            request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
            metadata_max_age_ms=metadata_max_age_ms, client_rack=client_rack)
        self.machine = MemberMachine(self.settings, now_ms=now_ms())
        self.group_id = group_id
        self.cluster = cluster
        self.consumer = consumer
        self.listener = RebalanceListener()
        self._coordinator: Connection | None = None
        self._coordinator_addr: tuple[int, str, int] | None = None  # node, host, port
        self._done: dict[int, asyncio.Future[Done]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._ticker: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()  # the machine's next deadline may have changed
        self._changed = asyncio.Event()  # an answer reached the machine
        self._auto_commit: asyncio.Task[None] | None = None
        self._fetching: asyncio.Task[Committed] | None = None  # committed offsets, for poll()
        self._poll_deadline = 0.0  # the loop time the poll() under way returns at
        self._given_up_on = ""  # what the last cancelled wait was waiting for
        self._listener_error: BaseException | None = None
        self._closed = False

    # ------------------------------------------------------------------ what it is
    @property
    def topics(self) -> set[str]:
        return set(self.machine.topics)

    @property
    def manual(self) -> bool:
        return self.machine.manual

    def waiting_for(self) -> str:
        return self.machine.waiting_for()

    def metrics(self) -> dict[str, Any]:
        m = self.machine
        return {"group_id": self.group_id, "member_id": m.member_id,
                "group_instance_id": self.settings.group_instance_id,
                "generation": m.generation, "protocol": m.protocol,
                "leader": m.leading, "leader_id": m.leader_id, "phase": m.phase.value,
                "coordinator": -1 if m.coordinator is None else m.coordinator,
                "rebalances": m.stats.rebalances, "assigned": sorted(m.owned),
                "waiting_for": m.waiting_for(), "unreachable_ms": m.unreachable_ms(now_ms())}

    # ------------------------------------------------------------------ subscription
    def subscribe(self, topics: Iterable[str] | None, pattern: str | re.Pattern[str] | None,
                  listener: RebalanceListener | None) -> None:
        known = {t for t, _ in self.cluster.partitions}
        self.machine.subscribe(topics, pattern, known)
        if listener is not None:
            self.listener = listener
        self.consumer.wake()

    async def unsubscribe(self) -> None:
        await self._carry_out(self.machine.unsubscribe(now_ms()))
        self.consumer.group_assign(set())
        await self._wait_leave()

    # ------------------------------------------------------------------ poll and close
    async def poll_hook(self, deadline: float) -> None:
        """Called by poll() (deadline: a loop time): the machine's poll, carried out here, and
        a wait for the round under way until deadline. Raises what the member cannot recover
        from, and a listener's error once its round is over."""
        self._ensure_ticker()
        self._poll_deadline = deadline
        await self._carry_out(self.machine.poll(now_ms()))
        await self._positions_from_committed(deadline)
        if self.machine.manual:
            return
        if self.machine.round_under_way:
            await self._wait_until(lambda: not self.machine.round_under_way, deadline)
            if not self.machine.round_under_way:
                await self._carry_out(self.machine.poll(now_ms()))
        error, self._listener_error = self._listener_error, None
        if error is not None:
            raise error

    def _forget_lookup(self) -> None:
        """Partitions given up: a committed-offset lookup under way is stale (if they come
        back, another member may have committed since), so it is dropped."""
        task, self._fetching = self._fetching, None
        if task is not None:
            task.cancel()

    async def _positions_from_committed(self, deadline: float) -> None:
        """Partitions waiting for their committed offsets: one lookup at a time, as a task a
        poll() waits on until its deadline and the next poll() again (the lookup may take up
        to request_timeout_ms; a poll must not). A failed lookup is tried again by the next
        poll(); with assign() (no group to rejoin), poll() raises its error."""
        task = self._fetching
        if task is None:
            waiting = self.consumer.awaiting_committed()
            if not waiting:
                return
            task = self._fetching = asyncio.get_running_loop().create_task(
                self.committed(waiting))
        loop = asyncio.get_running_loop()
        if not task.done():
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await asyncio.wait({task})
            except TimeoutError:
                return
        if self._fetching is task:
            self._fetching = None
        if task.cancelled():
            return  # dropped meanwhile (its partitions were given up)
        error = task.exception()
        if error is None:
            self.consumer.start_positions(task.result())
        elif self.machine.manual or not isinstance(error, KafkaError):
            raise error
        else:
            log.warning("group %s: committed offsets unknown (%s); poll() asks again",
                        self.group_id, error)

    async def start_from_committed(self) -> None:
        """assign()ed partitions with no position yet: their committed (offset, epoch), else
        auto_offset_reset (Java's consumer does the same with a group.id)."""
        waiting = self.consumer.awaiting_committed()
        if waiting:
            self.consumer.start_positions(await self.committed(waiting))

    async def close(self, timeout_ms: int | None = None) -> None:
        """Commit (with auto-commit), tell the listener, leave the group (dynamic members), and
        close the coordinator's connection. Each step is bounded by request_timeout_ms, and the
        whole by timeout_ms if given."""
        if self._closed:
            return
        self._closed = True
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                await self._close_steps()
        except TimeoutError:
            log.warning("group %s: close gave up after %s ms waiting for %s", self.group_id,
                        timeout_ms, self._given_up_on or self.machine.waiting_for())
        finally:
            self.machine.closed()
            await self._stop_tasks()
            if self._coordinator is not None:
                await self._coordinator.close()
                self._coordinator = None

    async def _close_steps(self) -> None:
        loop = asyncio.get_running_loop()
        auto = self._auto_commit
        if auto is not None and not auto.done():
            # An auto-commit of older positions must not land after the commit on close
            auto.cancel()
            await asyncio.gather(auto, return_exceptions=True)
        if self.machine.syncing:
            # Our generation is already the new one, whose commits the coordinator refuses
            # until the SyncGroup completes: let it, so that the commit on close goes through.
            await self._wait_until(lambda: not self.machine.syncing,
                                   loop.time() + self.settings.request_timeout_ms / 1000)
        await self._carry_out(self.machine.close(now_ms()), closing=True)
        self._apply(self.machine.leave(now_ms(), "the consumer is closing"))
        await self._wait_leave()

    async def _wait_leave(self) -> None:
        rid = self.machine.leave_rid
        if rid < 0:
            return
        try:
            done = await self._result(rid)
            if done.error is not None:
                raise done.error
            log.info("group %s: left the group", self.group_id)
        except KafkaError as exc:
            log.info("group %s: LeaveGroup failed (%s); the session timeout will expel us",
                     self.group_id, exc)

    async def _stop_tasks(self) -> None:
        tasks = [t for t in (self._ticker, self._auto_commit, self._fetching, *self._tasks)
                 if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        for fut in self._done.values():
            if not fut.done():
                fut.cancel()
        self._done.clear()

    # ------------------------------------------------------------------ offsets
    async def commit(self, offsets: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """Commit (offset, leader epoch) per partition for this member's generation. Retries
        coordinator moves and loads up to request_timeout_ms; CommitFailedError if the group
        rebalanced meanwhile."""
        if not offsets:
            return
        if self.machine.syncing:
            # Between our JoinGroup's answer and our SyncGroup's the group refuses commits.
            # Cooperative members keep reading then, so wait for the sync.
            loop = asyncio.get_running_loop()
            await self._wait_until(lambda: not self.machine.syncing,
                                   loop.time() + self.settings.request_timeout_ms / 1000)
            if self.machine.syncing:
                raise CommitFailedError(f"group {self.group_id}: a rebalance is completing; "
                                        "poll() and commit again")
        rid, actions = self.machine.commit(now_ms(), offsets)
        self._apply(actions)
        done = await self._result(rid)
        if done.error is not None:
            raise done.error
        log.debug("group %s: committed %s", self.group_id, offsets)

    async def committed(self, partitions: Iterable[TopicPartition]) -> Committed:
        """(offset, leader epoch) committed per partition, None where nothing is committed."""
        wanted = set(partitions)
        if not wanted:
            return {}
        rid, actions = self.machine.fetch(now_ms(), wanted)
        self._apply(actions)
        done = await self._result(rid)
        if done.error is not None:
            raise done.error
        result: Committed = done.result
        return result

    async def _result(self, rid: int) -> Done:
        """The Done of a request: the machine gives up at its deadline; this bound only guards
        against a driver bug (a request whose answer never reached the machine)."""
        fut = self._done.get(rid)
        if fut is None:
            fut = self._done[rid] = asyncio.get_running_loop().create_future()
        self._ensure_ticker()
        bound_s = 2 * self.settings.request_timeout_ms / 1000 + 1
        try:
            async with asyncio.timeout(bound_s):
                return await fut
        except asyncio.CancelledError:
            self._given_up_on = self.machine.waiting_for()  # (for close's message)
            raise
        except TimeoutError:
            raise KafkaTimeoutError(f"group {self.group_id}: no answer within {bound_s:.0f} s; "
                                    f"waiting for {self.machine.waiting_for()}") from None
        finally:
            self._done.pop(rid, None)
            self.machine.cancel(rid)  # (given up or cancelled: never sent again)

    # ------------------------------------------------------------------ carrying out actions
    async def _carry_out(self, actions: list[Action], closing: bool = False) -> None:
        """Actions of poll(), close() and unsubscribe(), in order, inside the caller."""
        self._log_notes()
        for action in actions:
            match action:
                case CommitConsumed(partitions=parts, why=why):
                    await self._commit_consumed(parts, why, closing)
                case Revoked(partitions=parts):
                    await self._call_listener("on_partitions_revoked", set(parts))
                    self._forget_lookup()
                    self.consumer.group_assign(self.consumer.assignment() - parts)
                case Lost(partitions=parts):
                    log.info("group %s: partitions lost with the generation: %s",
                             self.group_id, names(parts))
                    self._forget_lookup()
                    self.consumer.group_assign(set())
                    await self._call_listener("on_partitions_lost", set(parts))
                case Assigned(partitions=parts, added=added):
                    await self._assigned(parts, added)
                case CheckMetadata():
                    await self._check_metadata(action)
                case _:
                    self._apply([action])

    async def _assigned(self, partitions: frozenset[TopicPartition],
                        added: frozenset[TopicPartition]) -> None:
        log.info("group %s: generation %d (%s%s): assigned %s", self.group_id,
                 self.machine.generation, self.machine.protocol,
                 ", leader" if self.machine.leading else "", names(partitions))
        # New partitions wait for their committed offsets (never auto_offset_reset for want of
        # an answer: a new owner starting before the old one's commit would commit offsets
        # back); if the lookup fails, the next poll() asks again. The listener hears first, as
        # in Java (a seek there wins over the committed offset).
        self.consumer.group_assign(set(partitions))
        await self._call_listener("on_partitions_assigned", set(added))
        await self._positions_from_committed(self._poll_deadline)

    async def _commit_consumed(self, partitions: frozenset[TopicPartition] | None, why: str,
                               closing: bool) -> None:
        offsets = self.consumer.next_offsets() if closing else self.consumer.consumed()
        if partitions is not None:
            offsets = {tp: v for tp, v in offsets.items() if tp in partitions}
        if not offsets:
            return
        if why == "auto-commit" and not closing:
            if self._auto_commit is None or self._auto_commit.done():
                self._auto_commit = asyncio.get_running_loop().create_task(
                    self._commit_quietly(offsets, why))
            return
        await self._commit_quietly(offsets, why)

    async def _commit_quietly(self, offsets: Mapping[TopicPartition, tuple[int, int]],
                              why: str) -> None:
        try:
            await self.commit(offsets)
        except KafkaError as exc:
            log.warning("group %s: commit %s failed: %s", self.group_id, why, exc)

    async def _call_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        """The listener's callback. What it raises does not stop the rebalance (a member stuck
        half way would hold up the whole group): poll() raises it afterwards."""
        try:
            result = getattr(self.listener, name)(partitions)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            log.error("group %s: the rebalance listener's %s raised %r", self.group_id, name, exc)
            if self._listener_error is None:
                self._listener_error = exc

    async def _check_metadata(self, action: CheckMetadata) -> None:
        topics: set[str] | None = None
        counts: dict[str, int] | None = None
        try:
            if action.pattern:
                await self.cluster.refresh(None)
                topics = {t for t, _ in self.cluster.partitions}
            if action.group_topics:
                counts = await self._partition_counts_of(action.group_topics)
        except NETWORK_ERRORS as exc:
            log.debug("group %s: metadata check failed: %r", self.group_id, exc)
        self.machine.metadata_checked(now_ms(), topics, counts)

    async def _partition_counts_of(self, topics: Iterable[str]) -> dict[str, int]:
        wanted = sorted(topics)
        if not wanted:
            return {}
        await self.cluster.refresh(wanted)
        counts = {}
        for topic in wanted:
            views = self.cluster.partitions_of(topic)
            if views and self.cluster.topic_errors.get(topic, 0) == 0:
                counts[topic] = len(views)
        return counts

    # ------------------------------------------------------------------ the wire
    def _apply(self, actions: list[Action]) -> None:
        """Actions that may come from any task: requests, answers to waiters, a dropped
        coordinator. (The machine never answers a wire event with a listener callback.)"""
        for action in actions:
            match action:
                case Send():
                    self._spawn(self._send(action))
                case FindCoordinator(rid=rid):
                    self._spawn(self._find(rid))
                case NeedPartitionCounts(rid=rid, topics=topics):
                    self._spawn(self._counts(rid, topics))
                case DropCoordinator(why=why):
                    self._drop_coordinator(why)
                case Done(rid=rid):
                    fut = self._done.get(rid)
                    if fut is None:
                        fut = self._done[rid] = asyncio.get_running_loop().create_future()
                    if not fut.done():
                        fut.set_result(action)
                case _:
                    raise AssertionError(f"{action} outside poll(): a machine bug")
        self._log_notes()
        self._wake.set()
        self._changed.set()
        if self.machine.rejoin_reason is not None or self.machine.fatal is not None or \
                self.machine.phase is Phase.UNJOINED:
            self.consumer.wake()  # a poll() waiting for records goes round to rejoin

    def _log_notes(self) -> None:
        for note in self.machine.take_notes():
            log.info("group %s: %s", self.group_id, note)

    def _spawn(self, coro: Any) -> None:
        if self._closed and self.machine.phase is Phase.CLOSED:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, send: Send) -> None:
        try:
            if self._coordinator_addr is None or self._coordinator_addr[0] != send.node:
                raise ConnectionError(f"the coordinator is no longer broker {send.node}")
            answer = await self._request(send.api, send.request, send.timeout_ms)
        except NETWORK_ERRORS as exc:
            self._apply(self.machine.on_failure(now_ms(), send.rid, repr(exc), send.attempt))
            return
        self._apply(self.machine.on_response(now_ms(), send.rid, answer, send.attempt))

    async def _request(self, key: int, message: Any, timeout_ms: int | None = None) -> Any:
        """One request on the coordinator's connection (tests wrap this to delay an API)."""
        conn = await self._coordinator_conn()
        api = APIS[key]
        return await conn.request(api, conn.version_for(api), message, timeout_ms=timeout_ms)

    async def _coordinator_conn(self) -> Connection:
        conn = self._coordinator
        if conn is not None and not conn.closed:
            return conn
        if self._coordinator_addr is None or self.machine.coordinator is None:
            raise ConnectionError("the coordinator is not known")
        node, host, port = self._coordinator_addr
        conn = await Connection(host, port, client_id=self.cluster.client_id,
                                request_timeout_ms=self.settings.request_timeout_ms,
                                ssl_context=self.cluster.ssl_context).connect()
        if self._coordinator is not None or self._closed and \
                self.machine.phase is Phase.CLOSED:
            await conn.close()  # another task connected meanwhile, or we are closed
            if self._coordinator is None:
                raise ConnectionError("the group member is closed")
            return self._coordinator
        self._coordinator = conn
        return conn

    def _drop_coordinator(self, why: str) -> None:
        conn, self._coordinator = self._coordinator, None
        if conn is not None:
            log.debug("group %s: closing the coordinator's connection: %s", self.group_id, why)
            self._spawn(conn.close())

    async def _find(self, rid: int) -> None:
        try:
            conn = await self.cluster.idle_connection()
            find = APIS[ApiKey.FIND_COORDINATOR]
            version = conn.version_for(find)
            if version >= 4:
                request = FindCoordinatorRequest(key_type=0, coordinator_keys=[self.group_id])
            else:
                request = FindCoordinatorRequest(key=self.group_id, key_type=0)
            answer: FindCoordinatorResponse = await conn.request(find, version, request)
        except NETWORK_ERRORS as exc:
            self._apply(self.machine.on_coordinator(now_ms(), rid, -1, -1, repr(exc)))
            return
        if version >= 4:
            c = answer.coordinators[0]
            code, node, host, port = c.error_code, c.node_id, c.host, c.port
        else:
            code, node, host, port = answer.error_code, answer.node_id, answer.host, answer.port
        if code == 0:
            if self._coordinator_addr != (node, host, port):
                log.info("group %s: coordinator is broker %d at %s:%d", self.group_id, node,
                         host, port)
                self._drop_coordinator("the coordinator moved")
            self._coordinator_addr = (node, host, port)
        self._apply(self.machine.on_coordinator(now_ms(), rid, code, node))

    async def _counts(self, rid: int, topics: frozenset[str]) -> None:
        try:
            counts = await self._partition_counts_of(topics)
        except NETWORK_ERRORS as exc:
            self._apply(self.machine.on_partition_counts(now_ms(), rid, None, repr(exc)))
            return
        self._apply(self.machine.on_partition_counts(now_ms(), rid, counts))

    # ------------------------------------------------------------------ time
    def _ensure_ticker(self) -> None:
        if (self._ticker is None or self._ticker.done()) and not self._closed:
            self._ticker = asyncio.get_running_loop().create_task(self._tick())

    async def _tick(self) -> None:
        while self.machine.phase is not Phase.CLOSED:
            deadline = self.machine.next_deadline_ms()
            self._wake.clear()
            if deadline is not None:
                delay_s = max(TICK_MS_MIN, deadline - now_ms()) / 1000
            try:
                async with asyncio.timeout(None if deadline is None else delay_s):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._apply(self.machine.tick(now_ms()))

    async def _wait_until(self, done: Any, deadline: float) -> None:
        """Until done() or the loop time deadline, woken by every answer to the machine."""
        loop = asyncio.get_running_loop()
        while not done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._changed.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._changed.wait()
            except TimeoutError:
                return

