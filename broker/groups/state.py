"""`Group`: one consumer group's membership state machine, as Kafka's (sans-IO, injected clock).

Theory of operation
-------------------
A group is in one of five states; a transition not in `PREVIOUS` is a bug and stops the process:

    Empty               no members (maybe committed offsets); a join starts a rebalance
    PreparingRebalance  members (re)join; the join phase ends when every known member has joined
                        (or, for an empty group's first rebalance, after the initial delay,
                        extended while new members keep coming, at most the rebalance timeout),
                        or at the rebalance timeout, when members that did not rejoin are removed
    CompletingRebalance the generation is chosen: the leader got every member's metadata for the
                        selected protocol and must send the assignment (SyncGroup)
    Stable              the leader's assignment is stored; members heartbeat
    Dead                the group is unloaded (this broker stopped coordinating it)

Nothing here does I/O or reads a clock: time comes in as `now_ms`. Requests that must wait
(JoinGroup, SyncGroup) come with a `token` chosen by the caller; every method returns a list of
actions (`Action`):
- `Reply(token, result)`: answer that parked request now;
- `Store(...)`: append the group's metadata record (its `snapshot`) to the offsets log, then call
  `stored(now_ms, store, error)`, which returns more actions. The leader's SyncGroup and a static
  member taking its old place in a Stable group wait for their store, as in Kafka.
`tick(now_ms)` runs the timers (session expiry, join phase end, sync deadline, pending member ids);
`next_deadline_ms()` tells the driver when to call it next.

Kafka's rules kept here: new dynamic members on JoinGroup v4+ first get MEMBER_ID_REQUIRED with
their id (they are "pending" until they rejoin with it, within their session timeout); protocol
selection is by votes among the protocols every member supports; a known member that rejoins a
Stable group with unchanged protocols, and is not the leader, gets the current generation back
without a rebalance; a static member (group.instance.id) that rejoins with a new process replaces
its old member id (the old one is fenced: FENCED_INSTANCE_ID) and, if the selected protocol does
not change, the group stays Stable with the old assignment. A member with a parked join or sync is
not expired by its session (the join phase and the sync deadline bound those waits).

Committed offsets live here too (`offsets`): the coordinator applies them once their record is
replicated, each with the log offset of its record, so that two commits whose appends finish out
of order still leave the later record's value.
"""

from __future__ import annotations

import enum
import logging
import struct
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from epochlog.protocol.error_codes import ErrorCode

log = logging.getLogger("epochlog.broker")
E = ErrorCode

TopicPartition = tuple[str, int]
Protocols = tuple[tuple[str, bytes], ...]


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
# New state -> the states it may be entered from (Kafka's GroupState.validPreviousStates).
PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.DEAD: frozenset(GroupState),
}


@dataclass(frozen=True)
class GroupSettings:
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3000


def random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


# ------------------------------------------------------------------------------ inputs, outputs
@dataclass(frozen=True)
class JoinRequest:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    require_known_member_id: bool  # JoinGroup v4+


@dataclass(frozen=True)
class JoinResult:
    error: int
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # the leader's only


@dataclass(frozen=True)
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True)
class Reply:
    token: int
    result: JoinResult | SyncResult


@dataclass(frozen=True)
class MemberSnapshot:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True)
class GroupSnapshot:
    """What the group metadata record holds (offsets_log.py encodes it)."""

    group_id: str
    protocol_type: str
    generation: int
    protocol_name: str | None
    leader: str | None
    state_timestamp_ms: int
    members: tuple[MemberSnapshot, ...]


@dataclass(frozen=True)
class Store:
    """Append `snapshot` to the group's offsets partition, then call Group.stored."""

    reason: str  # "sync" (the leader's assignment), "static" (a static member replaced), "empty"
    snapshot: GroupSnapshot
    generation: int
    token: int = -1  # "static": the join to answer
    old_member_id: str = ""  # "static": the member id replaced
    new_member_id: str = ""


Action = Reply | Store


@dataclass(frozen=True)
class CommittedOffset:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    record_offset: int = -1  # where its record is in the offsets log


def consumer_subscription_topics(metadata: bytes | memoryview) -> set[str]:
    """The topics of a consumer protocol subscription (Kafka's ConsumerProtocolSubscription:
    version int16, then topics as an int32 count of int16-length strings, in every version).
    Metadata that does not parse subscribes to nothing: the broker never trusts a client's
    bytes to be well formed, and a subscription it cannot read protects no offsets."""
    if len(metadata) < 6:
        return set()
    (count,) = _SUB_COUNT.unpack_from(metadata, 2)
    topics: set[str] = set()
    p = 6
    for _ in range(max(0, min(count, len(metadata)))):
        if p + 2 > len(metadata):
            return set()
        (size,) = _SUB_STRING.unpack_from(metadata, p)
        p += 2
        if size < 0 or p + size > len(metadata):
            return set()
        topics.add(bytes(metadata[p:p + size]).decode("utf-8", "replace"))
        p += size
    return topics


_SUB_COUNT = struct.Struct(">i")
_SUB_STRING = struct.Struct(">h")


# ------------------------------------------------------------------------------------ members
@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    assignment: bytes = b""
    join_token: int | None = None
    sync_token: int | None = None
    heartbeat_deadline_ms: int = 0

    def metadata(self, protocol: str | None) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def update(self, req: JoinRequest) -> None:
        self.client_id, self.client_host = req.client_id, req.client_host
        self.session_timeout_ms = req.session_timeout_ms
        self.rebalance_timeout_ms = req.rebalance_timeout_ms
        self.protocol_type, self.protocols = req.protocol_type, req.protocols


# -------------------------------------------------------------------------------------- group
@dataclass(eq=False)
class Group:
    group_id: str
    settings: GroupSettings
    new_member_id: Callable[[str], str] = random_member_id
    state: GroupState = GroupState.EMPTY
    generation: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    state_timestamp_ms: int = -1
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    join_deadline_ms: int | None = None  # PreparingRebalance: when the join phase ends at most
    initial_delay: bool = False  # the join phase is an empty group's delayed first one
    initial_delay_left_ms: int = 0
    new_member_added: bool = False
    sync_deadline_ms: int | None = None  # CompletingRebalance: when the leader's sync is late
    storing_generation: int | None = None  # the leader's assignment is being stored

    def __repr__(self) -> str:
        return f"Group({self.group_id}, {self.state.value}, generation {self.generation})"

    # ------------------------------------------------------------------------- transitions
    def _transition(self, new: GroupState, now_ms: int) -> None:
        if self.state not in PREVIOUS[new]:
            raise AssertionError(f"group {self.group_id}: {self.state.value} -> {new.value} is "
                                 "not a valid transition")
        log.info("group %s: %s -> %s (generation %d, %d members)", self.group_id,
                 self.state.value, new.value, self.generation, len(self.members))
        self.state = new
        self.state_timestamp_ms = now_ms

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    # ------------------------------------------------------------------------------ reading
    def snapshot(self, now_wall_ms: int) -> GroupSnapshot:
        return GroupSnapshot(
            group_id=self.group_id, protocol_type=self.protocol_type or "",
            generation=self.generation, protocol_name=self.protocol_name, leader=self.leader_id,
            state_timestamp_ms=now_wall_ms, members=tuple(
                MemberSnapshot(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                               m.rebalance_timeout_ms, m.session_timeout_ms,
                               m.metadata(self.protocol_name), m.assignment)
                for m in self.members.values()))

    @classmethod
    def from_snapshot(cls, snap: GroupSnapshot, settings: GroupSettings, now_ms: int,
                      new_member_id: Callable[[str], str] = random_member_id) -> Group:
        """A group as its last metadata record left it: Empty without members, else Stable
        (members keep their assignment and heartbeat on; a missing one expires)."""
        group = cls(snap.group_id, settings, new_member_id, generation=snap.generation,
                    protocol_type=snap.protocol_type or None, protocol_name=snap.protocol_name,
                    leader_id=snap.leader, state_timestamp_ms=now_ms)
        for m in snap.members:
            member = Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.session_timeout_ms, m.rebalance_timeout_ms, snap.protocol_type,
                            ((snap.protocol_name or "", m.subscription),), m.assignment,
                            heartbeat_deadline_ms=now_ms + m.session_timeout_ms)
            group.members[m.member_id] = member
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        group.state = GroupState.STABLE if group.members else GroupState.EMPTY
        if not group.members:
            group.leader_id = None
        return group

    def describe(self) -> tuple[str, str, str, list[tuple[Member, bytes, bytes]]]:
        """(state, protocol type, protocol, [(member, metadata, assignment)]) as Kafka's
        DescribeGroups: metadata and assignment only while Stable."""
        stable = self.state is GroupState.STABLE
        return (self.state.value, self.protocol_type or "",
                (self.protocol_name or "") if stable else "",
                [(m, m.metadata(self.protocol_name) if stable else b"",
                  m.assignment if stable else b"") for m in self.members.values()])

    def subscribed_topics(self) -> set[str]:
        """The topics the members of a "consumer" group subscribe to, read from their metadata
        for the chosen protocol (or every protocol they offer while none is chosen yet)."""
        topics: set[str] = set()
        for m in self.members.values():
            chosen = [m.metadata(self.protocol_name)] if self.protocol_name else \
                [meta for _, meta in m.protocols]
            for meta in chosen:
                topics |= consumer_subscription_topics(meta)
        return topics

    def next_deadline_ms(self) -> int | None:
        deadlines = [m.heartbeat_deadline_ms for m in self.members.values()
                     if m.join_token is None and m.sync_token is None]
        deadlines += self.pending_members.values()
        if self.join_deadline_ms is not None:
            deadlines.append(self.join_deadline_ms)
        if self.sync_deadline_ms is not None and self.storing_generation is None:
            deadlines.append(self.sync_deadline_ms)
        return min(deadlines) if deadlines else None

    def _fenced(self, member_id: str, instance_id: str | None) -> bool:
        """Kafka's isStaticMemberFenced: the instance id is registered to another member id."""
        if instance_id is None:
            return False
        registered = self.static_members.get(instance_id)
        return registered is not None and registered != member_id

    # ------------------------------------------------------------------------------- joining
    def join(self, now_ms: int, req: JoinRequest, token: int) -> list[Action]:
        """JoinGroup, after the coordinator checked the group id and that it coordinates it."""
        if self.state is GroupState.DEAD:
            return [self._join_error(token, E.COORDINATOR_NOT_AVAILABLE)]
        s = self.settings
        if not s.min_session_timeout_ms <= req.session_timeout_ms <= s.max_session_timeout_ms:
            return [self._join_error(token, E.INVALID_SESSION_TIMEOUT, req.member_id)]
        if not req.protocol_type or not req.protocols or not self._supports(req):
            return [self._join_error(token, E.INCONSISTENT_GROUP_PROTOCOL, req.member_id)]
        if not req.member_id:
            return self._join_unknown(now_ms, req, token)
        return self._join_known(now_ms, req, token)

    def _supports(self, req: JoinRequest) -> bool:
        """Kafka's supportsProtocols: an empty group takes any; otherwise the same type and a
        protocol every other member supports too."""
        others = [m for mid, m in self.members.items() if mid != req.member_id]
        if self.state is GroupState.EMPTY or not others:
            return True
        if req.protocol_type != self.protocol_type:
            return False
        common = set.intersection(*(set(m.protocol_names()) for m in others))
        return any(name in common for name, _ in req.protocols)

    def _join_unknown(self, now_ms: int, req: JoinRequest, token: int) -> list[Action]:
        if req.group_instance_id is not None:
            known = self.static_members.get(req.group_instance_id)
            new_id = self.new_member_id(req.group_instance_id)
            if known is not None:
                return self._replace_static(now_ms, req, known, new_id, token)
            return self._add_and_rebalance(now_ms, req, new_id, token)
        new_id = self.new_member_id(req.client_id or "member")
        if req.require_known_member_id:
            self.pending_members[new_id] = now_ms + req.session_timeout_ms
            return [self._join_error(token, E.MEMBER_ID_REQUIRED, new_id)]
        return self._add_and_rebalance(now_ms, req, new_id, token)

    def _join_known(self, now_ms: int, req: JoinRequest, token: int) -> list[Action]:
        mid = req.member_id
        if mid in self.pending_members:
            del self.pending_members[mid]
            return self._add_and_rebalance(now_ms, req, mid, token)
        if self._fenced(mid, req.group_instance_id):
            return [self._join_error(token, E.FENCED_INSTANCE_ID, mid)]
        member = self.members.get(mid)
        if member is None or self.is_(S.EMPTY):
            return [self._join_error(token, E.UNKNOWN_MEMBER_ID, mid)]
        actions = self._park_join(member, token)
        if self.state is S.PREPARING_REBALANCE:
            member.update(req)
            return actions + self._maybe_complete_join(now_ms)
        if self.state is S.COMPLETING_REBALANCE:
            if member.protocols == req.protocols:
                member.join_token = None
                return actions + [Reply(token, self._join_result(member))]
            member.update(req)
            return actions + self._prepare_rebalance(now_ms, f"member {mid} changed its protocols")
        # Stable
        if member.member_id == self.leader_id or member.protocols != req.protocols:
            member.update(req)
            why = ("the leader rejoined" if member.member_id == self.leader_id
                   else f"member {mid} changed its protocols")
            return actions + self._prepare_rebalance(now_ms, why)
        member.join_token = None
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return actions + [Reply(token, self._join_result(member))]

    def _park_join(self, member: Member, token: int) -> list[Action]:
        """Park a join; a join already parked for that member (a retry) is answered."""
        old, member.join_token = member.join_token, token
        return [] if old is None else [self._join_error(old, E.REBALANCE_IN_PROGRESS,
                                                        member.member_id)]

    def _add_and_rebalance(self, now_ms: int, req: JoinRequest, member_id: str,
                           token: int) -> list[Action]:
        member = Member(member_id, req.group_instance_id, req.client_id, req.client_host,
                        req.session_timeout_ms, req.rebalance_timeout_ms, req.protocol_type,
                        req.protocols, join_token=token,
                        heartbeat_deadline_ms=now_ms + req.session_timeout_ms)
        self.members[member_id] = member
        if req.group_instance_id is not None:
            self.static_members[req.group_instance_id] = member_id
        if self.protocol_type is None or self.state is S.EMPTY:
            self.protocol_type = req.protocol_type
        if self.state is S.PREPARING_REBALANCE:
            self.new_member_added = True
            return self._maybe_complete_join(now_ms)
        return self._prepare_rebalance(
            now_ms, f"member {member_id} joined (client {req.client_id}, protocols "
                 f"{','.join(member.protocol_names())}, instance {req.group_instance_id})")

    def _replace_static(self, now_ms: int, req: JoinRequest, old_id: str, new_id: str,
                        token: int) -> list[Action]:
        """A static member's new process: it takes the old member id's place (fenced)."""
        old = self.members.pop(old_id)
        actions: list[Action] = []
        if old.join_token is not None:
            actions.append(self._join_error(old.join_token, E.FENCED_INSTANCE_ID, old_id))
        if old.sync_token is not None:
            actions.append(Reply(old.sync_token, SyncResult(E.FENCED_INSTANCE_ID)))
        old.join_token = old.sync_token = None
        old.member_id = new_id
        old.heartbeat_deadline_ms = now_ms + req.session_timeout_ms
        self.members[new_id] = old
        self.static_members[req.group_instance_id or ""] = new_id
        if self.leader_id == old_id:
            self.leader_id = new_id
        log.info("group %s: static member %s rejoined as %s (was %s)", self.group_id,
                 req.group_instance_id, new_id, old_id)
        old.update(req)
        old.join_token = token
        if self.state is S.STABLE:
            if self._select_protocol() == self.protocol_name:
                # No rebalance: the join is answered once the new member id is stored.
                return actions + [Store("static", self.snapshot(now_ms), self.generation, token,
                                        old_id, new_id)]
            return actions + self._prepare_rebalance(
                now_ms, f"static member {req.group_instance_id} changed the selected protocol")
        if self.state is S.COMPLETING_REBALANCE:
            return actions + self._prepare_rebalance(
                now_ms, f"static member {req.group_instance_id} rejoined during the sync")
        return actions + self._maybe_complete_join(now_ms)  # PreparingRebalance

    def _join_error(self, token: int, error: int, member_id: str = "") -> Reply:
        return Reply(token, JoinResult(error, member_id=member_id,
                                       protocol_type=self.protocol_type))

    def _join_result(self, member: Member, leader_override: str | None = None) -> JoinResult:
        leader = leader_override if leader_override is not None else (self.leader_id or "")
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if member.member_id == leader:
            members = tuple((m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
                            for m in self.members.values())
        return JoinResult(0, self.generation, self.protocol_type, self.protocol_name, leader,
                          member.member_id, members)

    # ---------------------------------------------------------------------------- rebalance
    def _prepare_rebalance(self, now_ms: int, why: str) -> list[Action]:
        actions: list[Action] = []
        if self.state is S.COMPLETING_REBALANCE:
            actions += self._fail_syncs(E.REBALANCE_IN_PROGRESS)
        self.sync_deadline_ms = None
        self.storing_generation = None
        rebalance_ms = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        delay = self.settings.initial_rebalance_delay_ms
        if self.state is S.EMPTY and delay > 0:
            self.initial_delay = True
            self.new_member_added = False
            first = min(delay, rebalance_ms)
            self.initial_delay_left_ms = max(rebalance_ms - first, 0)
            self.join_deadline_ms = now_ms + first
        else:
            self.initial_delay = False
            self.join_deadline_ms = now_ms + rebalance_ms
        log.info("group %s: preparing to rebalance at generation %d: %s", self.group_id,
                 self.generation, why)
        self._transition(S.PREPARING_REBALANCE, now_ms)
        return actions + self._maybe_complete_join(now_ms)

    def _all_joined(self) -> bool:
        return (not self.pending_members
                and all(m.join_token is not None for m in self.members.values()))

    def _maybe_complete_join(self, now_ms: int) -> list[Action]:
        if self.state is not S.PREPARING_REBALANCE or self.initial_delay:
            return []
        if self._all_joined():
            return self._complete_join(now_ms)
        return []

    def _complete_join(self, now_ms: int) -> list[Action]:
        """Kafka's onCompleteJoin: drop who did not rejoin, start the next generation."""
        actions: list[Action] = []
        for member in [m for m in self.members.values() if m.join_token is None]:
            log.info("group %s: member %s did not rejoin in time: removed", self.group_id,
                     member.member_id)
            actions += self._remove(member.member_id, E.UNKNOWN_MEMBER_ID)
        self.pending_members.clear()
        self.join_deadline_ms = None
        self.initial_delay = False
        self.generation += 1
        if not self.members:
            self.protocol_name = None
            self.leader_id = None
            self._transition(S.EMPTY, now_ms)
            return actions + [Store("empty", self.snapshot(now_ms), self.generation)]
        self.protocol_name = self._select_protocol()
        if self.leader_id not in self.members:
            self.leader_id = next(iter(self.members))
        self._transition(S.COMPLETING_REBALANCE, now_ms)
        sync_ms = max(m.rebalance_timeout_ms for m in self.members.values())
        self.sync_deadline_ms = now_ms + sync_ms
        for member in self.members.values():
            assert member.join_token is not None
            actions.append(Reply(member.join_token, self._join_result(member)))
            member.join_token = None
            member.assignment = b""
            member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return actions

    def _select_protocol(self) -> str | None:
        """Kafka's selectProtocol: of the protocols every member supports, the one most members
        list first (ties: the order of the first member's list)."""
        if not self.members:
            return None
        members = list(self.members.values())
        common = set.intersection(*(set(m.protocol_names()) for m in members))
        order = [p for p in members[0].protocol_names() if p in common]
        if not order:
            raise AssertionError(f"group {self.group_id}: no protocol common to all members")
        votes = {p: 0 for p in order}
        for m in members:
            votes[next(p for p in m.protocol_names() if p in common)] += 1
        return max(order, key=lambda p: votes[p])

    # ------------------------------------------------------------------------------- syncing
    def sync(self, now_ms: int, generation: int, member_id: str, instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None,
             assignments: Sequence[tuple[str, bytes]], token: int) -> list[Action]:
        if self.state is S.DEAD:
            return [Reply(token, SyncResult(E.COORDINATOR_NOT_AVAILABLE))]
        if self._fenced(member_id, instance_id):
            return [Reply(token, SyncResult(E.FENCED_INSTANCE_ID))]
        member = self.members.get(member_id)
        if member is None or self.state is S.EMPTY:
            return [Reply(token, SyncResult(E.UNKNOWN_MEMBER_ID))]
        if generation != self.generation:
            return [Reply(token, SyncResult(E.ILLEGAL_GENERATION))]
        if ((protocol_type is not None and protocol_type != self.protocol_type)
                or (protocol_name is not None and protocol_name != self.protocol_name)):
            return [Reply(token, SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))]
        if self.state is S.PREPARING_REBALANCE:
            return [Reply(token, SyncResult(E.REBALANCE_IN_PROGRESS))]
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state is S.STABLE:
            return [Reply(token, self._sync_result(member))]
        actions: list[Action] = []
        if member.sync_token is not None:  # a retry: the earlier one is answered
            actions.append(Reply(member.sync_token, SyncResult(E.REBALANCE_IN_PROGRESS)))
        member.sync_token = token
        if member_id == self.leader_id and self.storing_generation is None:
            given = dict(assignments)
            for m in self.members.values():
                m.assignment = given.get(m.member_id, b"")
            self.storing_generation = self.generation
            actions.append(Store("sync", self.snapshot(now_ms), self.generation))
        return actions

    def _sync_result(self, member: Member) -> SyncResult:
        return SyncResult(0, self.protocol_type, self.protocol_name, member.assignment)

    def _fail_syncs(self, error: int) -> list[Action]:
        actions: list[Action] = []
        for m in self.members.values():
            if m.sync_token is not None:
                actions.append(Reply(m.sync_token, SyncResult(error)))
                m.sync_token = None
            m.assignment = b""
        return actions

    def stored(self, now_ms: int, store: Store, error: int) -> list[Action]:
        """The metadata record of `store` was replicated (error 0) or could not be."""
        if store.reason == "sync":
            return self._sync_stored(now_ms, store, error)
        if store.reason == "static":
            return self._static_stored(now_ms, store, error)
        if error:
            log.warning("group %s: storing the empty group failed (error %d)", self.group_id,
                        error)
        return []

    def _sync_stored(self, now_ms: int, store: Store, error: int) -> list[Action]:
        if (self.state is not S.COMPLETING_REBALANCE or self.generation != store.generation
                or self.storing_generation != store.generation):
            return []  # the group moved on meanwhile
        self.storing_generation = None
        if error:
            log.warning("group %s: storing generation %d failed (error %d): rebalancing",
                        self.group_id, store.generation, error)
            failed = self._fail_syncs(error)
            return failed + self._prepare_rebalance(now_ms, "storing the assignment failed")
        self.sync_deadline_ms = None
        self._transition(S.STABLE, now_ms)
        actions: list[Action] = []
        for m in self.members.values():
            if m.sync_token is not None:
                actions.append(Reply(m.sync_token, self._sync_result(m)))
                m.sync_token = None
        return actions

    def _static_stored(self, now_ms: int, store: Store, error: int) -> list[Action]:
        member = self.members.get(store.new_member_id)
        if member is None or member.join_token != store.token:
            return []  # replaced or removed meanwhile
        member.join_token = None
        if error:
            # Kafka reverts to the old member id; the new process gets the error and retries.
            del self.members[store.new_member_id]
            member.member_id = store.old_member_id
            self.members[store.old_member_id] = member
            if member.group_instance_id is not None:
                self.static_members[member.group_instance_id] = store.old_member_id
            if self.leader_id == store.new_member_id:
                self.leader_id = store.old_member_id
            return [self._join_error(store.token, error)]
        if self.state is not S.STABLE:
            return self._park_join(member, store.token) + self._maybe_complete_join(now_ms)
        # The old leader id is given back so that no member believes it must assign again.
        leader = store.old_member_id if self.leader_id == store.new_member_id else None
        result = self._join_result(member, leader_override=leader)
        return [Reply(store.token, JoinResult(0, result.generation, result.protocol_type,
                                              result.protocol_name, result.leader,
                                              member.member_id))]

    # --------------------------------------------------------------------------- heartbeats
    def heartbeat(self, now_ms: int, generation: int, member_id: str,
                  instance_id: str | None) -> int:
        if self.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if self._fenced(member_id, instance_id):
            return E.FENCED_INSTANCE_ID
        member = self.members.get(member_id)
        if member is None or self.state is S.EMPTY:
            return E.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return E.ILLEGAL_GENERATION
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        if self.state is S.PREPARING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        return 0

    def commit_error(self, now_ms: int, generation: int, member_id: str,
                     instance_id: str | None) -> int:
        """Kafka's order of checks for an OffsetCommit (0: it may go ahead): the member, then
        its generation, and only a member of the current generation hears
        REBALANCE_IN_PROGRESS (it joined but has not synced yet). A member committing with an
        older generation during a rebalance (a manual commit while a cooperative rebalance
        runs) gets ILLEGAL_GENERATION, as from Kafka, not a retriable rebalance error."""
        if self.state is S.DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if generation < 0 and self.state is S.EMPTY:
            return 0  # a simple consumer: the group only stores offsets
        if self._fenced(member_id, instance_id):
            return E.FENCED_INSTANCE_ID
        member = self.members.get(member_id)
        if member is None:
            return E.UNKNOWN_MEMBER_ID
        if generation != self.generation:
            return E.ILLEGAL_GENERATION
        if self.state is S.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        member.heartbeat_deadline_ms = now_ms + member.session_timeout_ms
        return 0

    def apply_offset(self, tp: TopicPartition, committed: CommittedOffset | None,
                     record_offset: int) -> None:
        """A replicated offset record (None: a tombstone); older records never win."""
        current = self.offsets.get(tp)
        if current is not None and current.record_offset > record_offset:
            return
        if committed is None:
            self.offsets.pop(tp, None)
        else:
            self.offsets[tp] = committed

    # ------------------------------------------------------------------------------ leaving
    def leave(self, now_ms: int, leaving: Sequence[tuple[str, str | None]]
              ) -> tuple[list[int], list[Action]]:
        """LeaveGroup: per (member id, instance id) an error code, and the actions."""
        errors: list[int] = []
        actions: list[Action] = []
        removed = False
        for member_id, instance_id in leaving:
            if self.state is S.DEAD:
                errors.append(E.COORDINATOR_NOT_AVAILABLE)
                continue
            if instance_id is not None:
                registered = self.static_members.get(instance_id)
                if registered is None:
                    errors.append(E.UNKNOWN_MEMBER_ID)
                    continue
                if member_id and member_id != registered:
                    errors.append(E.FENCED_INSTANCE_ID)
                    continue
                member_id = registered
            if member_id in self.pending_members:
                del self.pending_members[member_id]
                errors.append(0)
                removed = True
                continue
            if member_id not in self.members:
                errors.append(E.UNKNOWN_MEMBER_ID)
                continue
            log.info("group %s: member %s left", self.group_id, member_id)
            actions += self._remove(member_id, E.UNKNOWN_MEMBER_ID)
            errors.append(0)
            removed = True
        if removed:
            actions += self._after_removal(now_ms, "members left")
        return errors, actions

    def _remove(self, member_id: str, error: int) -> list[Action]:
        member = self.members.pop(member_id)
        if member.group_instance_id is not None and \
                self.static_members.get(member.group_instance_id) == member_id:
            del self.static_members[member.group_instance_id]
        actions: list[Action] = []
        if member.join_token is not None:
            actions.append(self._join_error(member.join_token, error, member_id))
        if member.sync_token is not None:
            actions.append(Reply(member.sync_token, SyncResult(error)))
        return actions

    def _after_removal(self, now_ms: int, why: str) -> list[Action]:
        if self.state in (S.STABLE, S.COMPLETING_REBALANCE):
            return self._prepare_rebalance(now_ms, why)
        if self.state is S.PREPARING_REBALANCE:
            return self._maybe_complete_join(now_ms)
        return []

    # ------------------------------------------------------------------------------- timers
    def tick(self, now_ms: int) -> list[Action]:
        actions: list[Action] = []
        for mid, deadline in list(self.pending_members.items()):
            if deadline <= now_ms:
                del self.pending_members[mid]
                log.info("group %s: pending member %s did not rejoin: forgotten",
                         self.group_id, mid)
                actions += self._maybe_complete_join(now_ms)
        expired = [m.member_id for m in self.members.values()
                   if m.join_token is None and m.sync_token is None
                   and m.heartbeat_deadline_ms <= now_ms]
        for mid in expired:
            if mid in self.members:
                log.info("group %s: member %s's session expired: removed", self.group_id, mid)
                actions += self._remove(mid, E.UNKNOWN_MEMBER_ID)
        if expired:
            actions += self._after_removal(now_ms, f"sessions of {len(expired)} members expired")
        if self.join_deadline_ms is not None and self.join_deadline_ms <= now_ms \
                and self.state is S.PREPARING_REBALANCE:
            actions += self._join_deadline(now_ms)
        if (self.sync_deadline_ms is not None and self.sync_deadline_ms <= now_ms
                and self.state is S.COMPLETING_REBALANCE and self.storing_generation is None):
            actions += self._sync_deadline(now_ms)
        return actions

    def _join_deadline(self, now_ms: int) -> list[Action]:
        if self.initial_delay and self.new_member_added and self.initial_delay_left_ms > 0:
            step = min(self.settings.initial_rebalance_delay_ms, self.initial_delay_left_ms)
            self.initial_delay_left_ms -= step
            self.new_member_added = False
            self.join_deadline_ms = now_ms + step
            return []
        self.initial_delay = False
        return self._complete_join(now_ms)

    def _sync_deadline(self, now_ms: int) -> list[Action]:
        """The leader did not send the assignment in time: members that did not sync are
        removed and the group rebalances (Kafka's pending-sync expiry)."""
        self.sync_deadline_ms = None
        late = [m.member_id for m in self.members.values() if m.sync_token is None]
        actions: list[Action] = []
        for mid in late:
            log.info("group %s: member %s did not sync in time: removed", self.group_id, mid)
            actions += self._remove(mid, E.UNKNOWN_MEMBER_ID)
        return actions + self._prepare_rebalance(now_ms, "the sync phase timed out")

    # ------------------------------------------------------------------------------- unload
    def unload(self, error: int) -> list[Action]:
        """This broker stops coordinating the group: every parked request gets `error`."""
        actions: list[Action] = []
        for m in self.members.values():
            if m.join_token is not None:
                actions.append(self._join_error(m.join_token, error, m.member_id))
            if m.sync_token is not None:
                actions.append(Reply(m.sync_token, SyncResult(error)))
            m.join_token = m.sync_token = None
        self.state = GroupState.DEAD
        self.join_deadline_ms = self.sync_deadline_ms = None
        return actions
