"""`GroupCoordinator`: the groups of the `__consumer_offsets` partitions this broker leads.

Theory of operation
-------------------
A group belongs to partition `abs(java_hashcode(group_id)) % partitions` of `__consumer_offsets`
(Kafka's rule, so Kafka's tools and ours agree), and its coordinator is that partition's leader.
The replica manager tells us (`on_partition`, one of its `partition_listeners`) when we start or
stop leading one:

    leader at a new epoch   a `Shard` is made, LOADING: the partition's log is read from its log
                            start to its end, the records replayed (offsets_log.py) into groups
                            and committed offsets; requests for its groups meanwhile get
                            COORDINATOR_LOAD_IN_PROGRESS. Then it is ACTIVE.
    follower, offline, gone the shard is unloaded: parked JoinGroup/SyncGroup requests get
                            NOT_COORDINATOR, as does everything that comes later, so clients
                            look up the new coordinator.

A leadership lost without a LeaderAndIsr (our generation ended: Partition.resign) is caught by
`_shard`: a shard whose partition we no longer lead at its epoch is unloaded on first use, and by
the timer loop.

The group state machine (state.py) is synchronous; this module parks the requests it cannot
answer yet as futures keyed by a token, resolves them from the state machine's `Reply` effects,
and runs its `Store` effects: the record is appended to the partition through the leader's normal
append, and the effect completes when the high watermark passes it (acks=all: replicated to the
ISR), within `offsets_commit_timeout_ms`. OffsetCommit does the same with offset records and
applies the offsets once replicated. Append errors map as Kafka's GroupMetadataManager maps them
(NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR, NOT_ENOUGH_REPLICAS* -> COORDINATOR_NOT_AVAILABLE,
size errors -> INVALID_COMMIT_OFFSET_SIZE, REQUEST_TIMED_OUT stays).

One timer task sleeps until the earliest deadline of any group (state.Group.next_deadline_ms), or
until an operation wakes it, and ticks the groups that are due. Every wait is bounded.

The offsets topic is created on the first FindCoordinator that finds it missing, through the
controller as auto-creation does (`offsets_topic_num_partitions`,
`offsets_topic_replication_factor`, cleanup.policy=compact; if the controller does not accept
that setting yet, without it, with a warning).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from epochlog.protocol.batch import CorruptBatch
from epochlog.protocol.control_records import marker_of
from epochlog.protocol.error_codes import ErrorCode

from ..internal_topics import InternalTopic
from ..partition import Partition
from . import offsets_log
from .state import (
    Action,
    CommittedOffset,
    Group,
    GroupSettings,
    GroupState,
    JoinRequest,
    JoinResult,
    Reply,
    Store,
    SyncResult,
    random_member_id,
)
from .txn_offsets import PendingOffsets

if TYPE_CHECKING:
    from ..parts import BrokerParts

Answer = TypeVar("Answer")  # what a parked request is answered with

log = logging.getLogger("epochlog.broker")
E = ErrorCode

OFFSETS_TOPIC = "__consumer_offsets"
TICK_MS_MAX = 1000  # the timer loop looks at least this often (shards lost without a listener)
PARK_MARGIN_MS = 30_000  # a parked join/sync waits at most its group timeout plus this
OFFSETS_SEGMENT_BYTES = 100 << 20  # Kafka's offsets.topic.segment.bytes

_COMMIT_ERRORS: dict[int, int] = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.RECORD_LIST_TOO_LARGE: E.INVALID_COMMIT_OFFSET_SIZE,
    E.INVALID_FETCH_SIZE: E.INVALID_COMMIT_OFFSET_SIZE,
}
_STORE_ERRORS: dict[int, int] = {**_COMMIT_ERRORS, E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
                 E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
                 E.INVALID_FETCH_SIZE: E.UNKNOWN_SERVER_ERROR}


def _forgettable(group: Group) -> bool:
    """A group that never formed and holds nothing (e.g. a member id asked for and never
    used): nothing was stored for it, so it is dropped from memory."""
    return (group.state is GroupState.EMPTY and group.generation == 0 and not group.members
            and not group.pending_members and not group.offsets)


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(frozen=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str


@dataclass(eq=False)
class Shard:
    """Our leadership of one offsets partition, at one leader epoch, and its groups."""

    index: int
    leader_epoch: int
    loading: bool = True
    groups: dict[str, Group] = field(default_factory=dict)
    txn_offsets: PendingOffsets = field(default_factory=PendingOffsets)
    late_markers: list[tuple[int, bool]] = field(default_factory=list)  # while loading


@dataclass
class Counters:
    loads_total: int = 0
    unloads_total: int = 0
    commits_total: int = 0  # offsets committed (replicated)
    commit_failures_total: int = 0
    stores_total: int = 0
    store_failures_total: int = 0
    rebalances_total: int = 0  # join phases completed


class GroupCoordinator:
    def __init__(self, parts: BrokerParts, *, clock: Callable[[], int] = monotonic_ms,
                 wall_clock: Callable[[], int] = wall_clock_ms,
                 new_member_id: Callable[[str], str] = random_member_id) -> None:
        c = parts.config
        self.parts = parts
        self.clock = clock
        self.wall_clock = wall_clock
        self.new_member_id = new_member_id
        self.settings = GroupSettings(c.group_min_session_timeout_ms,
                                      c.group_max_session_timeout_ms,
                                      c.group_initial_rebalance_delay_ms)
        self.shards: dict[int, Shard] = {}
        self.counters = Counters()
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._next_token = 0
        self._wake = asyncio.Event()
        self.topic = InternalTopic(
            parts, OFFSETS_TOPIC, partitions=c.offsets_topic_num_partitions,
            replication_factor=c.offsets_topic_replication_factor,
            configs=[("cleanup.policy", "compact"), ("segment.bytes", str(OFFSETS_SEGMENT_BYTES))],
            timeout_ms=c.offsets_commit_timeout_ms, wall_clock=wall_clock)

    # -------------------------------------------------------------------- partitions, shards
    def partition_for(self, group_id: str) -> int:
        return self.topic.partition_for(group_id)

    def on_partition(self, topic: str, index: int, partition: Partition | None) -> None:
        """The replica manager applied a state of one of our partitions (None: gone)."""
        if topic != OFFSETS_TOPIC:
            return
        shard = self.shards.get(index)
        if partition is not None and partition.is_leader:
            if shard is not None and shard.leader_epoch == partition.leader_epoch:
                return  # an ISR change
            if shard is not None:
                self._unload(shard, "a new leader epoch")
            shard = self.shards[index] = Shard(index, partition.leader_epoch)
            self.parts.spawn(self._load(shard, partition), f"load {OFFSETS_TOPIC}-{index}")
        elif shard is not None:
            self._unload(shard, "no longer the leader")

    def _leading(self, shard: Shard) -> Partition | None:
        return self.topic.leading(shard.index, shard.leader_epoch)

    def _shard(self, group_id: str) -> tuple[Shard | None, int]:
        """The shard that holds group_id, or the error to answer."""
        shard = self.shards.get(self.partition_for(group_id))
        if shard is None:
            return None, E.NOT_COORDINATOR
        if self._leading(shard) is None:
            self._unload(shard, "leadership lost")
            return None, E.NOT_COORDINATOR
        if shard.loading:
            return None, E.COORDINATOR_LOAD_IN_PROGRESS
        return shard, 0

    def _unload(self, shard: Shard, why: str) -> None:
        if self.shards.get(shard.index) is shard:
            del self.shards[shard.index]
        effects: list[Action] = []
        for group in shard.groups.values():
            effects += group.unload(E.NOT_COORDINATOR)
        self._run(shard, None, effects)
        self.counters.unloads_total += 1
        log.info("%s-%d: unloaded %d groups (leader epoch %d): %s", OFFSETS_TOPIC, shard.index,
                 len(shard.groups), shard.leader_epoch, why)
        shard.groups = {}

    async def _load(self, shard: Shard, partition: Partition) -> None:
        """Replay the partition's log into groups and offsets, a chunk at a time."""
        started = self.clock()
        end = partition.log.log_end_offset
        snapshots: dict[str, Any] = {}
        # (group, partition) -> (offset of the record that set it, the offset or a tombstone)
        offsets: dict[str, dict[tuple[str, int], tuple[int, CommittedOffset | None]]] = {}

        def take(group_id: str, tp: tuple[str, int], at: int,
                 committed: CommittedOffset | None) -> None:
            held = offsets.setdefault(group_id, {})
            if tp not in held or held[tp][0] < at:  # a transaction's offsets apply late
                held[tp] = (at, committed)

        records = 0
        async for header, r in self.topic.batch_records(
                partition, end, lambda: self.shards.get(shard.index) is shard):
            records += 1
            if header.is_control:
                try:
                    commit = marker_of(r.key, r.value).commit
                except CorruptBatch as exc:
                    log.error("%s-%d: skipped a control record: %s", OFFSETS_TOPIC, shard.index,
                              exc)
                    continue
                for group_id, tp, done in shard.txn_offsets.end(header.producer_id, commit):
                    take(group_id, tp, done.record_offset, done)
                continue
            try:
                parsed = offsets_log.parse(r.key, r.value, r.offset)
            except offsets_log.BadRecord as exc:
                log.error("%s-%d: skipped: %s", OFFSETS_TOPIC, shard.index, exc)
                continue
            if isinstance(parsed, offsets_log.GroupRecord):
                snapshots[parsed.group_id] = parsed.snapshot
            elif parsed is not None and header.is_transactional and parsed.committed is not None:
                shard.txn_offsets.add(header.producer_id, parsed.group_id,
                                      (parsed.topic, parsed.partition), parsed.committed)
            elif parsed is not None:
                take(parsed.group_id, (parsed.topic, parsed.partition), r.offset,
                     parsed.committed)
        if self.shards.get(shard.index) is not shard:
            return
        now = self.clock()
        for group_id in snapshots.keys() | offsets.keys():
            snap = snapshots.get(group_id)
            group = (Group.from_snapshot(snap, self.settings, now, self.new_member_id)
                     if snap is not None else Group(group_id, self.settings, self.new_member_id))
            for tp, (_, committed) in offsets.get(group_id, {}).items():
                if committed is not None:
                    group.offsets[tp] = committed
            if group.members or group.offsets or snap is not None:
                shard.groups[group_id] = group
        shard.loading = False
        for producer_id, commit in shard.late_markers:
            self._end_txn_offsets(shard, producer_id, commit)
        shard.late_markers.clear()
        self.counters.loads_total += 1
        self._wake.set()
        log.info("%s-%d: loaded %d groups from %d records (offsets %d-%d) at leader epoch %d "
                 "in %d ms", OFFSETS_TOPIC, shard.index, len(shard.groups), records,
                 partition.log.log_start_offset, end, shard.leader_epoch, self.clock() - started)

    # ---------------------------------------------------------------------------- effects
    def _park(self) -> tuple[int, asyncio.Future[Any]]:
        self._next_token += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[self._next_token] = future
        return self._next_token, future

    async def _wait(self, token: int, future: asyncio.Future[Any], timeout_ms: int,
                    on_timeout: Answer) -> Answer:
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                answer: Answer = await future  # the Reply effect for this token: on_timeout's type
                return answer
        except TimeoutError:
            return on_timeout
        finally:
            self._waiting.pop(token, None)

    def _run(self, shard: Shard, group: Group | None, effects: list[Action]) -> None:
        for effect in effects:
            if isinstance(effect, Reply):
                if isinstance(effect.result, JoinResult) and effect.result.error == 0 \
                        and effect.result.members:
                    self.counters.rebalances_total += 1
                future = self._waiting.pop(effect.token, None)
                if future is not None and not future.done():
                    future.set_result(effect.result)
            elif group is not None:
                self.parts.spawn(self._store(shard, group, effect),
                                 f"store group {group.group_id}")
        self._wake.set()

    async def _store(self, shard: Shard, group: Group, store: Store) -> None:
        key = offsets_log.group_key(group.group_id)
        value = offsets_log.group_value(store.snapshot, self.wall_clock())
        error, _ = await self._append(shard, [(key, value)], _STORE_ERRORS)
        self.counters.stores_total += 1
        if error:
            self.counters.store_failures_total += 1
        if self.shards.get(shard.index) is shard and shard.groups.get(group.group_id) is group:
            self._run(shard, group, group.stored(self.clock(), store, error))

    async def _append(self, shard: Shard, records: Sequence[tuple[bytes, bytes | None]],
                      errors: dict[int, int], producer: tuple[int, int] | None = None
                      ) -> tuple[int, int]:
        """Append records to the shard's partition (in producer's transaction, if given) and
        wait until they are replicated: (error, offset of the first record)."""
        return await self.topic.append(shard.index, shard.leader_epoch, records, errors,
                                       producer=producer)

    # ---------------------------------------------------------------------------- timers
    async def run(self) -> None:
        """Tick groups when their earliest deadline comes (or at least every TICK_MS_MAX)."""
        while True:
            now = self.clock()
            deadline = now + TICK_MS_MAX
            for shard in list(self.shards.values()):
                if self._leading(shard) is None:
                    self._unload(shard, "leadership lost")
                    continue
                for group in list(shard.groups.values()):
                    if _forgettable(group):
                        del shard.groups[group.group_id]
                        continue
                    due = group.next_deadline_ms()
                    if due is not None and due <= now:
                        self._run(shard, group, group.tick(now))
                        due = group.next_deadline_ms()
                    if due is not None:
                        deadline = min(deadline, due)
            self._wake.clear()
            try:
                async with asyncio.timeout(max(deadline - self.clock(), 1) / 1000):
                    await self._wake.wait()
            except TimeoutError:
                pass

    def close(self) -> None:
        for shard in list(self.shards.values()):
            self._unload(shard, "broker stopping")

    # ----------------------------------------------------------------- FindCoordinator
    async def find(self, key: str, listener: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of the group's coordinator."""
        return await self.topic.find(key, listener)

    # ----------------------------------------------------------------- membership APIs
    async def join(self, group_id: str, req: JoinRequest) -> JoinResult:
        shard, error = self._shard(group_id)
        if shard is None:
            return JoinResult(error, member_id=req.member_id)
        group = shard.groups.get(group_id)
        if group is None:
            if req.member_id:
                return JoinResult(E.UNKNOWN_MEMBER_ID, member_id=req.member_id)
            group = shard.groups[group_id] = Group(group_id, self.settings, self.new_member_id)
        token, future = self._park()
        self._run(shard, group, group.join(self.clock(), req, token))
        limit = (max(req.rebalance_timeout_ms, req.session_timeout_ms)
                 + self.settings.initial_rebalance_delay_ms + PARK_MARGIN_MS)
        return await self._wait(token, future, limit,
                                JoinResult(E.REBALANCE_IN_PROGRESS, member_id=req.member_id))

    async def sync(self, group_id: str, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None,
                   assignments: Sequence[tuple[str, bytes]]) -> SyncResult:
        shard, error = self._shard(group_id)
        if shard is None:
            return SyncResult(error)
        group = shard.groups.get(group_id)
        if group is None:
            return SyncResult(E.UNKNOWN_MEMBER_ID)
        member = group.members.get(member_id)
        token, future = self._park()
        self._run(shard, group, group.sync(self.clock(), generation, member_id, instance_id,
                                           protocol_type, protocol_name, assignments, token))
        limit = (member.rebalance_timeout_ms if member else 0) + PARK_MARGIN_MS
        return await self._wait(token, future, limit, SyncResult(E.REBALANCE_IN_PROGRESS))

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None) -> int:
        shard, error = self._shard(group_id)
        if shard is None:
            return error
        group = shard.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        error = group.heartbeat(self.clock(), generation, member_id, instance_id)
        self._wake.set()
        return error

    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]
              ) -> tuple[int, list[int]]:
        """(top-level error, per-member errors)."""
        shard, error = self._shard(group_id)
        if shard is None:
            return error, [error] * len(members)
        group = shard.groups.get(group_id)
        if group is None:
            return 0, [E.UNKNOWN_MEMBER_ID] * len(members)
        errors, effects = group.leave(self.clock(), members)
        self._run(shard, group, effects)
        return 0, errors

    # ------------------------------------------------------------------------ offsets
    async def commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None, offsets: Sequence[OffsetToCommit], *,
                     producer: tuple[int, int] | None = None) -> dict[tuple[str, int], int]:
        """OffsetCommit: an error code per (topic, partition). With producer (id, epoch):
        TxnOffsetCommit, whose offsets are written in the producer's transaction and wait for
        its marker (txn_offsets.py); a member and generation, when named (KIP-447), are checked
        as a commit's are, so a zombie consumer-producer is fenced."""
        shard, error = self._shard(group_id)
        if shard is None:
            return {(o.topic, o.partition): error for o in offsets}
        group = shard.groups.get(group_id)
        if group is None:
            # Kafka: a group it does not know takes commits only from simple consumers.
            error = E.ILLEGAL_GENERATION if generation >= 0 else 0
        elif producer is not None and generation < 0 and not member_id and instance_id is None:
            error = 0  # TxnOffsetCommit v0-2 names no member
        else:
            error = group.commit_error(self.clock(), generation, member_id, instance_id)
        if error:
            return {(o.topic, o.partition): error for o in offsets}
        if group is None:
            group = shard.groups[group_id] = Group(group_id, self.settings, self.new_member_id)
        results: dict[tuple[str, int], int] = {}
        valid: list[OffsetToCommit] = []
        for o in offsets:
            tp = (o.topic, o.partition)
            if len(o.metadata.encode()) > self.parts.config.offset_metadata_max_bytes:
                results[tp] = E.OFFSET_METADATA_TOO_LARGE
            elif self.parts.metadata.partition(o.topic, o.partition) is None:
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                valid.append(o)
        if not valid:
            return results
        now = self.wall_clock()
        committed = [CommittedOffset(o.offset, o.leader_epoch, o.metadata, now) for o in valid]
        records = [(offsets_log.offset_key(group_id, o.topic, o.partition),
                    offsets_log.offset_value(c)) for o, c in zip(valid, committed, strict=True)]
        error, first = await self._append(shard, records, _COMMIT_ERRORS, producer=producer)
        if error:
            self.counters.commit_failures_total += len(valid)
        elif producer is not None and self.shards.get(shard.index) is shard:
            for i, (o, c) in enumerate(zip(valid, committed, strict=True)):
                shard.txn_offsets.add(producer[0], group_id, (o.topic, o.partition),
                                      replace(c, record_offset=first + i))
        elif self.shards.get(shard.index) is shard:
            # The group as it is now (an empty one may have been dropped meanwhile).
            group = shard.groups.setdefault(group_id, group)
            for i, (o, c) in enumerate(zip(valid, committed, strict=True)):
                group.apply_offset((o.topic, o.partition), replace(c, record_offset=first + i),
                                   first + i)
            self.counters.commits_total += len(valid)
        for o in valid:
            results[(o.topic, o.partition)] = error
        return results

    def fetch_offsets(self, group_id: str, wanted: Sequence[tuple[str, int]] | None
                      ) -> tuple[int, dict[tuple[str, int], CommittedOffset | None]]:
        """OffsetFetch: (error, committed offset per partition; None: none committed).
        wanted None: every partition the group committed."""
        shard, error = self._shard(group_id)
        if shard is None:
            return error, {}
        group = shard.groups.get(group_id)
        stored = group.offsets if group is not None else {}
        if wanted is None:
            return 0, dict(stored)
        return 0, {tp: stored.get(tp) for tp in wanted}

    def unstable(self, group_id: str, tps: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """The partitions whose offsets wait for a transaction's outcome (require_stable)."""
        shard = self.shards.get(self.partition_for(group_id))
        if shard is None:
            return set()
        return {tp for tp in tps if shard.txn_offsets.pending(group_id, tp)}

    def txn_marker(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker is replicated in offsets partition index: the producer's
        offsets there take effect (COMMIT) or are dropped (ABORT). A shard still loading
        applies it once loaded (its load may have stopped before the marker)."""
        shard = self.shards.get(index)
        if shard is None:
            return
        if shard.loading:
            shard.late_markers.append((producer_id, commit))
            return
        self._end_txn_offsets(shard, producer_id, commit)

    def _end_txn_offsets(self, shard: Shard, producer_id: int, commit: bool) -> None:
        applied = shard.txn_offsets.end(producer_id, commit)
        for group_id, tp, committed in applied:
            group = shard.groups.get(group_id)
            if group is None:
                group = shard.groups[group_id] = Group(group_id, self.settings,
                                                       self.new_member_id)
            group.apply_offset(tp, committed, committed.record_offset)
        if applied:
            self.counters.commits_total += len(applied)
            log.debug("%s-%d: producer %d's transaction committed %d offsets", OFFSETS_TOPIC,
                     shard.index, producer_id, len(applied))

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, int]:
        """DeleteGroups: an error per group. Only an Empty group goes (NON_EMPTY_GROUP else);
        its group record and every committed offset get a tombstone, replicated like a commit,
        and only then is the group dropped here (Dead: a parked request is told to look again),
        so a failed append leaves the group as it was, in memory and in the log."""
        results: dict[str, int] = {}
        for group_id in dict.fromkeys(group_ids):
            results[group_id] = await self._delete_group(group_id)
        return results

    async def _delete_group(self, group_id: str) -> int:
        shard, error = self._shard(group_id)
        if shard is None:
            return error
        group = shard.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.GROUP_ID_NOT_FOUND
        if group.state is not GroupState.EMPTY:
            return E.NON_EMPTY_GROUP
        records: list[tuple[bytes, bytes | None]] = [(offsets_log.group_key(group_id), None)]
        records += [(offsets_log.offset_key(group_id, t, p), None) for t, p in group.offsets]
        error, _ = await self._append(shard, records, _COMMIT_ERRORS)
        if error:
            return error
        if self.shards.get(shard.index) is shard and shard.groups.get(group_id) is group:
            del shard.groups[group_id]
            self._run(shard, None, group.unload(E.COORDINATOR_NOT_AVAILABLE))
        log.info("group %s: deleted with %d committed offsets", group_id, len(records) - 1)
        return 0

    async def delete_offsets(self, group_id: str, wanted: Sequence[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: (top-level error, an error per partition). A consumer group's members
        keep the offsets of the topics they subscribe to (GROUP_SUBSCRIBED_TO_TOPIC); a
        non-empty group of another protocol type keeps all of them (NON_EMPTY_GROUP), as in
        Kafka. Deleting an offset that was never committed succeeds."""
        shard, error = self._shard(group_id)
        if shard is None:
            return error, {}
        group = shard.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return E.GROUP_ID_NOT_FOUND, {}
        subscribed: set[str] = set()
        if group.state is not GroupState.EMPTY:
            if group.protocol_type != "consumer":
                return E.NON_EMPTY_GROUP, {}
            subscribed = group.subscribed_topics()
        results: dict[tuple[str, int], int] = {}
        doomed: list[tuple[str, int]] = []
        for tp in dict.fromkeys(wanted):
            if tp[0] in subscribed:
                results[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            elif self.parts.metadata.partition(*tp) is None:
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                results[tp] = 0
                if tp in group.offsets:
                    doomed.append(tp)
        if doomed:
            error, first = await self._append(
                shard, [(offsets_log.offset_key(group_id, t, p), None) for t, p in doomed],
                _COMMIT_ERRORS)
            if error:
                return error, {}
            if self.shards.get(shard.index) is shard:
                for i, tp in enumerate(doomed):
                    group.apply_offset(tp, None, first + i)
            log.info("group %s: deleted the committed offsets of %d partitions", group_id,
                     len(doomed))
        return 0, results

    def describe(self, group_id: str) -> tuple[int, Group | None]:
        shard, error = self._shard(group_id)
        if shard is None:
            return error, None
        return 0, shard.groups.get(group_id)

    def list_groups(self) -> tuple[int, list[Group]]:
        groups: list[Group] = []
        error = 0
        for shard in list(self.shards.values()):
            if self._leading(shard) is None:
                self._unload(shard, "leadership lost")
            elif shard.loading:
                error = E.COORDINATOR_LOAD_IN_PROGRESS
            else:
                groups += shard.groups.values()
        return error, groups

    # ------------------------------------------------------------------------ metrics
    def group_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for shard in list(self.shards.values()):
            for group in list(shard.groups.values()):
                counts[group.state.value] = counts.get(group.state.value, 0) + 1
        return counts

    def member_count(self) -> int:
        return sum(len(g.members) for s in list(self.shards.values())
                   for g in list(s.groups.values()))
