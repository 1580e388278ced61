"""A simulated consumer group member: the real `MemberMachine`, driven as client/group.py does.

Theory of operation
-------------------
`MemberNode` is one consumer process. Its driver mirrors client/group.py on simulated time:
requests the machine asks for go over the simulated network (coordinator requests on one FIFO
connection, which `DropCoordinator` closes), answers and failures go back to the machine, and a
timer calls `tick()` at the machine's `next_deadline_ms()`. The application polls every `poll_ms`:
the machine's `poll()` actions are carried out in order, and a commit before a revoke (or on
close) holds the rest until its `Done` (the real driver awaits it inside poll()).

The application (`App`) reads the partitions it was told it owns: each poll moves the position
of each by a few records, once its committed offset is known (an `Assigned` partition first
fetches it, as the real consumer does). `consumed` is the positions at the latest poll's start:
what auto-commit commits. The checkers read `App.assignment` and the machine's generation.

Faults a member takes (harness): crash (the process and its machine are gone; a restart is a new
process, with the same group.instance.id if static), pause (SIGSTOP: nothing runs, timers and
answers queue), an application stall (no poll() for a while: max.poll.interval.ms), and a
graceful close (commit, revoke, LeaveGroup).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epochlog.client.errors import KafkaError
from epochlog.client.group_member import (
    NO_GENERATION,
    Action,
    Assigned,
    CheckMetadata,
    CommitConsumed,
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
)
from epochlog.client.types import TopicPartition
from epochlog.protocol.registry import APIS

from .group_coordinator import FIND
from .scheduler import Node, Scheduler

if TYPE_CHECKING:
    from .group_checkers import GroupCheckers
    from .network import Conn, Network

TP = tuple[str, int]
RECORDS_PER_POLL_MAX = 3
METADATA_MS = 3  # the leader's Metadata request, answered by any broker


@dataclass
class App:
    """What the application holds: its partitions and positions."""
    assignment: set[TopicPartition] = field(default_factory=set)
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    awaiting: set[TopicPartition] = field(default_factory=set)  # committed offset not known yet
    consumed: dict[TopicPartition, int] = field(default_factory=dict)
    generation: int = NO_GENERATION  # of the SyncGroup that gave the assignment


class MemberNode(Node):
    def __init__(self, sim: Scheduler, node_id: int, name: str, network: Network,
                 settings: MemberSettings, topic: str, partitions: int, brokers: list[int],
                 checkers: GroupCheckers, poll_ms: int, broken: str = "") -> None:
        super().__init__(sim, node_id, name)
        self.network = network
        self.settings = settings
        self.topic = topic
        self.partitions = partitions
        self.brokers = brokers
        self.checkers = checkers
        self.poll_ms = poll_ms
        self.broken = broken
        self.on_exit: Callable[[MemberNode], None] = lambda member: None  # the supervisor
        self.machine = MemberMachine(settings)
        self.app = App()
        self.stalled_until = -1
        self.closing = False
        self._queue: deque[Action] = deque()
        self._blocking = -1  # the commit rid the queue waits for
        self._fetches: dict[int, frozenset[TopicPartition]] = {}
        self._conn: Conn | None = None
        self._conn_node = -1
        self._tick_at = -1

    # ------------------------------------------------------------------ lifecycle
    def on_start(self) -> None:
        self.machine = MemberMachine(self.settings, now_ms=self.sim.now_ms)
        self.machine.subscribe([self.topic], None)
        self.app = App()
        self.stalled_until, self.closing = -1, False
        self._queue.clear()
        self._blocking, self._fetches, self._conn, self._tick_at = -1, {}, None, -1
        self.timer(self.sim.rng.randint(0, self.poll_ms), self._poll_loop)

    def on_crash(self) -> None:
        self.network.crashed(self)
        self.app = App()  # the checkers see a dead process own nothing

    @property
    def live(self) -> bool:
        return self.up and self.machine.phase is not Phase.CLOSED

    def after_event(self) -> None:
        if not self.live:
            return
        deadline = self.machine.next_deadline_ms()
        if deadline is not None and (self._tick_at < self.sim.now_ms or deadline < self._tick_at):
            self._tick_at = deadline
            self.timer(deadline - self.sim.now_ms, self._tick)
        self.checkers.member_changed()

    def _tick(self) -> None:
        self._tick_at = -1
        if self.live:
            self._apply(self.machine.tick(self.sim.now_ms))

    # ------------------------------------------------------------------ the application
    def _poll_loop(self) -> None:
        if not self.live or self.closing:
            return
        self.timer(self.poll_ms, self._poll_loop)
        if self.sim.now_ms < self.stalled_until or self._queue or self._blocking >= 0:
            return  # the application is busy, or the last poll() is still under way
        self.app.consumed = {tp: self.app.positions[tp] for tp in self.app.assignment
                             if tp not in self.app.awaiting}
        try:
            actions = self.machine.poll(self.sim.now_ms)
        except KafkaError as exc:
            self._fail(str(exc))
            return
        self._trace(actions)
        self._queue.extend(actions)
        self._carry_out()
        waiting = self.app.awaiting - set().union(*self._fetches.values())
        if waiting and not self._queue:
            self._fetch(frozenset(waiting))
        if not self._queue:
            self._read()

    def _read(self) -> None:
        for tp in sorted(self.app.assignment - self.app.awaiting):
            got = self.sim.rng.randint(0, RECORDS_PER_POLL_MAX)
            if got:
                self.app.positions[tp] += got
                self.checkers.consumed(self, tp)

    def stall(self, duration_ms: int) -> None:
        self.stalled_until = self.sim.now_ms + duration_ms
        self.sim.log(f"{self.name}: application stalls for {duration_ms}ms")

    def close(self) -> None:
        """A graceful close, as Consumer.close(): commit, revoke, leave; then the process
        exits."""
        if not self.live or self.closing:
            return
        self.sim.log(f"{self.name}: CLOSE")
        self.closing = True
        self._queue.clear()
        self._blocking = -1
        self.app.consumed = dict(self.app.positions)  # close commits next_offsets()
        self._queue.extend(self.machine.close(self.sim.now_ms))
        self._carry_out()

    def _closed(self) -> None:
        self._apply(self.machine.leave(self.sim.now_ms, "closing"))
        self.timer(self.settings.request_timeout_ms, self._exit)

    def _exit(self) -> None:
        self.machine.closed()
        self.app = App()
        if self.up:
            self.crash()  # the process exits; nothing of it runs again until a restart
            self.on_exit(self)

    def _fail(self, why: str) -> None:
        """An error the member cannot go on from (a static member fenced): the process exits
        with it, and its supervisor starts it again."""
        self.sim.log(f"{self.name}: FATAL {why}")
        self.checkers.fatal(self, why)
        self.app = App()
        self.crash()
        self.on_exit(self)

    def _trace(self, actions: list[Action]) -> None:
        if self.sim.trace is None:
            return
        m = self.machine
        for note in m.take_notes():
            self.sim.log(f"{self.name}: {note}")
        for a in actions:
            text = repr(a) if not isinstance(a, Send) else \
                f"Send({a.api.name}, rid {a.rid}, attempt {a.attempt})"
            self.sim.log(f"{self.name} [{m.phase.value} gen {m.generation} "
                         f"{m.member_id or '-'}]: {text[:300]}")

    # ------------------------------------------------------------------ carrying out actions
    def _carry_out(self) -> None:
        """poll()'s (or close()'s) actions in order; a blocking commit holds the rest."""
        while self._queue and self._blocking < 0:
            action = self._queue.popleft()
            match action:
                case CommitConsumed(partitions=parts, why=why):
                    self._commit_consumed(parts, why)
                case Revoked(partitions=parts):
                    self.checkers.count("revoked")
                    if self.broken != "keep_revoked":
                        self._drop(parts)
                case Lost(partitions=parts):
                    self.checkers.count("lost")
                    self._drop(parts)
                case Assigned(partitions=parts, added=added):
                    self._assigned(parts, added)
                case CheckMetadata():
                    counts = {self.topic: self.partitions} if action.group_topics else None
                    self.machine.metadata_checked(self.sim.now_ms, None, counts)
                case _:
                    self._apply([action])
        if not self._queue and self._blocking < 0 and self.closing:
            self._closed()

    def _drop(self, parts: frozenset[TopicPartition]) -> None:
        # a lookup under way for them is stale (if they come back, another member may have
        # committed since), as client/group.py drops it
        self._fetches = {rid: wanted - parts for rid, wanted in self._fetches.items()}
        self.app.assignment -= parts
        self.app.awaiting -= parts
        for tp in parts:
            self.app.positions.pop(tp, None)

    def _assigned(self, parts: frozenset[TopicPartition], added: frozenset[TopicPartition]
                  ) -> None:
        self.app.generation = self.machine.generation
        self.app.assignment = set(parts) | (self.app.assignment if self.broken == "keep_revoked"
                                            else set())
        if added:
            self.app.awaiting |= added
            self._fetch(added)

    def _fetch(self, partitions: frozenset[TopicPartition]) -> None:
        rid, actions = self.machine.fetch(self.sim.now_ms, partitions)
        self._fetches[rid] = partitions
        self._apply(actions)

    def _commit_consumed(self, parts: frozenset[TopicPartition] | None, why: str) -> None:
        consumed = self.app.consumed
        chosen = consumed if parts is None else {tp: o for tp, o in consumed.items()
                                                 if tp in parts}
        if self.broken == "stale_commit":
            chosen = {tp: max(0, o - 2) for tp, o in chosen.items()}
        offsets = {tp: (o, 0) for tp, o in chosen.items()}
        if not offsets:
            return
        rid, actions = self.machine.commit(self.sim.now_ms, offsets)
        if why != "auto-commit":
            self._blocking = rid  # the real driver awaits it inside poll() or close()
        self._apply(actions)

    # ------------------------------------------------------------------ the wire
    def _apply(self, actions: list[Action]) -> None:
        self._trace(actions)
        for action in actions:
            match action:
                case Send():
                    self._send(action)
                case FindCoordinator(rid=rid):
                    self._find(rid)
                case NeedPartitionCounts(rid=rid):
                    self.timer(METADATA_MS, self._counts, rid)
                case DropCoordinator():
                    self._drop_conn()
                case Done():
                    self._done(action)
                case _:
                    raise AssertionError(f"{self.name}: {action} outside poll(): a machine bug")

    def _done(self, done: Done) -> None:
        if done.error is not None:
            self.checkers.count(type(done.error).__name__)
        added = self._fetches.pop(done.rid, None)
        if added is not None:
            self._fetched(added, done)
        if done.rid == self._blocking:
            self._blocking = -1
            self._carry_out()

    def _fetched(self, added: frozenset[TopicPartition], done: Done) -> None:
        if done.error is not None:
            return  # still awaiting: the next poll asks again (as client/group.py does)
        for tp in added & self.app.awaiting:
            self.app.awaiting.discard(tp)
            got = done.result.get(tp)
            self.app.positions[tp] = 0 if got is None else got[0]
            self.checkers.started(self, tp, self.app.positions[tp])

    def _counts(self, rid: int) -> None:
        self._apply(self.machine.on_partition_counts(self.sim.now_ms, rid,
                                                     {self.topic: self.partitions}))

    def _find(self, rid: int) -> None:
        broker = self.sim.rng.choice(self.brokers)

        def answered(answer: tuple[int, int]) -> None:
            self._apply(self.machine.on_coordinator(self.sim.now_ms, rid, answer[0], answer[1]))

        def failed(why: str) -> None:
            self._apply(self.machine.on_coordinator(self.sim.now_ms, rid, -1, -1, why))

        self.network.call(self, broker, FIND, 0, None, self.settings.request_timeout_ms,
                          answered, failed)

    def _send(self, send: Send) -> None:
        node = send.node
        if node != self.machine.coordinator:  # lost since: the real driver fails it too
            self.timer(0, self._send_failed, send)
            return
        if self._conn is None or not self._conn.open or self._conn_node != node:
            self._drop_conn()
            self._conn, self._conn_node = self.network.open_conn(self, node), node
        rid, attempt = send.rid, send.attempt

        def answered(answer: Any) -> None:
            self._apply(self.machine.on_response(self.sim.now_ms, rid, answer, attempt))

        def failed(why: str) -> None:
            self._apply(self.machine.on_failure(self.sim.now_ms, rid, why, attempt))

        self.network.call(self, node, send.api, APIS[send.api].max_version, send.request,
                          send.timeout_ms, answered, failed, conn=self._conn)

    def _send_failed(self, send: Send) -> None:
        self._apply(self.machine.on_failure(self.sim.now_ms, send.rid, "coordinator gone",
                                            send.attempt))

    def _drop_conn(self) -> None:
        if self._conn is not None:
            self.network.close_conn(self._conn, self)
            self._conn = None
