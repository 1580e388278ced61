"""Simulated group coordinators: the broker's real group coordinator core behind the wire.

Theory of operation
-------------------
`GroupBroker` is a broker as far as one consumer group is concerned. Each process life runs the
real `epochlog.broker.groups.core.GroupCore`, driven by a `GroupDriver` (core_driver.py) as
broker/groups/coordinator.py drives it in the broker: a request is one of the core's events with
a token and is answered by the core's `Resolve`; the core is ticked at its `next_deadline_ms()`.
So everything the coordinator decides (parking JoinGroup and SyncGroup and their limits, stores,
commits and their checks, loading, unloading, timers) is the real code. What is simulated is the
offsets partition:

`GroupCluster` holds it (its records, in Kafka's formats as offsets_log.py writes them, read back
by the core's real load; its leader epoch) and which broker leads it, the coordinator. An
`Append` takes its places in the log at once, in the order the coordinator asks, and is
replicated after a delay (then `appended`) if its epoch is still the log's; otherwise it fails
(NOT_LEADER_OR_FOLLOWER) and is not in the log. The checkers see each committed offset as its
record is replicated, in log order.

`move(to)` is a leader election: the epoch goes up, the old leader hears it no longer leads (its
parked requests are answered NOT_COORDINATOR), the new one that it leads (LOADING:
COORDINATOR_LOAD_IN_PROGRESS); its `Load` replays the log after a gap. A crash of the
coordinating broker loses its core and every parked request; the harness elects another.

A broker that does not coordinate answers NOT_COORDINATOR (its core holds no shard);
FindCoordinator (the simulation's key FIND) is answered by any broker with the coordinator of the
moment (COORDINATOR_NOT_AVAILABLE during a gap).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from epochlog.broker.coordinator_shards import Append, Load
from epochlog.broker.groups import offsets_log
from epochlog.broker.groups.core import GroupCore, OffsetToCommit
from epochlog.broker.groups.state import GroupSettings, JoinRequest, JoinResult
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

from .core_driver import CoreDriver
from .scheduler import Node, Scheduler

if TYPE_CHECKING:
    from .group_checkers import GroupCheckers

FIND = -10  # the simulation's FindCoordinator: request None, answer (error, node id)
PARK_MARGIN_MS = 500  # core.PARK_MARGIN_MS (30 s), scaled down
APPEND_MS_MIN, APPEND_MS_MAX = 1, 6
LOAD_MS_MIN, LOAD_MS_MAX = 10, 80
INDEX = 0  # the group's offsets partition

TP = tuple[str, int]


class GroupCluster:
    """Which broker coordinates the group, and the offsets partition they share."""

    def __init__(self, sim: Scheduler, group_id: str, settings: GroupSettings,
                 checkers: GroupCheckers) -> None:
        self.sim = sim
        self.group_id = group_id
        self.settings = settings
        self.checkers = checkers
        self.brokers: dict[int, GroupBroker] = {}
        self.coordinator: int | None = None
        self.epoch = 0  # the offsets partition's leader epoch
        self.records: dict[int, tuple[bytes, bytes | None]] = {}  # by offset
        self.next_offset = 0
        self.latest: dict[TP, tuple[int, int]] = {}  # tp -> (committed offset, record offset)
        self.moves = 0
        self._member_ids = 0

    def new_member_id(self, client_id: str) -> str:
        self._member_ids += 1  # deterministic, unlike the broker's uuid4
        return f"{client_id}-{self._member_ids}"

    def move(self, to: int) -> None:
        """The offsets partition's leader moves to broker `to` (it loads the group)."""
        old, self.coordinator = self.coordinator, None
        self.epoch += 1
        self.moves += 1
        self.sim.log(f"group: coordinator moves {old} -> {to} (epoch {self.epoch})")
        for broker in self.brokers.values():
            if broker.node_id != to:
                broker.lead(None)
        self.brokers[to].lead(self.epoch)

    def place(self, count: int) -> int:
        """Places for count records, in the order appends are asked for: the first offset."""
        first, self.next_offset = self.next_offset, self.next_offset + count
        return first

    def replicate(self, broker: str, a: Append, first: int, who: tuple[str, int]) -> int:
        """The append's records reach the ISR if its leader epoch is still the log's."""
        if a.leader_epoch != self.epoch:
            return E.NOT_LEADER_OR_FOLLOWER
        for offset, (key, value) in enumerate(a.records, first):
            self.records[offset] = (key, value)
            record = offsets_log.parse(key, value, offset)
            if isinstance(record, offsets_log.OffsetRecord) and record.committed is not None:
                self._committed((record.topic, record.partition), record.committed.offset,
                                offset, broker, who)
        return 0

    def _committed(self, tp: TP, committed: int, at: int, broker: str,
                   who: tuple[str, int]) -> None:
        before = self.latest.get(tp)
        if before is not None and before[1] > at:
            return  # a later record of this partition is already in the log
        self.checkers.committed(tp, None if before is None else before[0], committed, *who)
        self.latest[tp] = (committed, at)
        self.sim.log(f"{broker}: commit {tp[0]}-{tp[1]}={committed} by {who[0]} gen {who[1]}")


class GroupDriver(CoreDriver):
    """The real group coordinator core on one broker, for one process life."""

    def __init__(self, broker: GroupBroker) -> None:
        super().__init__(broker)
        self.broker = broker
        self.cluster = c = broker.cluster
        self.core = GroupCore(c.settings, partition_of=lambda group_id: INDEX,
                              partition_known=lambda topic, p: True, metadata_max_bytes=4096,
                              new_member_id=c.new_member_id, park_margin_ms=PARK_MARGIN_MS)
        self.committer = ("", -1)  # (member id, generation) of the commit being asked

    def next_deadline_ms(self) -> int | None:
        return self.core.next_deadline_ms()

    def tick(self) -> list[Any]:
        return self.core.tick(self.now(), self.now())

    def perform(self, action: Any) -> None:
        rng = self.node.sim.rng
        if isinstance(action, Append):
            first = self.cluster.place(len(action.records))
            self.node.timer(rng.randint(APPEND_MS_MIN, APPEND_MS_MAX), self._appended, action,
                            first, self.committer)
        else:
            assert isinstance(action, Load), action
            took_ms = rng.randint(LOAD_MS_MIN, LOAD_MS_MAX)
            self.node.timer(took_ms, self._load, action, took_ms)

    def _appended(self, a: Append, first: int, who: tuple[str, int]) -> None:
        error = self.cluster.replicate(self.node.name, a, first, who)
        self.run(self.core.appended(self.now(), self.now(), a.append_id,
                                    a.errors.get(error, error), first))

    def _load(self, load: Load, took_ms: int) -> None:
        records = self.cluster.records
        for offset in sorted(records):
            self.core.replay(INDEX, load.leader_epoch, offset, *records[offset])
        self.run(self.core.loaded(self.now(), INDEX, load.leader_epoch, 0,
                                  self.cluster.next_offset, took_ms))
        shard = self.core.shards.get(INDEX)
        if shard is not None and not shard.loading and shard.leader_epoch == self.cluster.epoch:
            self.cluster.coordinator = self.node.node_id


class GroupBroker(Node):
    def __init__(self, sim: Scheduler, node_id: int, cluster: GroupCluster) -> None:
        super().__init__(sim, node_id, f"broker{node_id}")
        self.cluster = cluster
        self.driver: GroupDriver | None = None  # this process life's

    # ------------------------------------------------------------------ lifecycle
    def on_start(self) -> None:
        self.driver = GroupDriver(self)

    def on_crash(self) -> None:
        self.driver = None
        if self.cluster.coordinator == self.node_id:
            self.cluster.coordinator = None

    def after_event(self) -> None:
        if self.driver is not None:
            self.driver.after_event()

    @property
    def loading(self) -> bool:
        shard = None if self.driver is None else self.driver.core.shards.get(INDEX)
        return shard is not None and shard.loading

    def lead(self, epoch: int | None) -> None:
        """The replica manager applied a state of the offsets partition: led at epoch, or not
        (None)."""
        if self.up and self.driver is not None:
            self.driver.run(self.driver.core.partition_applied(INDEX, epoch))

    # ------------------------------------------------------------------ requests
    def serve(self, key: int, version: int, request: Any, reply: Callable[[Any], None],
              source: int, conn: Any = None) -> None:
        if key == FIND:
            c = self.cluster.coordinator
            reply((E.COORDINATOR_NOT_AVAILABLE, -1) if c is None else (0, c))
            return
        assert self.driver is not None
        _HANDLERS[key](self.driver, self.sim.now_ms, request, reply)


def _join(d: GroupDriver, now: int, req: Any, reply: Callable[[Any], None]) -> None:
    join = JoinRequest(
        member_id=req.member_id, group_instance_id=req.group_instance_id,
        client_id=req.member_id.split("-")[0] or req.group_instance_id or "member",
        client_host="sim", session_timeout_ms=req.session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms, protocol_type=req.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in req.protocols),
        require_known_member_id=True)
    d.ask(lambda r: reply(_join_answer(r)),
          lambda token: d.core.join(now, now, req.group_id, join, token))


def _sync(d: GroupDriver, now: int, req: Any, reply: Callable[[Any], None]) -> None:
    d.ask(lambda r: reply(SyncGroupResponse(error_code=r.error, assignment=r.assignment)),
          lambda token: d.core.sync(
              now, now, req.group_id, req.generation_id, req.member_id, req.group_instance_id,
              req.protocol_type, req.protocol_name,
              [(a.member_id, a.assignment) for a in req.assignments], token))


def _heartbeat(d: GroupDriver, now: int, req: Any, reply: Callable[[Any], None]) -> None:
    reply(HeartbeatResponse(error_code=d.core.heartbeat(
        now, req.group_id, req.generation_id, req.member_id, req.group_instance_id)))


def _leave(d: GroupDriver, now: int, req: Any, reply: Callable[[Any], None]) -> None:
    leaving = [(m.member_id, m.group_instance_id) for m in req.members] or \
        [(req.member_id, None)]
    d.ask(lambda r: reply(LeaveGroupResponse(error_code=r.error)),
          lambda token: d.core.leave(now, now, req.group_id, leaving, token))


def _commit(d: GroupDriver, now: int, req: Any, reply: Callable[[Any], None]) -> None:
    offsets = [OffsetToCommit(t.name, p.partition_index, p.committed_offset,
                              p.committed_leader_epoch, p.committed_metadata or "")
               for t in req.topics for p in t.partitions]
    generation = req.generation_id_or_member_epoch
    d.committer = (req.member_id, generation)
    d.ask(lambda r: reply(_commit_answer(req, r.errors)),
          lambda token: d.core.commit(now, now, req.group_id, generation, req.member_id,
                                      req.group_instance_id, offsets, token))
    d.committer = ("", -1)


def _fetch(d: GroupDriver, now: int, req: Any, reply: Callable[[Any], None]) -> None:
    wanted = [(t.name, index) for t in req.topics for index in t.partition_indexes]
    error, found = d.core.fetch_offsets(req.group_id, wanted)
    if error:
        reply(OffsetFetchResponse(error_code=error))
        return
    reply(OffsetFetchResponse(topics=[OffsetFetchResponseTopic(name=t.name, partitions=[
        OffsetFetchResponsePartition(
            partition_index=index, committed_offset=-1 if got is None else got.offset,
            committed_leader_epoch=-1 if got is None else got.leader_epoch)
        for index in t.partition_indexes for got in [found[(t.name, index)]]])
        for t in req.topics]))


_HANDLERS: dict[int, Callable[[GroupDriver, int, Any, Callable[[Any], None]], None]] = {
    ApiKey.JOIN_GROUP: _join,
    ApiKey.SYNC_GROUP: _sync,
    ApiKey.HEARTBEAT: _heartbeat,
    ApiKey.LEAVE_GROUP: _leave,
    ApiKey.OFFSET_COMMIT: _commit,
    ApiKey.OFFSET_FETCH: _fetch,
}


def _join_answer(r: JoinResult) -> JoinGroupResponse:
    return JoinGroupResponse(
        error_code=r.error, generation_id=r.generation, protocol_type=r.protocol_type,
        protocol_name=r.protocol_name, leader=r.leader, member_id=r.member_id,
        members=[JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
                 for m, i, md in r.members])


def _commit_answer(req: Any, errors: dict[TP, int]) -> OffsetCommitResponse:
    return OffsetCommitResponse(topics=[OffsetCommitResponseTopic(
        name=t.name, partitions=[OffsetCommitResponsePartition(
            partition_index=p.partition_index, error_code=errors[(t.name, p.partition_index)])
            for p in t.partitions])
        for t in req.topics])
