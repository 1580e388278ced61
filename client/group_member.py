"""`MemberMachine`: one consumer group member as a pure state machine (no I/O, no clock).

Theory of operation
-------------------
Like etcd-raft's core, the machine is driven by events and answers with actions; it never sends,
sleeps or reads a clock. Every event method takes `now_ms` (the driver's monotonic clock, or the
simulation's) and returns a list of actions, in the order the driver must carry them out:

    events in                                   actions out
    subscribe / request_rejoin / unsubscribe    FindCoordinator(rid)        ask any broker
    poll(now)        (the application polled)    Send(rid, api, request)     to the coordinator
    tick(now)        (timers: heartbeat, retry,  DropCoordinator(why)        close its connection
                      session, max.poll, deadlines)  NeedPartitionCounts(rid, topics)  leader
    commit(offsets) / fetch(partitions)         CommitConsumed(partitions)  auto-commit these
    on_coordinator / on_response / on_failure   Revoked / Assigned / Lost   the listener and the
    on_partition_counts                                                     consumer's assignment
    close(now)                                  Done(rid, result, error)    a commit or fetch ends

The contract: actions that tell the application (`Revoked`, `Assigned`, `Lost`, `CommitConsumed`)
come only out of `poll()`, `close()` and `unsubscribe()`, which the driver calls inside the
consumer's poll() (or close): so a listener runs in poll(), as in Java's consumer, and an eager
revoke (with its commit) is carried out before the JoinGroup that follows it in the same list.
Answers from the wire (`on_response`, `on_failure`, `tick`) only ever produce requests, `Done`
and `DropCoordinator`: the driver may run them from any task.

Phases (`PHASES` lists the phases each may be entered from; another move is a bug):

    UNJOINED  no round under way; the next poll() starts one if the member is subscribed
    JOINING   a round: finding the coordinator, JoinGroup on the wire, or backing off to retry
    SYNCING   JoinGroup answered (our generation is chosen); the leader's counts, or SyncGroup
    STABLE    the generation's assignment is ours; heartbeats every heartbeat_interval_ms
    CLOSED    close() ran; every event after it is ignored

A round completed by SyncGroup leaves its assignment pending until the next poll(), which tells
the listener (cooperative: revoke what moved away, then rejoin so others can take it). A
generation lost before that poll (a heartbeat fenced, the session expired) drops the pending
assignment, and poll() reports what we owned as lost before joining again.

Coordinator requests carry a request id (`rid`). An answer for an id no longer pending (a round
given up, a heartbeat of an older generation) is ignored. Commits and fetches are retried through
coordinator moves and loads until their deadline (request_timeout_ms), then end with an error that
says what they waited for, as does `waiting_for()` for the round under way.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.heartbeat import HeartbeatRequest, HeartbeatResponse
from epochlog.protocol.apis.join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from epochlog.protocol.apis.leave_group import LeaveGroupRequest, MemberIdentity
from epochlog.protocol.apis.offset_commit import OffsetCommitResponse
from epochlog.protocol.apis.offset_fetch import OffsetFetchResponse
from epochlog.protocol.apis.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from epochlog.protocol.error_codes import ErrorCode as E

from .assignors import Assignor, make_assignors
from .consumer_protocol import (
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from .errors import KafkaError, KafkaTimeoutError, error_for
from .group_offsets import (
    Committed,
    commit_errors,
    commit_request,
    committed_offsets,
    fetch_errors,
    fetch_request,
)
from .types import TopicPartition

PROTOCOL_TYPE = "consumer"
NO_GENERATION = -1
JOIN_TIMEOUT_EXTRA_MS = 5000  # a JoinGroup may park for the rebalance timeout, plus this
COORDINATOR_GONE = frozenset({E.COORDINATOR_NOT_AVAILABLE, E.NOT_COORDINATOR})
RETRY_LATER = frozenset({E.COORDINATOR_LOAD_IN_PROGRESS, E.REQUEST_TIMED_OUT})
# A JoinGroup or SyncGroup error after which the member cannot go on: poll() raises it.
FATAL_JOIN = frozenset({E.FENCED_INSTANCE_ID, E.INCONSISTENT_GROUP_PROTOCOL,
                        E.INVALID_SESSION_TIMEOUT, E.INVALID_GROUP_ID, E.GROUP_MAX_SIZE_REACHED,
                        E.GROUP_AUTHORIZATION_FAILED, E.UNSUPPORTED_VERSION})
# The group moved on without us: rejoin at once, as Java does (bench/groups.py measured 100 ms
# more per such round with the backoff). Coordinator moves and loads back off first.
REJOIN_AT_ONCE = frozenset({E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION})
# A commit refused with these: the group rebalanced since our generation.
REBALANCED = frozenset({E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.REBALANCE_IN_PROGRESS,
                        E.FENCED_INSTANCE_ID})
RETRY_BACKOFF_MAX_MS = 1000
PENDING_MAX = 1024  # commits and fetches waiting at once: more is a driver that never waits
NOTES_MAX = 64  # notes kept for the driver's log between two of its reads


class CommitFailedError(KafkaError):
    """The commit was refused because the group rebalanced since this member's generation: its
    partitions may belong to another member now. Poll again (the member rejoins) and reprocess."""


class Phase(enum.Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"
    SYNCING = "syncing"
    STABLE = "stable"
    CLOSED = "closed"


P = Phase
# New phase -> the phases it may be entered from.
PHASES: dict[Phase, frozenset[Phase]] = {
    P.UNJOINED: frozenset({P.JOINING, P.SYNCING, P.STABLE}),
    P.JOINING: frozenset({P.UNJOINED, P.JOINING, P.SYNCING, P.STABLE}),
    P.SYNCING: frozenset({P.JOINING}),
    P.STABLE: frozenset({P.SYNCING}),
    P.CLOSED: frozenset(Phase),
}


# ---------------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class FindCoordinator:
    rid: int
    group_id: str


@dataclass(frozen=True)
class Send:
    """A request for the coordinator. Its answer goes to on_response(rid, attempt), a failure to
    on_failure(rid, attempt): an answer to an earlier attempt of the same rid is ignored."""
    rid: int
    api: ApiKey
    request: Any
    timeout_ms: int
    attempt: int = 1
    node: int = -1  # the coordinator it is for (gone by the time it is sent: it fails)


@dataclass(frozen=True)
class DropCoordinator:
    why: str


@dataclass(frozen=True)
class NeedPartitionCounts:
    rid: int
    topics: frozenset[str]


@dataclass(frozen=True)
class CommitConsumed:
    """Commit the consumed positions of these partitions (all of the assignment if None)."""
    partitions: frozenset[TopicPartition] | None
    why: str


@dataclass(frozen=True)
class Revoked:
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True)
class Assigned:
    partitions: frozenset[TopicPartition]  # the whole assignment now
    added: frozenset[TopicPartition]


@dataclass(frozen=True)
class Lost:
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True)
class CheckMetadata:
    """Due every metadata_max_age_ms: a pattern's topics; the leader, its group's partitions."""
    pattern: bool
    group_topics: frozenset[str]
    partition_counts: Mapping[str, int]


@dataclass(frozen=True)
class Done:
    rid: int
    result: Any
    error: KafkaError | None


Action = (FindCoordinator | Send | DropCoordinator | NeedPartitionCounts | CommitConsumed |
          Revoked | Assigned | Lost | CheckMetadata | Done)


@dataclass(frozen=True)
class MemberSettings:
    group_id: str
    group_instance_id: str | None = None
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 3000
    max_poll_interval_ms: int = 300_000
    partition_assignment_strategy: tuple[str, ...] = ("range", "cooperative-sticky")
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = 5000
    request_timeout_ms: int = 30_000
    retry_backoff_ms: int = 100
    metadata_max_age_ms: int = 300_000
    client_rack: str | None = None
    # A JoinGroup may park at the coordinator for the rebalance timeout, plus this
    join_timeout_extra_ms: int = JOIN_TIMEOUT_EXTRA_MS

    def check(self) -> None:
        if not self.group_id:
            raise ValueError("group_id must not be empty")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError(f"heartbeat_interval_ms ({self.heartbeat_interval_ms}) must be "
                             f"less than session_timeout_ms ({self.session_timeout_ms})")


@dataclass
class _Pending:
    """A coordinator request: on the wire (sent), or waiting for the coordinator or a retry."""
    kind: str  # join, sync, heartbeat, leave, commit, fetch, counts
    api: ApiKey | None
    request: Any
    deadline_ms: int
    timeout_ms: int
    generation: int = NO_GENERATION
    sent: bool = False
    retry_at_ms: int = -1
    attempts: int = 0
    last_error: str = ""
    wanted: frozenset[TopicPartition] = frozenset()
    created_ms: int = 0
    followers: list[int] = field(default_factory=list)  # commits it superseded: end with it
    offsets: dict[TopicPartition, tuple[int, int]] | None = None  # a commit's
    member_id: str = ""  # a commit's


@dataclass
class _Round:
    """The round under way: what it waits for."""
    started_ms: int
    retry_at_ms: int = -1
    rid: int = -1  # of the JoinGroup, the counts or the SyncGroup on the wire
    join: JoinGroupResponse | None = None


@dataclass
class _Coordinator:
    node: int | None = None
    finding_rid: int = -1
    retry_at_ms: int = -1
    attempts: int = 0
    last_error: str = ""
    last_heard_ms: int = 0


@dataclass
class MemberStats:
    rebalances: int = 0  # rounds completed
    joins: int = 0  # JoinGroups sent
    coordinator_moves: int = 0


@dataclass
class MemberMachine:
    settings: MemberSettings
    now_ms: int = 0
    phase: Phase = Phase.UNJOINED
    member_id: str = ""
    generation: int = NO_GENERATION
    protocol: str | None = None
    leader_id: str = ""
    topics: frozenset[str] = frozenset()
    pattern: re.Pattern[str] | None = None
    owned: frozenset[TopicPartition] = frozenset()  # told to the application
    rejoin_reason: str | None = "first join"
    fatal: KafkaError | None = None
    stats: MemberStats = field(default_factory=MemberStats)
    assignors: list[Assignor] = field(default_factory=list)
    _coordinator: _Coordinator = field(default_factory=_Coordinator)
    _pending: dict[int, _Pending] = field(default_factory=dict)
    _round: _Round | None = None
    _assignment: tuple[int, frozenset[TopicPartition]] | None = None  # (generation, partitions)
    _next_rid: int = 0
    _last_poll_ms: int = 0
    _left_for_poll_interval: bool = False
    leave_rid: int = -1  # the LeaveGroup under way: its Done ends it
    notes: list[str] = field(default_factory=list)  # for the driver's log: take_notes()
    failing_since_ms: int = -1  # the first failure on the wire since the last answer
    _heartbeat_at_ms: int = -1
    _heartbeat_rid: int = -1
    _auto_commit_at_ms: int = 0
    _metadata_at_ms: int = 0
    _group_topics: frozenset[str] = frozenset()  # the leader: every member's topics
    _partition_counts: dict[str, int] = field(default_factory=dict)
    _commit_sent: dict[TopicPartition, int] = field(default_factory=dict)  # newest commit rid
    _withheld_at_ms: int = -1  # the leader: when to hand out partitions a round withheld

    def __post_init__(self) -> None:
        self.settings.check()
        self.assignors = make_assignors(self.settings.partition_assignment_strategy)
        if not self.assignors:
            raise ValueError("partition_assignment_strategy names no assignor")
        self._last_poll_ms = self.now_ms
        self._auto_commit_at_ms = self.now_ms + self.settings.auto_commit_interval_ms

    # ------------------------------------------------------------------ what it is
    @property
    def cooperative(self) -> bool:
        return all(a.cooperative for a in self.assignors)

    @property
    def manual(self) -> bool:
        """Partitions come from assign(), not the group: commits go with no generation."""
        return not self.topics and self.pattern is None

    @property
    def coordinator(self) -> int | None:
        return self._coordinator.node

    @property
    def leading(self) -> bool:
        return bool(self.member_id) and self.leader_id == self.member_id

    @property
    def syncing(self) -> bool:
        """Between our JoinGroup's answer and our SyncGroup's: the coordinator refuses commits."""
        return self.phase is P.SYNCING

    @property
    def round_under_way(self) -> bool:
        return self.phase in (P.JOINING, P.SYNCING)

    def waiting_for(self) -> str:
        """What the member waits for now, in words (for timeouts and status lines)."""
        group = f"group {self.settings.group_id}"
        c = self._coordinator
        if self.fatal is not None:
            return f"nothing: {group} failed: {self.fatal}"
        asked = [p for p in self._pending.values() if p.kind in ("commit", "fetch", "leave")]
        if asked:
            p = asked[0]
            what = {"commit": "OffsetCommit", "fetch": "OffsetFetch", "leave": "LeaveGroup"}
            return f"{what[p.kind]} of {group} ({self._coordinator_state()})"
        if self.phase is P.STABLE and self._assignment is not None:
            return f"poll() to take the assignment of {group}"
        if self.phase is P.STABLE:
            return f"nothing ({group}, generation {self.generation})"
        if self.phase is P.UNJOINED:
            return f"poll() to join {group}" if not self.manual else "a subscription"
        if c.node is None:
            return f"the coordinator of {group} ({self._coordinator_state()})"
        r = self._round
        since = f" for {self.now_ms - r.started_ms} ms" if r is not None else ""
        pending = self._pending.get(r.rid) if r is not None else None
        last = f", last error: {pending.last_error}" if pending and pending.last_error else ""
        step = {P.JOINING: "JoinGroup", P.SYNCING: "SyncGroup"}[self.phase]
        if pending is not None and pending.kind == "counts":
            step = "the partition counts (Metadata) of the group's topics"
        return f"{step} of {group} at broker {c.node}{since}{last}"

    def _coordinator_state(self) -> str:
        c = self._coordinator
        if c.node is not None:
            return f"at broker {c.node}"
        last = f", last error: {c.last_error}" if c.last_error else ""
        return f"waiting for the coordinator: FindCoordinator, {c.attempts} attempts{last}"

    def unreachable_ms(self, now_ms: int) -> int:
        """How long requests of the group have failed on the wire with no answer between
        (0: the last one was answered): a cluster gone away, for a tool to give up on."""
        return 0 if self.failing_since_ms < 0 else now_ms - self.failing_since_ms

    def _failed(self) -> None:
        if self.failing_since_ms < 0:
            self.failing_since_ms = self.now_ms

    def next_deadline_ms(self) -> int | None:
        """When tick() next has work (None: only events can change anything)."""
        if self.phase is P.CLOSED:
            return None
        # Only times at which tick() changes something: a past time it cannot act on would
        # make the driver spin.
        c = self._coordinator
        times = [p.deadline_ms for p in self._pending.values() if not p.sent]
        if c.node is not None:
            times += [p.retry_at_ms for p in self._pending.values() if p.retry_at_ms >= 0]
        elif c.retry_at_ms >= 0:
            times.append(c.retry_at_ms)
        if self._round is not None and self._round.retry_at_ms >= 0:
            times.append(self._round.retry_at_ms)
        if self.phase is P.STABLE:
            if self._heartbeat_rid not in self._pending:
                times.append(self._heartbeat_at_ms)
            if self._withheld_at_ms >= 0:
                times.append(self._withheld_at_ms)
            times.append(self._last_poll_ms + self.settings.max_poll_interval_ms + 1)
            if c.node is not None:
                times.append(c.last_heard_ms + self.settings.session_timeout_ms + 1)
        return min(times) if times else None

    # ------------------------------------------------------------------ subscription
    def subscribe(self, topics: Iterable[str] | None, pattern: str | re.Pattern[str] | None,
                  known_topics: Iterable[str] = ()) -> None:
        if (topics is None) == (pattern is None):
            raise ValueError("subscribe takes a list of topics or a pattern, not both")
        if topics is not None:
            wanted = frozenset(topics)
            if any(not t for t in wanted):
                raise ValueError("topic names must not be empty")
            self.pattern = None
        else:
            self.pattern = re.compile(pattern) if isinstance(pattern, str) else pattern
            wanted = self.matching(known_topics)
        if wanted != self.topics or self.generation == NO_GENERATION:
            self.topics = wanted
            self.request_rejoin("subscription changed")
        self._metadata_at_ms = 0

    def matching(self, topics: Iterable[str]) -> frozenset[str]:
        """The topics a pattern subscription takes (internal topics never)."""
        if self.pattern is None:
            return self.topics
        return frozenset(t for t in topics if not t.startswith("__") and
                         self.pattern.fullmatch(t))

    def metadata_checked(self, now_ms: int, topics: Iterable[str] | None,
                         partition_counts: Mapping[str, int] | None) -> None:
        """The driver's answer to CheckMetadata: the cluster's topics (a pattern's), and the
        group's partition counts (the leader's). None: that part could not be read."""
        self.now_ms = now_ms
        if topics is not None and self.pattern is not None:
            wanted = self.matching(topics)
            if wanted != self.topics:
                self.topics = wanted
                self.request_rejoin(f"pattern now matches {sorted(wanted)}")
        if partition_counts is not None and self.leading and \
                dict(partition_counts) != self._partition_counts:
            self.request_rejoin("the group's topics changed their partitions")
        if topics is None and self.pattern is not None:
            self._metadata_at_ms = 0  # try again at the next poll

    def request_rejoin(self, reason: str) -> None:
        if self.phase is not P.CLOSED and self.rejoin_reason is None:
            self.rejoin_reason = reason
            self._note(f"rejoining: {reason}")

    def take_notes(self) -> list[str]:
        """What happened since the last call, in words (the machine has no logger)."""
        notes, self.notes = self.notes, []
        return notes

    def _note(self, text: str) -> None:
        if len(self.notes) >= NOTES_MAX:
            del self.notes[0]
        self.notes.append(text)

    # ------------------------------------------------------------------ poll and close
    def poll(self, now_ms: int) -> list[Action]:
        """The application polled: the pending assignment, a rejoin, an auto-commit, a metadata
        check, in that order. Raises the member's fatal error."""
        self.now_ms = now_ms
        if self.fatal is not None:
            raise self.fatal
        if self.phase is P.CLOSED:
            return []
        self._last_poll_ms = now_ms
        out: list[Action] = []
        if self.manual:
            self._auto_commit(out)
            return out
        if self._left_for_poll_interval:
            self._left_for_poll_interval = False
            self.request_rejoin("poll() called again after max_poll_interval_ms")
        self._take_assignment(out)
        if self.phase is P.UNJOINED and (self.rejoin_reason or self.generation == NO_GENERATION):
            self._before_join(out)
            self._start_round(out)
        elif self.phase is P.STABLE and self.rejoin_reason is not None:
            self._before_join(out)
            self._start_round(out)
        self._auto_commit(out)
        if now_ms >= self._metadata_at_ms:
            self._metadata_at_ms = now_ms + self.settings.metadata_max_age_ms
            if self.pattern is not None or (self.leading and self._group_topics):
                out.append(CheckMetadata(self.pattern is not None,
                                         self._group_topics if self.leading else frozenset(),
                                         dict(self._partition_counts)))
        return out

    def _take_assignment(self, out: list[Action]) -> None:
        if self._assignment is None:
            return
        generation, new = self._assignment
        self._assignment = None
        if generation != self.generation or self.phase is not P.STABLE:
            return  # lost before this poll: stale
        revoked, added = self.owned - new, new - self.owned
        if revoked:  # cooperative: give up what moved, then rejoin so it can be handed out
            if self.settings.enable_auto_commit:
                out.append(CommitConsumed(revoked, "before revoking"))
            out.append(Revoked(revoked))
            self.request_rejoin(f"revoked {names(revoked)} for others to take")
        self.owned = new
        self.stats.rebalances += 1
        out.append(Assigned(new, added))

    def _before_join(self, out: list[Action]) -> None:
        if not self.owned:
            return
        if self.generation == NO_GENERATION:
            out.append(Lost(self.owned))
            self.owned = frozenset()
        elif not self.cooperative:
            if self.settings.enable_auto_commit:
                out.append(CommitConsumed(self.owned, "before revoking"))
            out.append(Revoked(self.owned))
            self.owned = frozenset()

    def _auto_commit(self, out: list[Action]) -> None:
        if not self.settings.enable_auto_commit or self.now_ms < self._auto_commit_at_ms:
            return
        self._auto_commit_at_ms = self.now_ms + self.settings.auto_commit_interval_ms
        if self.owned or self.manual:
            out.append(CommitConsumed(None, "auto-commit"))

    def close(self, now_ms: int) -> list[Action]:
        """Commit (auto-commit), tell the listener, leave (a dynamic member), then CLOSED. The
        driver carries out the CommitConsumed and waits for its Done before the rest."""
        self.now_ms = now_ms
        if self.phase is P.CLOSED:
            return []
        out: list[Action] = []
        member = self.generation != NO_GENERATION and bool(self.owned)
        if self.settings.enable_auto_commit and (member or self.manual):
            out.append(CommitConsumed(None, "on close"))
        if self.owned:
            out.append(Revoked(self.owned) if member else Lost(self.owned))
        self.owned = frozenset()
        return out

    def leave(self, now_ms: int, why: str) -> list[Action]:
        """After close()'s actions (or unsubscribe): LeaveGroup (a dynamic member with an id; a
        static one keeps its place for the session, as Kafka's do) and forget the generation.
        A JoinGroup parked on the coordinator's connection would hold a LeaveGroup behind it for
        the whole rebalance, so that connection is dropped first."""
        self.now_ms = now_ms
        out: list[Action] = []
        if self._round is not None and self._round.rid in self._pending and \
                self._pending[self._round.rid].kind == "join":
            out += self._lose_coordinator("a JoinGroup on its connection was given up")
        for rid in [r for r, p in self._pending.items() if p.kind in ("join", "sync", "counts",
                                                                     "heartbeat")]:
            del self._pending[rid]
        self._round, self._assignment = None, None
        member_id, self.generation = self.member_id, NO_GENERATION
        if self.settings.group_instance_id is None:
            self.member_id = ""
        if self.phase not in (P.CLOSED, P.UNJOINED):
            self._enter(P.UNJOINED)
        self.leave_rid = -1
        if self.settings.group_instance_id is None and member_id:
            self.leave_rid, sent = self._ask_with_rid(
                "leave", ApiKey.LEAVE_GROUP, LeaveGroupRequest(
                    group_id=self.settings.group_id, member_id=member_id,
                    members=[MemberIdentity(member_id=member_id)]),
                self.settings.request_timeout_ms)
            out += sent
        return out

    def closed(self) -> None:
        """Close ran to its end: nothing more is sent."""
        self._enter(P.CLOSED)
        self._pending.clear()

    def unsubscribe(self, now_ms: int) -> list[Action]:
        out: list[Action] = []
        if self.owned:
            out.append(Revoked(self.owned) if self.generation != NO_GENERATION else
                       Lost(self.owned))
        self.owned = frozenset()
        out += self.leave(now_ms, "unsubscribed")
        self.topics, self.pattern = frozenset(), None
        return out

    # ------------------------------------------------------------------ commits and fetches
    def commit(self, now_ms: int, offsets: Mapping[TopicPartition, tuple[int, int]]
               ) -> tuple[int, list[Action]]:
        """Commit (offset, leader epoch) per partition for this member's generation. A request
        id, whose Done says how it ended (error: CommitFailedError if the group rebalanced)."""
        self.now_ms = now_ms
        generation, member_id = self.generation, self.member_id
        if self.manual:
            generation, member_id = NO_GENERATION, ""
        request = commit_request(self.settings.group_id, generation, member_id,
                                 self.settings.group_instance_id, offsets)
        # An older commit of these partitions still waiting (for the coordinator or a retry)
        # would land after this one and move the group's offsets back: it is superseded, and
        # ends as this one does.
        wanted = frozenset(offsets)
        followers: list[int] = []
        for old_rid, old in list(self._pending.items()):
            if old.kind == "commit" and not old.sent and old.wanted <= wanted:
                del self._pending[old_rid]
                followers += [old_rid, *old.followers]
        rid, out = self._ask_with_rid("commit", ApiKey.OFFSET_COMMIT, request,
                                      self.settings.request_timeout_ms, generation=generation)
        p = self._pending[rid]
        p.wanted, p.followers = wanted, followers
        p.offsets, p.member_id = dict(offsets), member_id
        if p.sent:  # at once: it is the newest of its partitions
            self._commit_sent.update((tp, rid) for tp in offsets)
        return rid, out

    def cancel(self, rid: int) -> None:
        """The driver no longer waits for this commit or fetch: never send it again."""
        p = self._pending.get(rid)
        if p is not None and p.kind in ("commit", "fetch") and not p.followers:
            del self._pending[rid]

    def fetch(self, now_ms: int, partitions: Iterable[TopicPartition]
              ) -> tuple[int, list[Action]]:
        """The committed (offset, epoch) of partitions: Done's result is a Committed."""
        self.now_ms = now_ms
        wanted = frozenset(partitions)
        rid, out = self._ask_with_rid("fetch", ApiKey.OFFSET_FETCH,
                                      fetch_request(self.settings.group_id, wanted),
                                      self.settings.request_timeout_ms)
        self._pending[rid].wanted = wanted
        return rid, out

    # ------------------------------------------------------------------ timers
    def tick(self, now_ms: int) -> list[Action]:
        self.now_ms = now_ms
        out: list[Action] = []
        if self.phase is P.CLOSED:
            return out
        c = self._coordinator
        if c.node is None:
            if 0 <= c.retry_at_ms <= now_ms:
                c.retry_at_ms = -1
            if self._needs_coordinator():
                out += self._find()
        for rid, p in list(self._pending.items()):
            if p.sent:
                continue
            if now_ms >= p.deadline_ms:
                out += self._give_up(rid, p)
            elif 0 <= p.retry_at_ms <= now_ms and c.node is not None:
                p.retry_at_ms = -1
                out += self._send(rid, p)
        r = self._round
        if r is not None and 0 <= r.retry_at_ms <= now_ms and self.phase is P.JOINING:
            r.retry_at_ms = -1
            out += self._join()
        if self.phase is P.STABLE:
            out += self._stable_timers(now_ms)
        return out

    def _stable_timers(self, now_ms: int) -> list[Action]:
        s = self.settings
        if now_ms - self._last_poll_ms > s.max_poll_interval_ms:
            # A member that does not poll cannot process: give its partitions to others. The
            # next poll() joins again, reporting them lost.
            self._left_for_poll_interval = True
            return self.leave(now_ms, "max_poll_interval_ms exceeded")
        if 0 <= self._withheld_at_ms <= now_ms:
            self._withheld_at_ms = -1
            if self.leading:
                self.request_rejoin("partitions withheld for a revocation were never handed "
                                    "out")
        if self._coordinator.node is not None and \
                now_ms - self._coordinator.last_heard_ms > s.session_timeout_ms:
            # No heartbeat answered for a session: as Java does, look for the coordinator again
            # (it may have moved while its old broker is unreachable).
            return self._lose_coordinator(f"no heartbeat answer for {s.session_timeout_ms} ms")
        if now_ms >= self._heartbeat_at_ms and self._heartbeat_rid not in self._pending:
            self._heartbeat_at_ms = now_ms + s.heartbeat_interval_ms
            rid, out = self._ask_with_rid(
                "heartbeat", ApiKey.HEARTBEAT, HeartbeatRequest(
                    group_id=s.group_id, generation_id=self.generation,
                    member_id=self.member_id, group_instance_id=s.group_instance_id),
                min(s.request_timeout_ms, s.session_timeout_ms), generation=self.generation)
            self._heartbeat_rid = rid
            return out
        return []

    # ------------------------------------------------------------------ answers
    def on_coordinator(self, now_ms: int, rid: int, error_code: int, node_id: int,
                       error: str = "") -> list[Action]:
        """FindCoordinator's answer (error_code -1 with error: it failed on the wire)."""
        self.now_ms = now_ms
        c = self._coordinator
        if rid != c.finding_rid or self.phase is P.CLOSED:
            return []
        c.finding_rid = -1
        if error_code < 0:
            self._failed()
        else:
            self.failing_since_ms = -1
        if error_code != 0:
            c.last_error = error or _code_name(error_code)
            if error_code >= 0 and error_code not in COORDINATOR_GONE | RETRY_LATER:
                err = error_for(error_code, f"find the coordinator of group "
                                f"{self.settings.group_id}")
                return self._fail_waiting(err)
            # Kafka's retry.backoff.max.ms: doubling from retry_backoff_ms up to 1 s, so that a
            # cluster gone away is not asked hundreds of times
            c.retry_at_ms = now_ms + min(RETRY_BACKOFF_MAX_MS, self.settings.retry_backoff_ms *
                                         2 ** min(c.attempts - 1, 10))
            return []
        if c.node is not None and c.node != node_id:
            self.stats.coordinator_moves += 1
        c.node, c.attempts, c.last_error, c.last_heard_ms = node_id, 0, "", now_ms
        out: list[Action] = []
        for prid, p in list(self._pending.items()):
            if not p.sent and p.api is not None:
                p.retry_at_ms = -1
                out += self._send(prid, p)
        if self.phase is P.JOINING and self._round is not None and \
                self._round.rid not in self._pending and self._round.retry_at_ms < 0:
            out += self._join()
        return out

    def on_failure(self, now_ms: int, rid: int, why: str, attempt: int | None = None
                   ) -> list[Action]:
        """A request to the coordinator failed on the wire (connection lost, timed out)."""
        self.now_ms = now_ms
        p = self._pending.get(rid)
        if p is None or not p.sent or attempt not in (None, p.attempts):
            return []  # (already settled when the coordinator was lost)
        self._failed()
        out = self._lose_coordinator(f"{p.kind}: {why}")
        if rid in self._pending:
            out += self._retry(rid, p, why)
        return out

    def on_response(self, now_ms: int, rid: int, response: Any, attempt: int | None = None
                    ) -> list[Action]:
        self.now_ms = now_ms
        p = self._pending.get(rid)
        if p is None or self.phase is P.CLOSED or attempt not in (None, p.attempts):
            return []
        self._coordinator.last_heard_ms = now_ms
        self.failing_since_ms = -1
        handler = _RESPONSES[p.kind]
        return handler(self, rid, p, response)

    def on_partition_counts(self, now_ms: int, rid: int, counts: Mapping[str, int] | None,
                            error: str = "") -> list[Action]:
        """The leader's metadata: partition counts of the group's topics (None: it failed)."""
        self.now_ms = now_ms
        p = self._pending.pop(rid, None)
        r = self._round
        if p is None or r is None or r.join is None or self.phase is not P.SYNCING:
            return []
        if counts is None:
            return self._round_failed(f"metadata for the assignment: {error}", backoff=True)
        self._partition_counts = dict(counts)
        try:
            assignments = self._assign(r.join, counts)
        except KafkaError as exc:
            self.fatal = exc
            return []
        return self._sync(assignments)

    # ------------------------------------------------------------------ the round
    def _enter(self, new: Phase) -> None:
        if self.phase not in PHASES[new]:
            raise AssertionError(f"member of {self.settings.group_id}: {self.phase.value} -> "
                                 f"{new.value} is not a transition")
        self.phase = new

    def _start_round(self, out: list[Action]) -> None:
        self._round = _Round(started_ms=self.now_ms)
        self._withheld_at_ms = -1  # this round hands out what it can
        self._enter(P.JOINING)
        out += self._join()

    def _join(self) -> list[Action]:
        s = self.settings
        r = self._round
        assert r is not None and self.phase is P.JOINING
        if self._coordinator.node is None:
            return self._find()
        protocols = [JoinGroupRequestProtocol(name=a.name, metadata=encode_subscription(
            a.subscription(sorted(self.topics), sorted(self.owned), self.generation,
                           s.client_rack))) for a in self.assignors]
        request = JoinGroupRequest(
            group_id=s.group_id, session_timeout_ms=s.session_timeout_ms,
            rebalance_timeout_ms=s.max_poll_interval_ms, member_id=self.member_id,
            group_instance_id=s.group_instance_id, protocol_type=PROTOCOL_TYPE,
            protocols=protocols)
        self.rejoin_reason = None  # a rejoin asked for from now on needs another round
        self.stats.joins += 1
        timeout = max(s.request_timeout_ms, s.max_poll_interval_ms + s.join_timeout_extra_ms)
        r.rid, out = self._ask_with_rid("join", ApiKey.JOIN_GROUP, request, timeout)
        return out

    def _on_join(self, rid: int, p: _Pending, answer: JoinGroupResponse) -> list[Action]:
        del self._pending[rid]
        r = self._round
        if r is None or r.rid != rid or self.phase is not P.JOINING:
            return []
        code = answer.error_code
        if code == E.MEMBER_ID_REQUIRED:
            self.member_id = answer.member_id
            return self._join()
        if code:
            return self._join_failed(code, "JoinGroup")
        self.member_id, self.generation = answer.member_id, answer.generation_id
        self.protocol, self.leader_id = answer.protocol_name, answer.leader
        r.join = answer
        self._enter(P.SYNCING)
        if answer.leader != answer.member_id:
            return self._sync([])
        topics = self._member_topics(answer)
        r.rid, out = self._ask_with_rid("counts", None, None, self.settings.request_timeout_ms)
        self._pending[r.rid].sent = True
        self._group_topics = topics
        return out + [NeedPartitionCounts(r.rid, topics)]

    def _member_topics(self, answer: JoinGroupResponse) -> frozenset[str]:
        topics: set[str] = set()
        for m in answer.members:
            try:
                topics.update(decode_subscription(m.metadata).topics)
            except ValueError:
                continue
        return frozenset(topics)

    def _assign(self, answer: JoinGroupResponse, counts: Mapping[str, int]
                ) -> list[SyncGroupRequestAssignment]:
        """As the leader: the chosen assignor over the members' subscriptions. A member whose
        subscription cannot be read gets nothing."""
        assignor = next((a for a in self.assignors if a.name == answer.protocol_name), None)
        if assignor is None:
            raise KafkaError(f"group {self.settings.group_id}: the coordinator chose protocol "
                             f"{answer.protocol_name!r}, which we did not offer")
        subscriptions = {}
        for m in answer.members:
            try:
                sub = decode_subscription(m.metadata)
            except ValueError:
                sub = Subscription(topics=[])
            sub.group_instance_id = m.group_instance_id
            subscriptions[m.member_id] = sub
        result = assignor.assign(counts, subscriptions)
        given = {tp for a in result.values() for tp in a.partitions}
        wanted = {tp for s in subscriptions.values() for t in s.topics if t in counts
                  for tp in (TopicPartition(t, p) for p in range(counts[t]))}
        # Cooperative: partitions withheld while their owner revokes them. If that owner never
        # rejoins (a static member restarted in the meantime takes its place without a round),
        # nobody would hand them out: the leader rejoins after a session to do so.
        self._withheld_at_ms = -1 if given >= wanted else \
            self.now_ms + self.settings.session_timeout_ms
        return [SyncGroupRequestAssignment(member_id=member, assignment=encode_assignment(a))
                for member, a in result.items()]

    def _sync(self, assignments: list[SyncGroupRequestAssignment]) -> list[Action]:
        s = self.settings
        r = self._round
        assert r is not None
        r.rid, out = self._ask_with_rid("sync", ApiKey.SYNC_GROUP, SyncGroupRequest(
            group_id=s.group_id, generation_id=self.generation, member_id=self.member_id,
            group_instance_id=s.group_instance_id, protocol_type=PROTOCOL_TYPE,
            protocol_name=self.protocol, assignments=assignments), s.request_timeout_ms)
        return out

    def _on_sync(self, rid: int, p: _Pending, answer: SyncGroupResponse) -> list[Action]:
        del self._pending[rid]
        r = self._round
        if r is None or r.rid != rid or self.phase is not P.SYNCING:
            return []
        if answer.error_code:
            return self._join_failed(answer.error_code, "SyncGroup")
        try:
            assignment = decode_assignment(answer.assignment)
        except ValueError as exc:
            self.fatal = KafkaError(f"group {self.settings.group_id}: unreadable assignment "
                                    f"from the leader: {exc}")
            return []
        partitions = frozenset(tp for tp in assignment.partitions if tp.topic in self.topics)
        self._assignment = (self.generation, partitions)
        self._round = None
        self._enter(P.STABLE)
        self._heartbeat_at_ms = self.now_ms + self.settings.heartbeat_interval_ms
        return []

    def _join_failed(self, code: int, what: str) -> list[Action]:
        if code in FATAL_JOIN:
            self._note(f"{what}: {_code_name(code)}: the member cannot go on")
            self.fatal = error_for(code, f"{what} for group {self.settings.group_id}")
            self._round = None
            self._enter(P.UNJOINED)
            return []
        out: list[Action] = []
        if code in COORDINATOR_GONE:
            out = self._lose_coordinator(f"{what}: {_code_name(code)}")
            if self._coordinator.node is None and (self._round is None or
                                                   self._round.rid < 0):
                return out  # the round went on from _lose_coordinator
        elif code == E.UNKNOWN_MEMBER_ID:
            self.member_id, self.generation = "", NO_GENERATION
        elif code == E.ILLEGAL_GENERATION:
            self.generation = NO_GENERATION
        elif code not in RETRY_LATER and code != E.REBALANCE_IN_PROGRESS:
            self.fatal = error_for(code, f"{what} for group {self.settings.group_id}")
            self._round = None
            self._enter(P.UNJOINED)
            return out
        return out + self._round_failed(f"{what}: {_code_name(code)}",
                                        backoff=code not in REJOIN_AT_ONCE)

    def _round_failed(self, why: str, backoff: bool) -> list[Action]:
        """The round goes on (at once, or after the backoff), unless the generation was lost
        while we own partitions: poll() then reports them lost and starts a new round."""
        self._note(f"round interrupted: {why}; joining again")
        self.rejoin_reason = self.rejoin_reason or why
        if self.generation == NO_GENERATION and self.owned:
            self._round = None
            self._enter(P.UNJOINED)
            return []
        if self.phase is not P.JOINING:
            self._enter(P.JOINING)
        r = self._round
        assert r is not None
        r.rid, r.join = -1, None
        if backoff:
            r.retry_at_ms = self.now_ms + self.settings.retry_backoff_ms
            return []
        return self._join()

    def _on_heartbeat(self, rid: int, p: _Pending, answer: HeartbeatResponse) -> list[Action]:
        del self._pending[rid]
        code = answer.error_code
        if code == 0 or self.phase is not P.STABLE or p.generation != self.generation:
            return []  # fine, or about a generation we no longer hold
        if code == E.REBALANCE_IN_PROGRESS:
            self.request_rejoin("the coordinator is rebalancing the group")
            return []
        if code in COORDINATOR_GONE:
            return self._lose_coordinator(f"heartbeat: {_code_name(code)}")
        if code in (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION):
            if code == E.UNKNOWN_MEMBER_ID:
                self.member_id = ""
            self.generation = NO_GENERATION
            self.request_rejoin(f"heartbeat: {_code_name(code)}")
            self._enter(P.UNJOINED)
        elif code == E.FENCED_INSTANCE_ID:
            self._note("heartbeat: FENCED_INSTANCE_ID: another member took our instance id")
            self.fatal = error_for(code, f"heartbeat of group {self.settings.group_id}")
            self.generation = NO_GENERATION
            self._enter(P.UNJOINED)
        return []

    def _on_leave(self, rid: int, p: _Pending, answer: Any) -> list[Action]:
        del self._pending[rid]
        return [Done(rid, answer.error_code, None)]

    def _on_commit(self, rid: int, p: _Pending, answer: OffsetCommitResponse) -> list[Action]:
        codes = commit_errors(answer)
        if codes & COORDINATOR_GONE or (codes and codes <= RETRY_LATER):
            out = self._lose_coordinator("OffsetCommit") if codes & COORDINATOR_GONE else []
            return out + self._retry(rid, p, _codes(codes))
        del self._pending[rid]
        if not codes:
            return _done(rid, p, None, None)
        code = min(codes)
        if not codes & REBALANCED:
            return _done(rid, p, None, error_for(code, f"commit offsets of group "
                                                       f"{self.settings.group_id}"))
        if p.generation == self.generation and self.phase is P.STABLE:
            if code != E.REBALANCE_IN_PROGRESS:
                self.generation = NO_GENERATION
                if code == E.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                if self.phase is P.STABLE:
                    self._enter(P.UNJOINED)
            if not self.round_under_way:
                # (a round under way settles it: asking for another after it made members that
                # commit during rounds rebalance for ever)
                self.request_rejoin(f"OffsetCommit: {_code_name(code)}")
        return _done(rid, p, None, CommitFailedError(
            f"group {self.settings.group_id}: commit refused ({_code_name(code)}): the group "
            "rebalanced; poll() again to rejoin"))

    def _on_fetch(self, rid: int, p: _Pending, answer: OffsetFetchResponse) -> list[Action]:
        codes = fetch_errors(answer)
        retry = RETRY_LATER | {E.UNSTABLE_OFFSET_COMMIT}
        if codes & COORDINATOR_GONE or (codes and codes <= retry):
            out = self._lose_coordinator("OffsetFetch") if codes & COORDINATOR_GONE else []
            return out + self._retry(rid, p, _codes(codes))
        del self._pending[rid]
        if codes:
            return [Done(rid, None, error_for(min(codes), f"fetch committed offsets of group "
                                                          f"{self.settings.group_id}"))]
        result: Committed = committed_offsets(answer, p.wanted)
        return [Done(rid, result, None)]

    # ------------------------------------------------------------------ the coordinator
    def _find(self) -> list[Action]:
        c = self._coordinator
        if c.node is not None or c.finding_rid >= 0 or c.retry_at_ms >= 0:
            return []
        self._next_rid += 1
        c.finding_rid = self._next_rid
        c.attempts += 1
        return [FindCoordinator(c.finding_rid, self.settings.group_id)]

    def _needs_coordinator(self) -> bool:
        r = self._round
        return (self.phase is P.STABLE or any(p.api is not None and not p.sent
                                              for p in self._pending.values()) or
                (self.phase is P.JOINING and r is not None and r.rid not in self._pending and
                 r.retry_at_ms < 0))

    def _lose_coordinator(self, why: str) -> list[Action]:
        c = self._coordinator
        if c.node is None:
            return []
        self._note(f"coordinator {c.node} lost: {why}")
        c.node, c.last_error = None, why
        out: list[Action] = [DropCoordinator(why)]
        # Requests on the connection going away: commits and fetches go again once the
        # coordinator is found; the round starts its request again; heartbeats are dropped.
        for rid, p in list(self._pending.items()):
            if p.kind in ("commit", "fetch"):
                p.sent, p.last_error = False, why
            elif p.kind == "leave":
                out += self._give_up(rid, p)
            elif p.kind != "counts":
                del self._pending[rid]
        r = self._round
        if r is not None and self.round_under_way and r.rid not in self._pending:
            out += self._round_failed(why, backoff=True)
        return out

    def _ask_with_rid(self, kind: str, api: ApiKey | None, request: Any, timeout_ms: int,
                      generation: int = NO_GENERATION) -> tuple[int, list[Action]]:
        if len(self._pending) >= PENDING_MAX:
            raise KafkaError(f"group {self.settings.group_id}: {PENDING_MAX} requests pending")
        self._next_rid += 1
        rid = self._next_rid
        p = _Pending(kind, api, request, deadline_ms=self.now_ms + self.settings.
                     request_timeout_ms, timeout_ms=timeout_ms, generation=generation,
                     created_ms=self.now_ms)
        self._pending[rid] = p
        if api is None:
            return rid, []
        if self._coordinator.node is None:
            return rid, self._find()
        return rid, self._send(rid, p)

    def _ask(self, kind: str, api: ApiKey, request: Any, timeout_ms: int) -> list[Action]:
        return self._ask_with_rid(kind, api, request, timeout_ms)[1]

    def _send(self, rid: int, p: _Pending) -> list[Action]:
        assert p.api is not None
        if p.offsets is not None and not self._still_newest(rid, p):
            del self._pending[rid]
            return _done(rid, p, None, None)  # superseded by a newer commit already sent
        p.sent, p.attempts = True, p.attempts + 1
        node = self._coordinator.node
        assert node is not None, "a coordinator request with no coordinator"
        return [Send(rid, p.api, p.request, p.timeout_ms, p.attempts, node)]

    def _still_newest(self, rid: int, p: _Pending) -> bool:
        """A commit sent again (after a coordinator move, a timeout) must not overwrite a newer
        commit of the same partitions, already sent: it would move their offsets back. (Java's
        commitAsync does not retry for this reason.) Its other partitions go; False if none."""
        assert p.offsets is not None
        keep = {tp: v for tp, v in p.offsets.items() if self._commit_sent.get(tp, 0) <= rid}
        if not keep:
            return False
        if len(keep) != len(p.offsets):
            p.offsets, p.wanted = keep, frozenset(keep)
            p.request = commit_request(self.settings.group_id, p.generation, p.member_id,
                                       self.settings.group_instance_id, keep)
        for tp in keep:
            self._commit_sent[tp] = rid
        return True

    def _retry(self, rid: int, p: _Pending, why: str) -> list[Action]:
        """A request failed: commits and fetches go again after the backoff, until their
        deadline; a round's request makes the round go again; heartbeats and leaves do not."""
        p.sent, p.last_error = False, why
        if p.kind == "leave":
            return self._give_up(rid, p)
        if p.kind in ("commit", "fetch"):
            if self.now_ms >= p.deadline_ms:
                return self._give_up(rid, p)
            p.retry_at_ms = self.now_ms + self.settings.retry_backoff_ms
            return []
        del self._pending[rid]
        if p.kind in ("join", "sync") and self._round is not None and self._round.rid == rid:
            return self._round_failed(f"{p.kind}: {why}", backoff=True)
        return []

    def _give_up(self, rid: int, p: _Pending) -> list[Action]:
        del self._pending[rid]
        if p.kind not in ("commit", "fetch", "leave"):
            return []
        what = {"commit": "OffsetCommit", "fetch": "OffsetFetch", "leave": "LeaveGroup"}[p.kind]
        waited = self._coordinator.node is None and "the coordinator" or "an answer"
        last = p.last_error or self._coordinator.last_error or "no answer"
        return _done(rid, p, None, KafkaTimeoutError(
            f"group {self.settings.group_id}: {what} gave up after "
            f"{self.now_ms - p.created_ms} ms waiting for {waited} ({p.attempts} "
            f"attempts; last error: {last})"))

    def _fail_waiting(self, error: KafkaError) -> list[Action]:
        out: list[Action] = []
        for rid, p in list(self._pending.items()):
            if p.kind in ("commit", "fetch") and not p.sent:
                del self._pending[rid]
                out += _done(rid, p, None, error)
        if self.round_under_way:
            self.fatal = error
        return out


_RESPONSES: dict[str, Callable[[MemberMachine, int, _Pending, Any], list[Action]]] = {
    "join": MemberMachine._on_join,
    "sync": MemberMachine._on_sync,
    "heartbeat": MemberMachine._on_heartbeat,
    "leave": MemberMachine._on_leave,
    "commit": MemberMachine._on_commit,
    "fetch": MemberMachine._on_fetch,
}


def _done(rid: int, p: _Pending, result: Any, error: KafkaError | None) -> list[Action]:
    """The end of a commit or fetch, and of the commits it superseded."""
    return [Done(r, result, error) for r in (rid, *p.followers)]


def names(partitions: Iterable[TopicPartition]) -> str:
    parts = sorted(partitions)
    return ", ".join(f"{t}-{p}" for t, p in parts) if parts else "nothing"


def _code_name(code: int) -> str:
    try:
        return E(code).name
    except ValueError:
        return str(code)


def _codes(codes: Iterable[int]) -> str:
    return ", ".join(sorted(_code_name(c) for c in codes))
