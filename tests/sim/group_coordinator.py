"""Simulated group coordinators: the broker's real `Group` state machine behind the wire.

Theory of operation
-------------------
`GroupBroker` is a broker as far as one consumer group is concerned. Of the brokers, one at a
time coordinates the group (`GroupCluster.coordinator`); it holds the real
`epochlog.broker.groups.state.Group` and drives it as `broker/groups/coordinator.py` does: a
JoinGroup or SyncGroup parks with a token until the group answers it (or its park limit passes:
REBALANCE_IN_PROGRESS), a `Store` effect is an append to the offsets log (a delay, then
`stored()`), commits are validated by `commit_error()` and applied once appended, and the
group's timers run at its `next_deadline_ms()`. The offsets log is `GroupCluster.durable`: the last
stored group snapshot and the committed offsets, which survive crashes and moves.

The coordinator moves: `move(to)` unloads the group on the old broker (parked requests are
answered NOT_COORDINATOR), and after a gap the new broker loads it from the durable snapshot
(COORDINATOR_LOAD_IN_PROGRESS meanwhile), as a leader change of the offsets partition does. A
crash of the coordinating broker loses the loaded group and every parked request; the harness
then moves the group to another broker.

A broker that does not coordinate answers NOT_COORDINATOR; FindCoordinator (the simulation's key
FIND) is answered by any broker with the coordinator of the moment (COORDINATOR_NOT_AVAILABLE
during a gap).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epochlog.broker.groups.state import (
    Action,
    CommittedOffset,
    Group,
    GroupSettings,
    GroupSnapshot,
    JoinRequest,
    JoinResult,
    Reply,
    Store,
    SyncResult,
)
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.heartbeat import HeartbeatResponse
from epochlog.protocol.apis.join_group import JoinGroupResponse, JoinGroupResponseMember
from epochlog.protocol.apis.leave_group import LeaveGroupResponse
from epochlog.protocol.apis.offset_commit import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from epochlog.protocol.apis.offset_fetch import (
    OffsetFetchResponse,
    OffsetFetchResponsePartition,
    OffsetFetchResponseTopic,
)
from epochlog.protocol.apis.sync_group import SyncGroupResponse
from epochlog.protocol.error_codes import ErrorCode as E

from .scheduler import Node, Scheduler

if TYPE_CHECKING:
    from .group_checkers import GroupCheckers

FIND = -10  # the simulation's FindCoordinator: request None, answer (error, node id)
PARK_MARGIN_MS = 500  # as coordinator.py's
APPEND_MS_MIN, APPEND_MS_MAX = 1, 6
LOAD_MS_MIN, LOAD_MS_MAX = 10, 80

TP = tuple[str, int]


@dataclass
class Durable:
    """The group's records in the offsets log: what a new coordinator loads."""
    snapshot: GroupSnapshot | None = None
    offsets: dict[TP, tuple[int, int]] = field(default_factory=dict)  # tp -> (offset, seq)
    seq: int = 0


class GroupCluster:
    """Which broker coordinates the group, and the offsets log they share."""

    def __init__(self, sim: Scheduler, group_id: str, settings: GroupSettings,
                 checkers: GroupCheckers) -> None:
        self.sim = sim
        self.group_id = group_id
        self.settings = settings
        self.checkers = checkers
        self.brokers: dict[int, GroupBroker] = {}
        self.coordinator: int | None = None
        self.durable = Durable()
        self.moves = 0
        self.commits = 0
        self._member_ids = 0

    def new_member_id(self, client_id: str) -> str:
        self._member_ids += 1  # deterministic, unlike the broker's uuid4
        return f"{client_id}-{self._member_ids}"

    def move(self, to: int) -> None:
        """The group moves to broker `to` (unloaded from the current one now, loaded there
        after a gap and a load)."""
        old = self.coordinator
        if old is not None:
            self.brokers[old].unload()
        self.coordinator = None
        self.moves += 1
        self.sim.log(f"group: coordinator moves {old} -> {to}")
        broker = self.brokers[to]
        broker.timer(self.sim.rng.randint(LOAD_MS_MIN, LOAD_MS_MAX), broker.load)
        broker.loading = True


class GroupBroker(Node):
    def __init__(self, sim: Scheduler, node_id: int, cluster: GroupCluster) -> None:
        super().__init__(sim, node_id, f"broker{node_id}")
        self.cluster = cluster
        self.group: Group | None = None
        self.loading = False
        self._parked: dict[int, Callable[[Any], None]] = {}
        self._next_token = 0
        self._tick_at = -1
        self._load = 0  # bumped at every load and unload: late appends of an old load fail

    # ------------------------------------------------------------------ loading
    def load(self) -> None:
        c = self.cluster
        now = self.sim.now_ms
        snap = c.durable.snapshot
        if snap is not None:
            group = Group.from_snapshot(snap, c.settings, now, c.new_member_id)
        else:
            group = Group(c.group_id, c.settings, c.new_member_id)
        for tp, (offset, seq) in c.durable.offsets.items():
            group.apply_offset(tp, CommittedOffset(offset, 0, "", now, seq), seq)
        self.group, self.loading = group, False
        self._load += 1
        c.coordinator = self.node_id
        self.sim.log(f"{self.name}: loaded {group}")

    def unload(self) -> None:
        group, self.group = self.group, None
        self._load += 1
        self.loading = False
        if group is not None:
            self._run(group.unload(E.NOT_COORDINATOR))

    def on_crash(self) -> None:
        self.group, self.loading = None, False
        self._parked.clear()
        self._tick_at = -1
        if self.cluster.coordinator == self.node_id:
            self.cluster.coordinator = None

    def after_event(self) -> None:
        group = self.group
        if group is None:
            return
        deadline = group.next_deadline_ms()
        if deadline is not None and (self._tick_at < self.sim.now_ms or deadline < self._tick_at):
            self._tick_at = deadline
            self.timer(deadline - self.sim.now_ms, self._tick, self._load)

    def _tick(self, load: int) -> None:
        if load == self._load and self.group is not None:
            self._tick_at = -1
            self._run(self.group.tick(self.sim.now_ms))

    # ------------------------------------------------------------------ effects
    def _run(self, effects: list[Action]) -> None:
        for effect in effects:
            if isinstance(effect, Reply):
                reply = self._parked.pop(effect.token, None)
                if reply is not None:
                    reply(effect.result)
            else:
                self.timer(self.sim.rng.randint(APPEND_MS_MIN, APPEND_MS_MAX), self._stored,
                           effect, self._load)

    def _stored(self, store: Store, load: int) -> None:
        if load != self._load or self.group is None:
            return  # the group moved meanwhile: that append failed with the leadership
        self.cluster.durable.snapshot = store.snapshot
        self._run(self.group.stored(self.sim.now_ms, store, 0))

    def _park(self, reply: Callable[[Any], None], limit_ms: int, on_timeout: Any) -> int:
        self._next_token += 1
        token = self._next_token
        self._parked[token] = reply
        self.timer(limit_ms, self._park_expired, token, on_timeout)
        return token

    def _park_expired(self, token: int, on_timeout: Any) -> None:
        reply = self._parked.pop(token, None)
        if reply is not None:
            reply(on_timeout)

    # ------------------------------------------------------------------ requests
    def serve(self, key: int, version: int, request: Any, reply: Callable[[Any], None],
              source: int, conn: Any = None) -> None:
        if key == FIND:
            c = self.cluster.coordinator
            reply((E.COORDINATOR_NOT_AVAILABLE, -1) if c is None else (0, c))
            return
        error = 0
        if self.loading:
            error = E.COORDINATOR_LOAD_IN_PROGRESS
        elif self.group is None:
            error = E.NOT_COORDINATOR
        handler = _HANDLERS[key]
        handler(self, request, reply, error)

    def _join(self, req: Any, reply: Callable[[Any], None], error: int) -> None:
        if error:
            reply(JoinGroupResponse(error_code=error, member_id=req.member_id))
            return
        assert self.group is not None
        join = JoinRequest(
            member_id=req.member_id, group_instance_id=req.group_instance_id,
            client_id=req.member_id.split("-")[0] or req.group_instance_id or "member",
            client_host="sim", session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=req.rebalance_timeout_ms, protocol_type=req.protocol_type,
            protocols=tuple((p.name, p.metadata) for p in req.protocols),
            require_known_member_id=True)
        limit = max(req.rebalance_timeout_ms, req.session_timeout_ms) + \
            self.cluster.settings.initial_rebalance_delay_ms + PARK_MARGIN_MS
        token = self._park(lambda r: reply(_join_answer(r)), limit,
                           JoinResult(E.REBALANCE_IN_PROGRESS, member_id=req.member_id))
        self._run(self.group.join(self.sim.now_ms, join, token))

    def _sync(self, req: Any, reply: Callable[[Any], None], error: int) -> None:
        if error:
            reply(SyncGroupResponse(error_code=error))
            return
        assert self.group is not None
        member = self.group.members.get(req.member_id)
        limit = (member.rebalance_timeout_ms if member else 0) + PARK_MARGIN_MS
        token = self._park(lambda r: reply(SyncGroupResponse(
            error_code=r.error, assignment=r.assignment)), limit,
            SyncResult(E.REBALANCE_IN_PROGRESS))
        self._run(self.group.sync(
            self.sim.now_ms, req.generation_id, req.member_id, req.group_instance_id,
            req.protocol_type, req.protocol_name,
            [(a.member_id, a.assignment) for a in req.assignments], token))

    def _heartbeat(self, req: Any, reply: Callable[[Any], None], error: int) -> None:
        if not error:
            assert self.group is not None
            error = self.group.heartbeat(self.sim.now_ms, req.generation_id, req.member_id,
                                         req.group_instance_id)
        reply(HeartbeatResponse(error_code=error))

    def _leave(self, req: Any, reply: Callable[[Any], None], error: int) -> None:
        if not error:
            assert self.group is not None
            leaving = [(m.member_id, m.group_instance_id) for m in req.members] or \
                [(req.member_id, None)]
            _, effects = self.group.leave(self.sim.now_ms, leaving)
            self._run(effects)
        reply(LeaveGroupResponse(error_code=error))

    def _commit(self, req: Any, reply: Callable[[Any], None], error: int) -> None:
        if not error:
            assert self.group is not None
            error = self.group.commit_error(self.sim.now_ms, req.generation_id_or_member_epoch,
                                            req.member_id, req.group_instance_id)
        if error:
            reply(_commit_answer(req, error))
            return
        # The records' places in the offsets log are taken now, in the order requests are
        # served; appends may finish out of order, and the later record wins (apply_offset)
        c = self.cluster
        first = c.durable.seq + 1
        c.durable.seq += sum(len(t.partitions) for t in req.topics)
        self.timer(self.sim.rng.randint(APPEND_MS_MIN, APPEND_MS_MAX), self._committed, req,
                   reply, self._load, first)

    def _committed(self, req: Any, reply: Callable[[Any], None], load: int, seq: int) -> None:
        if load != self._load or self.group is None:
            reply(_commit_answer(req, E.NOT_COORDINATOR))  # the append lost its leadership
            return
        c = self.cluster
        for t in req.topics:
            for p in t.partitions:
                tp = (t.name, p.partition_index)
                before = c.durable.offsets.get(tp)
                if before is not None and before[1] > seq:
                    seq += 1
                    continue  # a later record of this partition is already applied
                c.checkers.committed(tp, None if before is None else before[0],
                                     p.committed_offset, req.member_id,
                                     req.generation_id_or_member_epoch)
                c.durable.offsets[tp] = (p.committed_offset, seq)
                self.sim.log(f"{self.name}: commit {tp[0]}-{tp[1]}={p.committed_offset} by "
                             f"{req.member_id} gen {req.generation_id_or_member_epoch}")
                self.group.apply_offset(tp, CommittedOffset(
                    p.committed_offset, p.committed_leader_epoch, "", self.sim.now_ms, seq), seq)
                c.commits += 1
                seq += 1
        reply(_commit_answer(req, 0))

    def _fetch(self, req: Any, reply: Callable[[Any], None], error: int) -> None:
        if error:
            reply(OffsetFetchResponse(error_code=error))
            return
        assert self.group is not None
        offsets = self.group.offsets
        topics = []
        for t in req.topics:
            parts = []
            for index in t.partition_indexes:
                got = offsets.get((t.name, index))
                parts.append(OffsetFetchResponsePartition(
                    partition_index=index, committed_offset=-1 if got is None else got.offset,
                    committed_leader_epoch=-1 if got is None else got.leader_epoch))
            topics.append(OffsetFetchResponseTopic(name=t.name, partitions=parts))
        reply(OffsetFetchResponse(topics=topics))


_HANDLERS: dict[int, Callable[[GroupBroker, Any, Callable[[Any], None], int], None]] = {
    ApiKey.JOIN_GROUP: GroupBroker._join,
    ApiKey.SYNC_GROUP: GroupBroker._sync,
    ApiKey.HEARTBEAT: GroupBroker._heartbeat,
    ApiKey.LEAVE_GROUP: GroupBroker._leave,
    ApiKey.OFFSET_COMMIT: GroupBroker._commit,
    ApiKey.OFFSET_FETCH: GroupBroker._fetch,
}


def _join_answer(r: JoinResult) -> JoinGroupResponse:
    return JoinGroupResponse(
        error_code=r.error, generation_id=r.generation, protocol_type=r.protocol_type,
        protocol_name=r.protocol_name, leader=r.leader, member_id=r.member_id,
        members=[JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                 for m, i, md in r.members])


def _commit_answer(req: Any, error: int) -> OffsetCommitResponse:
    return OffsetCommitResponse(topics=[OffsetCommitResponseTopic(
        name=t.name, partitions=[OffsetCommitResponsePartition(
            partition_index=p.partition_index, error_code=error) for p in t.partitions])
        for t in req.topics])
