"""A Consumer's membership in a consumer group: the coordinator, JoinGroup/SyncGroup rounds,
heartbeats, the rebalance listener, and committed offsets with their leader epochs (KIP-320).

    consumer = Consumer(bootstrap, group_id="billing", enable_auto_commit=False)
    consumer.subscribe(["orders"], listener=MyListener())
    records = await consumer.poll(timeout_ms=1000)   # joins the group inside poll()
    await consumer.commit()                           # positions with their leader epochs

Theory of operation
-------------------
As in Kafka's Java consumer, the group's rebalances run inside poll(): a member that is not
polling does not join, and the rebalance listener's callbacks run while the application is in
poll(), so an eager revoke or an auto-commit before it never gives away records the application
has been handed but not yet processed. A JoinGroup may take as long as the slowest member needs
to rejoin (up to rebalance_timeout_ms, which is max_poll_interval_ms), longer than one poll's
timeout: the round's requests run as a task that poll() waits on for its timeout and that the
next poll() waits on again; the assignment it brings is taken, and the listener told, by the
poll() that finds the task done. A listener that raises does not stop the round (one member
must not hold up its group): poll() raises the error once the round is over, as Java does.

Commits between our JoinGroup's answer and our SyncGroup's would be refused (the group is
CompletingRebalance): a commit then waits for the sync. A cooperative member reads, and so
commits, during rounds; refused, such commits used to ask for another round, whose own window
caught the next commit, and the group rebalanced for ever.

Heartbeats do not depend on poll(): a task sends one every heartbeat_interval_ms while the member
has a generation, so an application busy with its records keeps its place. The same task is the
max_poll_interval_ms watchdog: a member that has not called poll() for that long leaves the group
(a static member only stops heartbeating: its instance id holds its place for the session), and
the next poll() joins again, telling the listener the partitions were lost.

Rebalance protocols: the assignors named in partition_assignment_strategy are offered in order,
and the coordinator picks one all members offer. If every one of ours is cooperative
(cooperative-sticky), we rebalance cooperatively (KIP-429): members keep their partitions through
a round, report them as owned, and give up only those the new assignment takes away, after which
they rejoin so the next round can hand those out. Otherwise eagerly: every partition is revoked
before JoinGroup.

Committed offsets: OffsetFetch v5+ returns the leader epoch committed with each offset. The
member seeks to (offset, epoch) so the consumer validates it against the leader's log before
fetching (OffsetForLeaderEpoch), as for any position after a leader change; a committed epoch
newer than the partition's leader epoch in our metadata first waits for metadata that new. A log
truncated by an unclean election below a committed offset is thereby detected when the group
resumes: LogTruncationError with auto_offset_reset="none", else the position moves to where the
logs diverge.

The coordinator has its own connection (JoinGroup parks there for a whole rebalance, and must not
hold up fetches to the same broker). A broker answers one connection's requests in order, so a
round given up (close, unsubscribe) drops that connection: a LeaveGroup sent behind the parked
JoinGroup would wait for the whole rebalance. FindCoordinator and the leader's Metadata go on an
idle connection for the same reason.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from protocol.apis.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from protocol.apis.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.apis.join_group import JoinGroupRequest, JoinGroupRequestProtocol, JoinGroupResponse
from protocol.apis.leave_group import LeaveGroupRequest, LeaveGroupResponse, MemberIdentity
from protocol.apis.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from protocol.error_codes import ErrorCode as E
from protocol.errors import DecodeError
from protocol.registry import APIS

from .assignors import Assignor, make_assignors
from .connection import Connection, NoCommonVersion
from .consumer_protocol import (
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from .errors import KafkaError, error_for
from .group_offsets import (
    Committed,
    commit_errors,
    commit_request,
    committed_offsets,
    fetch_errors,
    fetch_request,
)
from .types import TopicPartition

if TYPE_CHECKING:
    from .cluster import ClusterClient

log = logging.getLogger("epochlog.group")

PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1
JOIN_TIMEOUT_EXTRA_MS = 5000  # a JoinGroup may park for the rebalance timeout, plus this
NETWORK_ERRORS = (OSError, ConnectionError, asyncio.TimeoutError, NoCommonVersion, DecodeError)
COORDINATOR_GONE = frozenset({E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR})
RETRY_LATER = frozenset({E.COORDINATOR_LOAD_IN_PROGRESS, E.REQUEST_TIMED_OUT})
# A JoinGroup error after which the member cannot go on: raised from poll().
FATAL_JOIN = frozenset({E.FENCED_INSTANCE_ID, E.INCONSISTENT_GROUP_PROTOCOL,
                        E.INVALID_SESSION_TIMEOUT, E.INVALID_GROUP_ID, E.GROUP_MAX_SIZE_REACHED,
                        E.GROUP_AUTHORIZATION_FAILED, E.UNSUPPORTED_VERSION})
# A commit refused with these: the group rebalanced since our generation
REBALANCED = frozenset({E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.REBALANCE_IN_PROGRESS,
                        E.FENCED_INSTANCE_ID})


class CommitFailedError(KafkaError):
    """The commit was refused because the group rebalanced since this member's generation: its
    partitions may belong to another member now. Poll again (the member rejoins) and reprocess."""


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


class GroupMember:
    """The group half of a Consumer. The consumer calls `poll_hook()` at the start of each
    poll(), and offers `_group_assign(partitions, committed)`, `next_offsets()` and
    `consumed()` to it."""

    def __init__(self, cluster: ClusterClient, consumer: Any, *, group_id: str,
                 group_instance_id: str | None, session_timeout_ms: int,
                 heartbeat_interval_ms: int, max_poll_interval_ms: int,
                 partition_assignment_strategy: Iterable[str], enable_auto_commit: bool,
                 auto_commit_interval_ms: int, request_timeout_ms: int, retry_backoff_ms: int,
                 metadata_max_age_ms: int, client_rack: str | None) -> None:
        if not group_id:
            raise ValueError("group_id must not be empty")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({heartbeat_interval_ms}) must be less "
                             f"than session_timeout_ms ({session_timeout_ms})")
        self.cluster = cluster
        self.consumer = consumer
        self.group_id = group_id
        self.group_instance_id = group_instance_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.rebalance_timeout_ms = max_poll_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        self.assignors: list[Assignor] = make_assignors(partition_assignment_strategy)
        if not self.assignors:
            raise ValueError("partition_assignment_strategy names no assignor")
        self.cooperative = all(a.cooperative for a in self.assignors)
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.client_rack = client_rack
        # membership
        self.member_id = ""
        self.generation = NO_GENERATION
        self.protocol: str | None = None
        self.leader_id = ""
        self.owned: set[TopicPartition] = set()
        self.rejoin_reason: str | None = "first join"
        self.rebalances = 0  # completed rounds, for metrics and tests
        # subscription
        self.topics: set[str] = set()
        self.pattern: re.Pattern[str] | None = None
        self.listener: RebalanceListener = RebalanceListener()
        self._group_topics: set[str] = set()  # the leader: every member's topics
        self._partition_counts: dict[str, int] = {}  # the leader: as of the last assignment
        self._metadata_checked = 0.0
        # coordinator
        self._coordinator: Connection | None = None
        self._coordinator_id = -1
        # tasks
        self._join: asyncio.Task[Assignment | None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._heartbeat_wake = asyncio.Event()
        self._fatal: BaseException | None = None
        self._last_poll = time.monotonic()
        self._left_for_poll_interval = False
        self._next_auto_commit = time.monotonic() + auto_commit_interval_ms / 1000
        self._auto_commit: asyncio.Task[None] | None = None
        self._closed = False
        self._joining = False
        # cleared from our JoinGroup's answer (a new generation) to our SyncGroup's
        self._synced = asyncio.Event()
        self._synced.set()
        self._rejoin_at_once = False  # the last round's error needs no backoff
        self._listener_error: BaseException | None = None  # raised once the round is over

    # ------------------------------------------------------------------ subscription
    def subscribe(self, topics: Iterable[str] | None, pattern: str | re.Pattern[str] | None,
                  listener: RebalanceListener | None) -> None:
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe takes a list of topics or a pattern, not both")
        if topics is not None:
            wanted = set(topics)
            if any(not t for t in wanted):
                raise ValueError("topic names must not be empty")
            self.pattern = None
        else:
            self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            wanted = self._matching(self.cluster_topics())
        if listener is not None:
            self.listener = listener
        if wanted != self.topics or self.generation == NO_GENERATION:
            self.topics = wanted
            self.request_rejoin("subscription changed")
        self._metadata_checked = 0.0

    def cluster_topics(self) -> set[str]:
        return {t for t, _ in self.cluster.partitions}

    def _matching(self, topics: Iterable[str]) -> set[str]:
        assert self.pattern is not None
        return {t for t in topics if not t.startswith("__") and self.pattern.fullmatch(t)}

    def request_rejoin(self, reason: str) -> None:
        if self.rejoin_reason is None:
            log.info("group %s: rejoining: %s", self.group_id, reason)
        self.rejoin_reason = reason
        self.consumer._data.set()  # a poll() waiting for records goes round to rejoin

    # ------------------------------------------------------------------ poll and close
    async def poll_hook(self, deadline: float) -> None:
        """Called by poll(): rejoin if needed (waiting for the round until deadline, a loop
        time), auto-commit when due. Raises what the member cannot recover from."""
        self._last_poll = time.monotonic()
        if self._fatal is not None:
            raise self._fatal
        if self.manual:
            await self.start_from_committed()
            self._maybe_auto_commit()
            return
        if self._left_for_poll_interval:
            self._left_for_poll_interval = False
            self.request_rejoin("poll() called again after max_poll_interval_ms")
        await self._check_metadata()
        join = self._join
        if join is not None and join.done() and not join.cancelled() and \
                join.exception() is None and self.generation == NO_GENERATION:
            # The round completed after a poll() returned, and the generation it gave was lost
            # before this one (max_poll_interval_ms, a session expiry): its assignment is stale.
            self._join = None
            self.request_rejoin("the generation of the last round was lost before poll()")
        if self._join is None and self.rejoin_reason is not None:
            await self._before_join()  # here, in poll(): nothing is handed out meanwhile
            self._join = asyncio.get_running_loop().create_task(self._rebalance())
        if self._join is not None:
            # Only the requests run as a task (it may outlive this poll); the assignment is
            # taken here, so the listener runs inside poll() and a cooperative revoke commits
            # consumed() as of this poll's start, after every record handed out before it.
            loop = asyncio.get_running_loop()
            try:
                async with asyncio.timeout(max(0.0, deadline - loop.time())):
                    await asyncio.wait({self._join})
            except TimeoutError:
                pass
            join = self._join
            if not join.done():
                return
            self._join = None
            if not join.cancelled():
                failed = join.exception()
                if failed is not None:
                    self._fatal = failed
                    raise failed
                assignment = join.result()
                if assignment is not None:
                    await self._take(assignment)
            failed, self._listener_error = self._listener_error, None
            if failed is not None:
                raise failed
        self._ensure_heartbeat()
        self._maybe_auto_commit()

    @property
    def manual(self) -> bool:
        """Partitions come from assign(), not the group: commits go with no generation (as
        Kafka's "simple" consumers do), and positions still start from committed offsets."""
        return not self.topics and self.pattern is None

    async def start_from_committed(self) -> None:
        """assign()ed partitions with no position yet: their committed (offset, epoch), else
        auto_offset_reset (Java's consumer does the same with a group.id)."""
        waiting = set(self.consumer._awaiting_committed)
        if waiting:
            committed = await self.committed(waiting)
            self.consumer._start_positions(committed)

    def _maybe_auto_commit(self) -> None:
        if self.enable_auto_commit and time.monotonic() >= self._next_auto_commit and \
                (self._auto_commit is None or self._auto_commit.done()):
            self._next_auto_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
            self._auto_commit = asyncio.get_running_loop().create_task(self._commit_quietly())

    async def _commit_quietly(self) -> None:
        offsets = self.consumer.consumed()
        if not offsets:
            return
        try:
            await self.commit(offsets)
        except KafkaError as exc:
            log.warning("group %s: auto-commit failed: %s", self.group_id, exc)

    async def close(self) -> None:
        """Commit (with auto-commit), tell the listener, leave the group (dynamic members), and
        close the coordinator's connection. Bounded by request_timeout_ms per step."""
        if self._closed:
            return
        self._closed = True
        join = self._join
        if join is not None and not join.done() and not self._synced.is_set():
            # Our generation is already the new one, whose commits the coordinator refuses
            # (REBALANCE_IN_PROGRESS) until the SyncGroup completes: let it, so that the commit
            # below goes through (cancelled, it left the group waiting for the sync deadline).
            try:
                async with asyncio.timeout(self.request_timeout_ms / 1000):
                    await asyncio.wait({join})
            except TimeoutError:
                pass
        await self._cancel_join()
        for task in (self._heartbeat, self._auto_commit):
            if task is not None and not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        try:
            member = self.generation != NO_GENERATION and bool(self.owned)
            if self.enable_auto_commit and (member or self.manual):
                try:
                    await self.commit(self.consumer.next_offsets())
                except KafkaError as exc:
                    log.warning("group %s: commit on close failed: %s", self.group_id, exc)
            if member:
                await self._call_listener("on_partitions_revoked", set(self.owned))
            await self._leave("the consumer is closing")
        finally:
            if self._coordinator is not None:
                await self._coordinator.close()
                self._coordinator = None

    async def unsubscribe(self) -> None:
        await self._cancel_join()
        if self.owned:
            await self._call_listener("on_partitions_revoked", set(self.owned))
        await self._leave("unsubscribed")
        self.topics, self.pattern = set(), None
        self.owned = set()
        self.consumer._group_assign(set(), {})

    async def _cancel_join(self) -> None:
        """Stop a round under way. A JoinGroup parked at the coordinator would hold up every
        later request on its connection (a broker answers a connection in order: a LeaveGroup
        behind it waited for the whole rebalance), so that connection goes too."""
        join, self._join = self._join, None
        if join is None or join.done():
            return
        parked = self._joining
        join.cancel()
        await asyncio.gather(join, return_exceptions=True)
        if parked:
            self._coordinator_lost("a JoinGroup on its connection was given up")

    # ------------------------------------------------------------------ the coordinator
    async def _coordinator_conn(self) -> Connection:
        """The coordinator's connection, finding the coordinator first if needed."""
        conn = self._coordinator
        if conn is not None and not conn.closed:
            return conn
        self._coordinator = None
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        while True:
            any_conn = await self.cluster.idle_connection()
            find = APIS[10]
            version = any_conn.version_for(find)
            if version >= 4:
                request = FindCoordinatorRequest(key_type=0, coordinator_keys=[self.group_id])
            else:
                request = FindCoordinatorRequest(key=self.group_id, key_type=0)
            answer: FindCoordinatorResponse = await any_conn.request(find, version, request)
            if version >= 4:
                c = answer.coordinators[0]
                code, node, host, port = c.error_code, c.node_id, c.host, c.port
            else:
                code, node, host, port = (answer.error_code, answer.node_id, answer.host,
                                          answer.port)
            if code == 0:
                break
            if (code not in COORDINATOR_GONE and code not in RETRY_LATER) or \
                    time.monotonic() > deadline:
                raise error_for(code, f"find the coordinator of group {self.group_id}")
            await asyncio.sleep(self.retry_backoff_ms / 1000)
        conn = await Connection(host, port, client_id=self.cluster.client_id,
                                request_timeout_ms=self.request_timeout_ms).connect()
        if node != self._coordinator_id:
            log.info("group %s: coordinator is broker %d at %s:%d", self.group_id, node, host,
                     port)
        self._coordinator, self._coordinator_id = conn, node
        return conn

    def _coordinator_lost(self, why: str) -> None:
        if self._coordinator is not None:
            log.info("group %s: coordinator %d lost: %s", self.group_id, self._coordinator_id,
                     why)
            conn, self._coordinator = self._coordinator, None
            asyncio.get_running_loop().create_task(conn.close())

    async def _request(self, key: int, message: Any, timeout_ms: int | None = None) -> Any:
        conn = await self._coordinator_conn()
        api = APIS[key]
        try:
            return await conn.request(api, conn.version_for(api), message,
                                      timeout_ms=timeout_ms)
        except NETWORK_ERRORS as exc:
            self._coordinator_lost(f"{api.name}: {exc!r}")
            raise

    # ------------------------------------------------------------------ a rebalance round
    async def _rebalance(self) -> Assignment | None:
        """Rejoin until a round completes: JoinGroup (reporting what we own, cooperatively),
        compute the assignment if we lead, SyncGroup. poll() revoked (eager) before, and takes
        the assignment after: both tell the listener, which must run inside poll()."""
        backoff = self.retry_backoff_ms / 1000
        while not self._closed:
            try:
                assignment = await self._join_and_sync()
            except NETWORK_ERRORS as exc:
                log.info("group %s: rebalance interrupted: %r; retrying", self.group_id, exc)
                await asyncio.sleep(backoff)
                continue
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                log.info("group %s: rebalance interrupted: %s; retrying", self.group_id, exc)
                await asyncio.sleep(backoff)
                continue
            if assignment is None:
                if self.generation == NO_GENERATION and self.owned:
                    return None  # poll() reports what we own as lost, then joins afresh
                if not self._rejoin_at_once:
                    await asyncio.sleep(backoff)
                continue
            return assignment
        return None

    async def _before_join(self) -> None:
        if not self.owned:
            return
        if self.generation == NO_GENERATION:
            lost, self.owned = set(self.owned), set()
            self.consumer._group_assign(set(), {})
            log.info("group %s: partitions lost with the generation: %s", self.group_id,
                     _names(lost))
            await self._call_listener("on_partitions_lost", lost)
        elif not self.cooperative:
            revoked = set(self.owned)
            if self.enable_auto_commit:
                await self._commit_before_revoke(revoked)
            await self._call_listener("on_partitions_revoked", revoked)
            self.owned = set()
            self.consumer._group_assign(set(), {})

    async def _commit_before_revoke(self, revoked: set[TopicPartition]) -> None:
        offsets = {tp: v for tp, v in self.consumer.consumed().items() if tp in revoked}
        if not offsets:
            return
        try:
            await self.commit(offsets)
        except KafkaError as exc:
            log.warning("group %s: commit before revoking failed: %s", self.group_id, exc)

    async def _join_and_sync(self) -> Assignment | None:
        """One JoinGroup and SyncGroup; None to try again (the member id, generation or
        coordinator were updated as the errors said)."""
        protocols = [JoinGroupRequestProtocol(name=a.name, metadata=encode_subscription(
            a.subscription(sorted(self.topics), sorted(self.owned),
                           self.generation, self.client_rack))) for a in self.assignors]
        request = JoinGroupRequest(
            group_id=self.group_id, session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
            protocols=protocols)
        self.rejoin_reason = None  # a rejoin asked for from now on needs another round
        self._joining = True  # no heartbeats until the round is over (Kafka's rule)
        try:
            return await self._join_and_sync_once(request)
        finally:
            self._joining = False
            self._synced.set()
            self._heartbeat_wake.set()

    async def _join_and_sync_once(self, request: JoinGroupRequest) -> Assignment | None:
        answer: JoinGroupResponse = await self._request(
            11, request, timeout_ms=max(self.request_timeout_ms,
                                        self.rebalance_timeout_ms + JOIN_TIMEOUT_EXTRA_MS))
        code = answer.error_code
        if code == E.MEMBER_ID_REQUIRED:
            self.member_id = answer.member_id
            self.rejoin_reason = "member id assigned"
            return await self._join_and_sync()
        if code:
            self._join_failed(code, "JoinGroup")
            return None
        self.member_id, self.generation = answer.member_id, answer.generation_id
        self.protocol, self.leader_id = answer.protocol_name, answer.leader
        self._synced.clear()
        leading = answer.leader == answer.member_id
        assignments: list[SyncGroupRequestAssignment] = []
        if leading:
            assignments = await self._lead(answer)
        sync: SyncGroupResponse = await self._request(14, SyncGroupRequest(
            group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=self.group_instance_id, protocol_type=PROTOCOL_TYPE,
            protocol_name=self.protocol, assignments=assignments))
        if sync.error_code:
            self._join_failed(sync.error_code, "SyncGroup")
            return None
        try:
            assignment = decode_assignment(sync.assignment)
        except ValueError as exc:
            raise KafkaError(f"group {self.group_id}: unreadable assignment from the leader: "
                             f"{exc}") from exc
        log.info("group %s: generation %d (%s, %s%s): assigned %s", self.group_id,
                 self.generation, self.protocol, "cooperative" if self.cooperative else "eager",
                 ", leader" if leading else "", _names(assignment.partitions))
        return assignment

    def _join_failed(self, code: int, what: str) -> None:
        name = _code_name(code)
        # The group moved on without us: rejoin at once, as Java does (bench/groups.py measured
        # 100 ms more per such round with the backoff). Backoff for coordinator moves and loads.
        self._rejoin_at_once = code in (E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID,
                                        E.ILLEGAL_GENERATION, E.MEMBER_ID_REQUIRED)
        if code in FATAL_JOIN:
            raise error_for(code, f"{what} for group {self.group_id}")
        if code in COORDINATOR_GONE:
            self._coordinator_lost(f"{what}: {name}")
        elif code == E.UNKNOWN_MEMBER_ID:
            self.member_id, self.generation = "", NO_GENERATION
        elif code == E.ILLEGAL_GENERATION:
            self.generation = NO_GENERATION
        elif code not in RETRY_LATER and code != E.REBALANCE_IN_PROGRESS:
            raise error_for(code, f"{what} for group {self.group_id}")
        log.info("group %s: %s answered %s; joining again", self.group_id, what, name)
        self.rejoin_reason = self.rejoin_reason or f"{what}: {name}"

    async def _lead(self, answer: JoinGroupResponse) -> list[SyncGroupRequestAssignment]:
        """As the leader: the members' subscriptions, the partitions of their topics, and the
        chosen assignor's answer."""
        assignor = next((a for a in self.assignors if a.name == answer.protocol_name), None)
        if assignor is None:
            raise KafkaError(f"group {self.group_id}: the coordinator chose protocol "
                             f"{answer.protocol_name!r}, which we did not offer")
        subscriptions = {}
        for m in answer.members:
            try:
                sub = decode_subscription(m.metadata)
            except ValueError as exc:
                log.warning("group %s: member %s sent an unreadable subscription (%s); it gets "
                            "nothing", self.group_id, m.member_id, exc)
                sub = Subscription(topics=[])
            sub.group_instance_id = m.group_instance_id
            subscriptions[m.member_id] = sub
        topics = set().union(*(set(s.topics) for s in subscriptions.values()))
        counts = await self._partition_counts_of(topics)
        self._group_topics, self._partition_counts = topics, counts
        result = assignor.assign(counts, subscriptions)
        return [SyncGroupRequestAssignment(member_id=member, assignment=encode_assignment(a))
                for member, a in result.items()]

    async def _partition_counts_of(self, topics: set[str]) -> dict[str, int]:
        if not topics:
            return {}
        await self.cluster.refresh(sorted(topics))
        counts = {}
        for topic in topics:
            views = self.cluster.partitions_of(topic)
            if views and self.cluster.topic_errors.get(topic, 0) == 0:
                counts[topic] = len(views)
        return counts

    async def _take(self, assignment: Assignment) -> None:
        new = {tp for tp in assignment.partitions if tp.topic in self.topics}
        added = new - self.owned
        revoked = self.owned - new
        if revoked:  # cooperative: give up what moved, then rejoin so it can be handed out
            if self.enable_auto_commit:
                await self._commit_before_revoke(revoked)
            await self._call_listener("on_partitions_revoked", revoked)
            self.request_rejoin(f"revoked {_names(revoked)} for others to take")
        committed = await self.committed(added) if added else {}
        self.owned = new
        self.consumer._group_assign(new, {tp: c for tp, c in committed.items() if c})
        self.rebalances += 1
        await self._call_listener("on_partitions_assigned", added)
        self._heartbeat_wake.set()

    async def _call_listener(self, name: str, partitions: set[TopicPartition]) -> None:
        """The listener's callback. What it raises does not stop the rebalance (a member stuck
        half way would hold up the whole group): as in Java, the round completes and poll()
        raises the first such error afterwards."""
        try:
            result = getattr(self.listener, name)(partitions)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            log.error("group %s: the rebalance listener's %s raised %r", self.group_id, name, exc)
            if self._listener_error is None:
                self._listener_error = exc

    async def _check_metadata(self) -> None:
        """Every metadata_max_age_ms: a pattern's topics, and (the leader) the partition counts of
        the group's topics. A change means a new round."""
        now = time.monotonic()
        if now - self._metadata_checked < self.metadata_max_age_ms / 1000:
            return
        self._metadata_checked = now
        try:
            if self.pattern is not None:
                await self.cluster.refresh(None)
                wanted = self._matching(self.cluster_topics())
                if wanted != self.topics:
                    self.topics = wanted
                    self.request_rejoin(f"pattern now matches {sorted(wanted)}")
            if self.leader_id and self.leader_id == self.member_id and self._group_topics:
                counts = await self._partition_counts_of(self._group_topics)
                if counts != self._partition_counts:
                    self.request_rejoin("the group's topics changed their partitions")
        except NETWORK_ERRORS as exc:
            log.debug("group %s: metadata check failed: %r", self.group_id, exc)
            self._metadata_checked = 0.0

    # ------------------------------------------------------------------ heartbeats
    def _ensure_heartbeat(self) -> None:
        if self._heartbeat is None or self._heartbeat.done():
            self._heartbeat = asyncio.get_running_loop().create_task(self._heartbeats())

    async def _heartbeats(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        while not self._closed:
            self._heartbeat_wake.clear()
            try:
                async with asyncio.timeout(interval):
                    await self._heartbeat_wake.wait()
                continue  # woken: a round completed, start the interval anew
            except TimeoutError:
                pass
            if self.generation == NO_GENERATION or self._joining:
                continue  # no generation, or a JoinGroup/SyncGroup is on the wire
            if time.monotonic() - self._last_poll > self.max_poll_interval_ms / 1000:
                await self._poll_interval_exceeded()
                continue
            await self._heartbeat_once()

    async def _heartbeat_once(self) -> None:
        generation = self.generation
        try:
            answer: HeartbeatResponse = await self._request(12, HeartbeatRequest(
                group_id=self.group_id, generation_id=self.generation, member_id=self.member_id,
                group_instance_id=self.group_instance_id),
                timeout_ms=min(self.request_timeout_ms, self.session_timeout_ms))
        except NETWORK_ERRORS as exc:
            log.debug("group %s: heartbeat failed: %r", self.group_id, exc)
            return
        except KafkaError as exc:
            log.info("group %s: heartbeat: %s", self.group_id, exc)
            return
        code = answer.error_code
        if code == 0:
            return
        if self._joining or self.generation != generation:
            return  # an answer about the round before the one now under way
        if code == E.REBALANCE_IN_PROGRESS:
            self.request_rejoin("the coordinator is rebalancing the group")
        elif code in COORDINATOR_GONE:
            self._coordinator_lost(f"heartbeat: {_code_name(code)}")
        elif code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            if code == E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation = NO_GENERATION
            self.request_rejoin(f"heartbeat: {_code_name(code)}")
        elif code == E.FENCED_INSTANCE_ID:
            self._fatal = error_for(code, f"heartbeat of group {self.group_id}")
            self.consumer._data.set()
        else:
            log.info("group %s: heartbeat error %d", self.group_id, code)

    async def _poll_interval_exceeded(self) -> None:
        log.warning("group %s: poll() not called for max_poll_interval_ms (%d ms): leaving the "
                    "group; the next poll() joins again", self.group_id,
                    self.max_poll_interval_ms)
        await self._leave("max_poll_interval_ms exceeded")
        self._left_for_poll_interval = True

    async def _leave(self, why: str) -> None:
        """LeaveGroup for a dynamic member with a member id (a static member keeps its place
        for the session, as Kafka's do). Forgets the generation either way."""
        member_id, generation = self.member_id, self.generation
        self.generation = NO_GENERATION
        if self.group_instance_id is None:
            self.member_id = ""
        if self.group_instance_id is not None or not member_id:
            return
        try:
            answer: LeaveGroupResponse = await self._request(13, LeaveGroupRequest(
                group_id=self.group_id, member_id=member_id,
                members=[MemberIdentity(member_id=member_id)]))
            log.info("group %s: left (generation %d): %s%s", self.group_id, generation, why,
                     f" (error {answer.error_code})" if answer.error_code else "")
        except (KafkaError, *NETWORK_ERRORS) as exc:
            log.info("group %s: LeaveGroup failed (%r); the session timeout will expel us",
                     self.group_id, exc)

    # ------------------------------------------------------------------ offsets
    async def commit(self, offsets: Mapping[TopicPartition, tuple[int, int]]) -> None:
        """Commit (offset, leader epoch) per partition for this member's generation. Retries
        coordinator moves and loads; CommitFailedError if the group rebalanced meanwhile."""
        if not offsets:
            return
        if not self._synced.is_set():
            # Between our JoinGroup's answer and our SyncGroup's the group is
            # CompletingRebalance, where the coordinator refuses commits (Kafka's consumer fails
            # them up front). Cooperative members keep reading then, so wait for the sync.
            try:
                async with asyncio.timeout(self.request_timeout_ms / 1000):
                    await self._synced.wait()
            except TimeoutError:
                raise CommitFailedError(f"group {self.group_id}: a rebalance is completing; "
                                        "poll() and commit again") from None
        request = commit_request(self.group_id, self.generation, self.member_id,
                                 self.group_instance_id, offsets)
        _, codes = await self._ask_coordinator(8, request, "OffsetCommit", commit_errors)
        if not codes:
            log.debug("group %s: committed %s", self.group_id,
                      {f"{tp.topic}-{tp.partition}": v for tp, v in offsets.items()})
            return
        code = min(codes)
        if codes & REBALANCED:
            if code != E.REBALANCE_IN_PROGRESS:
                self.generation = NO_GENERATION
                if code == E.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
            if self._join is None or self._join.done():
                # (a round under way settles it: asking for another after it made members
                # that commit during rounds rebalance for ever)
                self.request_rejoin(f"OffsetCommit: {_code_name(code)}")
            raise CommitFailedError(
                f"group {self.group_id}: commit refused ({_code_name(code)}): the group "
                "rebalanced; poll() again to rejoin")
        raise error_for(code, f"commit offsets of group {self.group_id}")

    async def committed(self, partitions: Iterable[TopicPartition]) -> Committed:
        """(offset, leader epoch) committed per partition, None where nothing is committed."""
        wanted = set(partitions)
        if not wanted:
            return {}
        answer, codes = await self._ask_coordinator(
            9, fetch_request(self.group_id, wanted), "OffsetFetch", fetch_errors,
            RETRY_LATER | {E.UNSTABLE_OFFSET_COMMIT})
        if codes:
            raise error_for(min(codes), f"fetch committed offsets of group {self.group_id}")
        return committed_offsets(answer, wanted)

    async def _ask_coordinator(self, key: int, request: Any, what: str,
                               errors_of: Callable[[Any], set[int]],
                               retry: frozenset[int] = RETRY_LATER) -> tuple[Any, set[int]]:
        """Send request to the coordinator; again after a network error, a coordinator move,
        or only error codes in retry, for up to request_timeout_ms (a coordinator failover
        takes a broker's session to be noticed, so a count of tries is the wrong bound). The
        answer and its error codes (empty: all went well)."""
        last = ""
        deadline = time.monotonic() + self.request_timeout_ms / 1000
        attempts = 0
        while attempts == 0 or time.monotonic() < deadline:
            attempts += 1
            try:
                answer = await self._request(key, request)
            except NETWORK_ERRORS as exc:
                last = repr(exc)
            else:
                codes = errors_of(answer)
                last = ", ".join(sorted(_code_name(c) for c in codes))
                if codes & COORDINATOR_GONE:
                    self._coordinator_lost(f"{what}: {last}")
                elif not codes <= retry or not codes:
                    return answer, codes
            await asyncio.sleep(self.retry_backoff_ms / 1000)
        raise KafkaError(f"group {self.group_id}: {what} failed after {attempts} attempts in "
                         f"{self.request_timeout_ms} ms: {last}")

    def metrics(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "member_id": self.member_id,
                "generation": self.generation, "protocol": self.protocol,
                "leader": self.leader_id == self.member_id and bool(self.member_id),
                "leader_id": self.leader_id,
                "coordinator": self._coordinator_id, "rebalances": self.rebalances,
                "assigned": sorted(self.owned)}


def _names(partitions: Iterable[TopicPartition]) -> str:
    parts = sorted(partitions)
    return ", ".join(f"{t}-{p}" for t, p in parts) if parts else "nothing"


def _code_name(code: int) -> str:
    try:
        return E(code).name
    except ValueError:
        return str(code)
