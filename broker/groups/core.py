"""`GroupCore`: the group coordinator's decisions, sans-IO (no I/O, no clock, no asyncio).

Theory of operation
-------------------
The core holds the `__consumer_offsets` partitions we lead as shards (coordinator_shards.py),
each with its groups (state.py's `Group`) and the offsets waiting for their transaction's outcome
(txn_offsets.py). A driver feeds it events and carries out the actions it returns, in order:
coordinator.py's `GroupCoordinator` in the broker, the group simulation's broker in tests/sim.

    events in                                          actions out
    partition_applied / leadership_lost / unload_all   Load(index, epoch)   read the log: replay()
    replay(...) each record, then loaded(...)                                each record, loaded()
    join / sync / leave / commit / delete_group /      Append(id, index, epoch, records, errors,
      delete_offsets, each with the driver's token            producer)     then appended(id, ..)
    appended(append_id, error, first offset)           Resolve(token, answer) answer a request
    tick(now_ms), at next_deadline_ms()
    txn_marker(index, producer id, commit)
    queries, answered at once: heartbeat, fetch_offsets, unstable, describe, list_groups, counts

- A request's answer is a `Resolve` of its token, in the same list or a later one. A JoinGroup
  or SyncGroup the group cannot answer yet is parked under its token until the group's Reply,
  at most its limit (the group's timeouts plus park_margin_ms: REBALANCE_IN_PROGRESS, at a tick);
  a Reply for a token no longer parked is dropped.
- A group's `Store` is appended as its metadata record and, once replicated, the group is told
  (`stored`). An OffsetCommit appends its offset records and applies them once replicated;
  TxnOffsetCommit's wait for the transaction's marker (`txn_marker`). DeleteGroups and
  OffsetDelete append tombstones, then drop what they name. Append errors map as Kafka's
  GroupMetadataManager maps them (_COMMIT_ERRORS, _STORE_ERRORS). An append's continuation
  looks again at the shard and the group first: either may be gone meanwhile.
- Before a lookup the driver reports a lost leadership (`leadership_lost`); unloading a shard
  answers its parked requests NOT_COORDINATOR.
- `tick` runs the groups that are due and the park limits, and forgets groups that never
  formed (a member id asked for and never used).

Time comes in as two ints: `now_ms`, the driver's monotonic clock (the groups' deadlines), and
`wall_ms`, what is written (commit timestamps, the group record's).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from epochlog.protocol.batch import CorruptBatch
from epochlog.protocol.control_records import marker_of
from epochlog.protocol.error_codes import ErrorCode

from ..coordinator_shards import Append, Load, Resolve, Shard, ShardedCore, Shards
from . import offsets_log
from .state import Action as GroupAction
from .state import (
    CommittedOffset,
    Group,
    GroupSettings,
    GroupSnapshot,
    GroupState,
    JoinRequest,
    JoinResult,
    Reply,
    Store,
    SyncResult,
    random_member_id,
)
from .txn_offsets import PendingOffsets

log = logging.getLogger("epochlog.broker")
E = ErrorCode

OFFSETS_TOPIC = "__consumer_offsets"
PARK_MARGIN_MS = 30_000  # a parked join/sync waits at most its group timeout plus this

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

TopicPartition = tuple[str, int]


# ------------------------------------------------------------------------------ inputs, answers
@dataclass(frozen=True)
class OffsetToCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str


@dataclass(frozen=True)
class LeaveAnswer:
    error: int  # top level
    member_errors: tuple[int, ...]


@dataclass(frozen=True)
class CommitAnswer:
    errors: dict[TopicPartition, int]


@dataclass(frozen=True)
class DeleteAnswer:
    """DeleteGroups' answer for one group; OffsetDelete's with an error per partition."""

    error: int
    partition_errors: dict[TopicPartition, int] = field(default_factory=dict)


GroupAnswer = JoinResult | SyncResult | LeaveAnswer | CommitAnswer | DeleteAnswer
Action = Resolve[GroupAnswer] | Append | Load


@dataclass
class Counters:
    loads_total: int = 0
    unloads_total: int = 0
    commits_total: int = 0  # offsets committed (replicated)
    commit_failures_total: int = 0
    stores_total: int = 0
    store_failures_total: int = 0
    rebalances_total: int = 0  # join phases completed


# --------------------------------------------------------------------------------- a shard
@dataclass
class _Replay:
    """What a load has read so far of the groups' records."""

    snapshots: dict[str, GroupSnapshot | None] = field(default_factory=dict)
    # group -> (group, partition) -> (offset of the record that set it, the offset or None)
    offsets: dict[str, dict[TopicPartition, tuple[int, CommittedOffset | None]]] = field(
        default_factory=dict)

    def take(self, group_id: str, tp: TopicPartition, at: int,
             committed: CommittedOffset | None) -> None:
        held = self.offsets.setdefault(group_id, {})
        if tp not in held or held[tp][0] < at:  # a transaction's offsets apply late
            held[tp] = (at, committed)


@dataclass(eq=False)
class GroupShard:
    """What a shard of `__consumer_offsets` holds."""

    groups: dict[str, Group] = field(default_factory=dict)
    txn_offsets: PendingOffsets = field(default_factory=PendingOffsets)
    late_markers: list[tuple[int, bool]] = field(default_factory=list)  # while loading
    replay: _Replay = field(default_factory=_Replay)  # while loading


@dataclass(frozen=True)
class _Parked:
    deadline_ms: int
    on_timeout: JoinResult | SyncResult


# an append's continuation: (now_ms, wall_ms, error, offset of its first record) -> actions
_Then = Callable[[int, int, int, int], list[Action]]


def _forgettable(group: Group) -> bool:
    """A group that never formed and holds nothing (e.g. a member id asked for and never
    used): nothing was stored for it, so it is dropped from memory."""
    return (group.state is GroupState.EMPTY and group.generation == 0 and not group.members
            and not group.pending_members and not group.offsets)


class GroupCore(ShardedCore[GroupShard, Action, _Then]):
    def __init__(self, settings: GroupSettings, *, partition_of: Callable[[str], int],
                 partition_known: Callable[[str, int], bool], metadata_max_bytes: int,
                 new_member_id: Callable[[str], str] = random_member_id,
                 park_margin_ms: int = PARK_MARGIN_MS) -> None:
        self.settings = settings
        self.partition_of = partition_of  # group id -> its offsets partition
        self.partition_known = partition_known  # whether the cluster has (topic, partition)
        self.metadata_max_bytes = metadata_max_bytes  # offset_metadata_max_bytes
        self.new_member_id = new_member_id
        self.park_margin_ms = park_margin_ms
        super().__init__(Shards(OFFSETS_TOPIC, "groups", GroupShard,
                                lambda held: len(held.groups)))
        self.counters = Counters()
        self._parked: dict[int, _Parked] = {}

    # ----------------------------------------------------------------------------- shards
    def _unloaded(self, shard: Shard[GroupShard]) -> list[Action]:
        replies: list[GroupAction] = []
        for group in shard.held.groups.values():
            replies += group.unload(E.NOT_COORDINATOR)
        shard.held.groups = {}
        self.counters.unloads_total += 1
        return self._replies(replies)

    def replay(self, index: int, leader_epoch: int, offset: int, key: bytes | None,
               value: bytes | None, *, producer_id: int = -1, transactional: bool = False,
               control: bool = False) -> None:
        """One record of the partition being loaded, in log order (with its batch's producer
        id and whether the batch is transactional or a control batch)."""
        shard = self.shards.loading(index, leader_epoch)
        if shard is None:
            return
        shard.replayed += 1
        held = shard.held
        if control:
            try:
                commit = marker_of(key, value).commit
            except CorruptBatch as exc:
                log.error("%s-%d: skipped a control record: %s", OFFSETS_TOPIC, index, exc)
                return
            for group_id, tp, done in held.txn_offsets.end(producer_id, commit):
                held.replay.take(group_id, tp, done.record_offset, done)
            return
        try:
            parsed = offsets_log.parse(key, value, offset)
        except offsets_log.BadRecord as exc:
            log.error("%s-%d: skipped: %s", OFFSETS_TOPIC, index, exc)
            return
        if isinstance(parsed, offsets_log.GroupRecord):
            held.replay.snapshots[parsed.group_id] = parsed.snapshot
        elif parsed is not None and transactional and parsed.committed is not None:
            held.txn_offsets.add(producer_id, parsed.group_id, (parsed.topic, parsed.partition),
                                 parsed.committed)
        elif parsed is not None:
            held.replay.take(parsed.group_id, (parsed.topic, parsed.partition), offset,
                             parsed.committed)

    def loaded(self, now_ms: int, index: int, leader_epoch: int, log_start: int, log_end: int,
               took_ms: int) -> list[Action]:
        """The partition's log, log_start to log_end, is replayed: its groups are made."""
        shard = self.shards.loading(index, leader_epoch)
        if shard is None:
            return []
        held, replay = shard.held, shard.held.replay
        for group_id in sorted(replay.snapshots.keys() | replay.offsets.keys()):  # replayable
            snap = replay.snapshots.get(group_id)
            group = (Group.from_snapshot(snap, self.settings, now_ms, self.new_member_id)
                     if snap is not None else self._new_group(group_id))
            for tp, (_, committed) in replay.offsets.get(group_id, {}).items():
                if committed is not None:
                    group.offsets[tp] = committed
            if group.members or group.offsets or snap is not None:
                held.groups[group_id] = group
        held.replay = _Replay()
        for producer_id, commit in held.late_markers:
            self._end_txn_offsets(shard, producer_id, commit)
        held.late_markers.clear()
        self.counters.loads_total += 1
        self.shards.loaded(shard, log_start, log_end, took_ms)
        return []

    def _shard(self, group_id: str) -> Shard[GroupShard] | int:
        return self.shards.lookup(self.partition_of(group_id))

    def _new_group(self, group_id: str) -> Group:
        return Group(group_id, self.settings, self.new_member_id)

    # --------------------------------------------------------------------------- actions
    def _run(self, wall_ms: int, shard: Shard[GroupShard], group: Group,
             effects: list[GroupAction]) -> list[Action]:
        """A group's actions as ours: its Replies resolve parked requests, its Stores append."""
        actions: list[Action] = []
        for effect in effects:
            if isinstance(effect, Reply):
                actions += self._replies([effect])
            else:
                actions.append(self._store(wall_ms, shard, group, effect))
        return actions

    def _replies(self, effects: list[GroupAction]) -> list[Action]:
        actions: list[Action] = []
        for reply in effects:
            assert isinstance(reply, Reply), reply  # an unloading group stores nothing
            if isinstance(reply.result, JoinResult) and reply.result.error == 0 \
                    and reply.result.members:
                self.counters.rebalances_total += 1
            if self._parked.pop(reply.token, None) is not None:
                actions.append(Resolve(reply.token, reply.result))
        return actions

    def _park(self, token: int, until_ms: int, on_timeout: JoinResult | SyncResult) -> None:
        self._parked[token] = _Parked(until_ms, on_timeout)

    def appended(self, now_ms: int, wall_ms: int, append_id: int, error: int,
                 first_offset: int) -> list[Action]:
        """An Append is replicated (error 0; its first record at first_offset) or failed."""
        return self._continuation(append_id)(now_ms, wall_ms, error, first_offset)

    def _store(self, wall_ms: int, shard: Shard[GroupShard], group: Group,
               store: Store) -> Append:
        records = [(offsets_log.group_key(group.group_id),
                    offsets_log.group_value(store.snapshot, wall_ms))]

        def stored(now_ms: int, wall_ms: int, error: int, _: int) -> list[Action]:
            self.counters.stores_total += 1
            if error:
                self.counters.store_failures_total += 1
            if not self.shards.current(shard) or shard.held.groups.get(group.group_id) is not group:
                return []
            return self._run(wall_ms, shard, group, group.stored(now_ms, store, error))

        return self._append(shard, records, _STORE_ERRORS, stored)

    # --------------------------------------------------------------------------- timers
    def tick(self, now_ms: int, wall_ms: int) -> list[Action]:
        """The park limits and the groups that are due; never-formed groups are forgotten."""
        actions: list[Action] = []
        for token, parked in list(self._parked.items()):
            if parked.deadline_ms <= now_ms:
                del self._parked[token]
                actions.append(Resolve(token, parked.on_timeout))
        for shard in self.shards:
            groups = shard.held.groups
            for group in list(groups.values()):
                if _forgettable(group):
                    del groups[group.group_id]
                    continue
                due = group.next_deadline_ms()
                if due is not None and due <= now_ms:
                    actions += self._run(wall_ms, shard, group, group.tick(now_ms))
        return actions

    def next_deadline_ms(self) -> int | None:
        deadlines = [p.deadline_ms for p in self._parked.values()]
        for shard in self.shards:
            deadlines += [due for g in shard.held.groups.values()
                          if not _forgettable(g) and (due := g.next_deadline_ms()) is not None]
        return min(deadlines, default=None)

    # ------------------------------------------------------------------- membership APIs
    def join(self, now_ms: int, wall_ms: int, group_id: str, req: JoinRequest,
             token: int) -> list[Action]:
        shard = self._shard(group_id)
        if isinstance(shard, int):
            return [Resolve(token, JoinResult(shard, member_id=req.member_id))]
        group = shard.held.groups.get(group_id)
        if group is None:
            if req.member_id:
                return [Resolve(token, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=req.member_id))]
            group = shard.held.groups[group_id] = self._new_group(group_id)
        limit_ms = (max(req.rebalance_timeout_ms, req.session_timeout_ms)
                    + self.settings.initial_rebalance_delay_ms + self.park_margin_ms)
        self._park(token, now_ms + limit_ms,
                   JoinResult(E.REBALANCE_IN_PROGRESS, member_id=req.member_id))
        return self._run(wall_ms, shard, group, group.join(now_ms, req, token))

    def sync(self, now_ms: int, wall_ms: int, group_id: str, generation: int, member_id: str,
             instance_id: str | None, protocol_type: str | None, protocol_name: str | None,
             assignments: Sequence[tuple[str, bytes]], token: int) -> list[Action]:
        shard = self._shard(group_id)
        if isinstance(shard, int):
            return [Resolve(token, SyncResult(shard))]
        group = shard.held.groups.get(group_id)
        if group is None:
            return [Resolve(token, SyncResult(E.UNKNOWN_MEMBER_ID))]
        member = group.members.get(member_id)
        limit_ms = (member.rebalance_timeout_ms if member else 0) + self.park_margin_ms
        self._park(token, now_ms + limit_ms, SyncResult(E.REBALANCE_IN_PROGRESS))
        return self._run(wall_ms, shard, group, group.sync(
            now_ms, generation, member_id, instance_id, protocol_type, protocol_name,
            assignments, token))

    def heartbeat(self, now_ms: int, group_id: str, generation: int, member_id: str,
                  instance_id: str | None) -> int:
        shard = self._shard(group_id)
        if isinstance(shard, int):
            return shard
        group = shard.held.groups.get(group_id)
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        return group.heartbeat(now_ms, generation, member_id, instance_id)

    def leave(self, now_ms: int, wall_ms: int, group_id: str,
              members: Sequence[tuple[str, str | None]], token: int) -> list[Action]:
        """LeaveGroup, each member by (member id, instance id)."""
        shard = self._shard(group_id)
        if isinstance(shard, int):
            return [Resolve(token, LeaveAnswer(shard, (shard,) * len(members)))]
        group = shard.held.groups.get(group_id)
        if group is None:
            return [Resolve(token, LeaveAnswer(0, (E.UNKNOWN_MEMBER_ID,) * len(members)))]
        errors, effects = group.leave(now_ms, members)
        return [*self._run(wall_ms, shard, group, effects),
                Resolve(token, LeaveAnswer(0, tuple(errors)))]

    # --------------------------------------------------------------------------- offsets
    def commit(self, now_ms: int, wall_ms: int, group_id: str, generation: int,
               member_id: str, instance_id: str | None, offsets: Sequence[OffsetToCommit],
               token: int, *, producer: tuple[int, int] | None = None) -> list[Action]:
        """OffsetCommit: an error per (topic, partition). With producer (id, epoch):
        TxnOffsetCommit, whose offsets are written in the producer's transaction and wait for
        its marker (txn_offsets.py); a member and generation, when named (KIP-447), are checked
        as a commit's are, so a zombie consumer-producer is fenced."""
        shard = self._shard(group_id)
        if isinstance(shard, int):
            return [self._committed(token, offsets, shard)]
        group = shard.held.groups.get(group_id)
        if group is None:
            # Kafka: a group it does not know takes commits only from simple consumers.
            error = E.ILLEGAL_GENERATION if generation >= 0 else 0
        elif producer is not None and generation < 0 and not member_id and instance_id is None:
            error = 0  # TxnOffsetCommit v0-2 names no member
        else:
            error = group.commit_error(now_ms, generation, member_id, instance_id)
        if error:
            return [self._committed(token, offsets, error)]
        if group is None:
            group = shard.held.groups[group_id] = self._new_group(group_id)
        results: dict[TopicPartition, int] = {}
        valid: list[OffsetToCommit] = []
        for o in offsets:
            tp = (o.topic, o.partition)
            if len(o.metadata.encode()) > self.metadata_max_bytes:
                results[tp] = E.OFFSET_METADATA_TOO_LARGE
            elif not self.partition_known(o.topic, o.partition):
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                valid.append(o)
        if not valid:
            return [Resolve(token, CommitAnswer(results))]
        committed = [CommittedOffset(o.offset, o.leader_epoch, o.metadata, wall_ms) for o in valid]
        records = [(offsets_log.offset_key(group_id, o.topic, o.partition),
                    offsets_log.offset_value(c)) for o, c in zip(valid, committed, strict=True)]
        first_group = group

        def appended(now_ms: int, wall_ms: int, error: int, first: int) -> list[Action]:
            taken = [((o.topic, o.partition), replace(c, record_offset=first + i))
                     for i, (o, c) in enumerate(zip(valid, committed, strict=True))]
            if error:
                self.counters.commit_failures_total += len(valid)
            elif producer is not None and self.shards.current(shard):
                for tp, c in taken:
                    shard.held.txn_offsets.add(producer[0], group_id, tp, c)
            elif self.shards.current(shard):
                # The group as it is now (an empty one may have been dropped meanwhile).
                group = shard.held.groups.setdefault(group_id, first_group)
                for tp, c in taken:
                    group.apply_offset(tp, c, c.record_offset)
                self.counters.commits_total += len(valid)
            results.update(((o.topic, o.partition), error) for o in valid)
            return [Resolve(token, CommitAnswer(results))]

        return [self._append(shard, records, _COMMIT_ERRORS, appended, producer)]

    @staticmethod
    def _committed(token: int, offsets: Sequence[OffsetToCommit], error: int) -> Action:
        return Resolve(token, CommitAnswer({(o.topic, o.partition): error for o in offsets}))

    def fetch_offsets(self, group_id: str, wanted: Sequence[TopicPartition] | None
                      ) -> tuple[int, dict[TopicPartition, CommittedOffset | None]]:
        """OffsetFetch: (error, committed offset per partition; None: none committed).
        wanted None: every partition the group committed."""
        shard = self._shard(group_id)
        if isinstance(shard, int):
            return shard, {}
        group = shard.held.groups.get(group_id)
        stored = group.offsets if group is not None else {}
        if wanted is None:
            return 0, dict(stored)
        return 0, {tp: stored.get(tp) for tp in wanted}

    def unstable(self, group_id: str, tps: Sequence[TopicPartition]) -> set[TopicPartition]:
        """The partitions whose offsets wait for a transaction's outcome (require_stable)."""
        shard = self.shards.lookup(self.partition_of(group_id))
        if isinstance(shard, int):
            return set()
        return {tp for tp in tps if shard.held.txn_offsets.pending(group_id, tp)}

    def txn_marker(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker is replicated in offsets partition index: the producer's
        offsets there take effect (COMMIT) or are dropped (ABORT). A shard still loading
        applies it once loaded (its load may have stopped before the marker)."""
        shard = self.shards.get(index)
        if shard is None:
            return
        if shard.loading:
            shard.held.late_markers.append((producer_id, commit))
            return
        self._end_txn_offsets(shard, producer_id, commit)

    def _end_txn_offsets(self, shard: Shard[GroupShard], producer_id: int, commit: bool) -> None:
        applied = shard.held.txn_offsets.end(producer_id, commit)
        for group_id, tp, committed in applied:
            group = shard.held.groups.get(group_id)
            if group is None:
                group = shard.held.groups[group_id] = self._new_group(group_id)
            group.apply_offset(tp, committed, committed.record_offset)
        if applied:
            self.counters.commits_total += len(applied)
            log.debug("%s-%d: producer %d's transaction committed %d offsets", OFFSETS_TOPIC,
                      shard.index, producer_id, len(applied))

    # ------------------------------------------------------------------------- deleting
    def delete_group(self, group_id: str, token: int) -> list[Action]:
        """DeleteGroups, one group. Only an Empty group goes (NON_EMPTY_GROUP else); its group
        record and every committed offset get a tombstone, replicated like a commit, and only
        then is the group dropped here (Dead: a parked request is told to look again), so a
        failed append leaves the group as it was, in memory and in the log."""
        found = self._deletable(group_id, token)
        if not isinstance(found, tuple):
            return [found]
        shard, group = found
        if group.state is not GroupState.EMPTY:
            return [Resolve(token, DeleteAnswer(E.NON_EMPTY_GROUP))]
        records: list[tuple[bytes, bytes | None]] = [(offsets_log.group_key(group_id), None)]
        records += [(offsets_log.offset_key(group_id, t, p), None) for t, p in group.offsets]

        def deleted(now_ms: int, wall_ms: int, error: int, _: int) -> list[Action]:
            if error:
                return [Resolve(token, DeleteAnswer(error))]
            actions: list[Action] = []
            if self.shards.current(shard) and shard.held.groups.get(group_id) is group:
                del shard.held.groups[group_id]
                actions += self._replies(group.unload(E.COORDINATOR_NOT_AVAILABLE))
            log.info("group %s: deleted with %d committed offsets", group_id, len(records) - 1)
            return [*actions, Resolve(token, DeleteAnswer(0))]

        return [self._append(shard, records, _COMMIT_ERRORS, deleted)]

    def delete_offsets(self, group_id: str, wanted: Sequence[TopicPartition],
                       token: int) -> list[Action]:
        """OffsetDelete: a top-level error and an error per partition. A consumer group's
        members keep the offsets of the topics they subscribe to (GROUP_SUBSCRIBED_TO_TOPIC); a
        non-empty group of another protocol type keeps all of them (NON_EMPTY_GROUP), as in
        Kafka. Deleting an offset that was never committed succeeds."""
        found = self._deletable(group_id, token)
        if not isinstance(found, tuple):
            return [found]
        shard, group = found
        subscribed: set[str] = set()
        if group.state is not GroupState.EMPTY:
            if group.protocol_type != "consumer":
                return [Resolve(token, DeleteAnswer(E.NON_EMPTY_GROUP))]
            subscribed = group.subscribed_topics()
        results: dict[TopicPartition, int] = {}
        doomed: list[TopicPartition] = []
        for tp in dict.fromkeys(wanted):
            if tp[0] in subscribed:
                results[tp] = E.GROUP_SUBSCRIBED_TO_TOPIC
            elif not self.partition_known(*tp):
                results[tp] = E.UNKNOWN_TOPIC_OR_PARTITION
            else:
                results[tp] = 0
                if tp in group.offsets:
                    doomed.append(tp)
        if not doomed:
            return [Resolve(token, DeleteAnswer(0, results))]

        def deleted(now_ms: int, wall_ms: int, error: int, first: int) -> list[Action]:
            if error:
                return [Resolve(token, DeleteAnswer(error))]
            if self.shards.current(shard):
                for i, tp in enumerate(doomed):
                    group.apply_offset(tp, None, first + i)
            log.info("group %s: deleted the committed offsets of %d partitions", group_id,
                     len(doomed))
            return [Resolve(token, DeleteAnswer(0, results))]

        return [self._append(
            shard, [(offsets_log.offset_key(group_id, t, p), None) for t, p in doomed],
            _COMMIT_ERRORS, deleted)]

    def _deletable(self, group_id: str, token: int
                   ) -> tuple[Shard[GroupShard], Group] | Action:
        """The group a deletion names, or the deletion's answer (it is not here)."""
        shard = self._shard(group_id)
        if isinstance(shard, int):
            return Resolve(token, DeleteAnswer(shard))
        group = shard.held.groups.get(group_id)
        if group is None or group.state is GroupState.DEAD:
            return Resolve(token, DeleteAnswer(E.GROUP_ID_NOT_FOUND))
        return shard, group

    # ------------------------------------------------------------------------- describing
    def describe(self, group_id: str) -> tuple[int, Group | None]:
        shard = self._shard(group_id)
        if isinstance(shard, int):
            return shard, None
        return 0, shard.held.groups.get(group_id)

    def list_groups(self) -> tuple[int, list[Group]]:
        groups: list[Group] = []
        error = 0
        for shard in self.shards:
            if shard.loading:
                error = E.COORDINATOR_LOAD_IN_PROGRESS
            else:
                groups += shard.held.groups.values()
        return error, groups

    def group_counts(self) -> dict[str, int]:
        """Groups coordinated here by state, for the metrics."""
        return dict(Counter(g.state.value for s in self.shards
                            for g in list(s.held.groups.values())))

    def member_count(self) -> int:
        return sum(len(g.members) for s in self.shards for g in list(s.held.groups.values()))
