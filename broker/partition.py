"""`Partition`: one partition's replica on this broker, as a state machine.

Theory of operation
-------------------
The controller decides; a partition only follows. Its state (`PartitionState`: leader, leader
epoch, partition epoch, replicas, ISR) changes only through `apply`, with what a LeaderAndIsr
carried, and the role follows from it:

    new state's leader      role        on entering
    ------------------      ---------   ----------------------------------------------------
    this broker             LEADER      the leader epoch begins at the log end (KIP-101: the
                                        epoch cache gets (leader_epoch, log_end_offset));
                                        followers' progress is forgotten
    another broker          FOLLOWER    waiters are woken (they are no longer served here);
                                        follower.SourceFetcher takes it from here: it
                                        truncates by epoch, appends the leader's batches and
                                        keeps our high watermark in log.high_watermark (min of
                                        the leader's and our log end)
    -1                      OFFLINE     nothing is served

A state is applied only when its leader epoch is newer, or equal with a newer partition epoch (an
ISR change); otherwise `apply` returns False and nothing changes (the handler answers
STALE_CONTROLLER_EPOCH for that partition, as Kafka does).

High watermark (leader only): the smallest log end offset among the members of the *maximal* ISR,
the leader's own included, and it stands still while the ISR the controller holds is smaller than
min.insync.replicas (capped at the replication factor), whatever is in flight: KIP-966's rule,
which keeps every replica that left the ISR meanwhile eligible to lead (the controller's ELR)
without losing a committed record; followers report theirs through `update_follower` (the fetch
path).
The maximal ISR is the ISR plus the members of an AlterPartition still in flight
(`proposed_isr`, set by isr.IsrManager): Kafka's rule, because the controller may already have
accepted an expansion whose answer has not arrived, and a replica the controller counts as in sync
must hold everything committed. With an ISR of the leader alone (and min.insync.replicas 1, or
replication factor 1) the high watermark is the log end. It never moves back.

Caught up (Kafka's lastCaughtUpTimeMs): a fetch at offset >= the leader's log end now makes the
follower caught up now; a fetch at offset >= the leader's log end as of its previous fetch makes it
caught up as of that previous fetch. So a follower that keeps up with steady appends (it always
asks for what existed at its last fetch) stays caught up, and one that falls behind stops being
caught up at its last good fetch. `lagging_followers` are ISR members not caught up for
replica_lag_time_max_ms whose log end is not the leader's (isr.py shrinks the ISR by them).

Invariants. The high watermark, the ISR (and the proposal in flight) and the leader epoch change
only through this class's methods, which check them: the high watermark lies between the log
start and the log end, and a leader's never moves back within its leader epoch (a follower's is
its leader's, capped at our log end: after a leader change the new leader may report a lower one
until its followers fetch, as in Kafka); the ISR and any proposed ISR lie within the replicas; the
leader epoch never goes back, nor the partition epoch within one leader epoch. A state from the
controller that breaks these is refused (InvalidPartitionState: bad input, answered with an
error); a change from our own code that breaks them is a bug, and an AssertionError stops the
broker (docs/design.md: crash on a broken invariant, handle operating errors).

The clock is injected (ms) and the storage `Log` is synchronous, so a simulation can drive this
class without an event loop. Callers wake waiting requests (purgatories) when a method returns
True: an append, a high watermark move or a role change.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .clock import Clock
from .fencing import leader_epoch_error
from .storage import AppendInfo, CorruptLog, Log

log = logging.getLogger("epochlog.broker")

NO_LEADER = -1


class InvalidPartitionState(ValueError):
    """A partition state from the controller that cannot be (ISR outside the replicas, ...)."""


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"
    OFFLINE = "offline"


@dataclass(frozen=True)
class PartitionState:
    """What the controller says about a partition (LeaderAndIsr's partition state)."""

    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    controller_epoch: int = -1

    def problem(self) -> str | None:
        """Why this state cannot be applied, or None."""
        if len(set(self.replicas)) != len(self.replicas):
            return f"replicas {list(self.replicas)} name a broker twice"
        if not set(self.isr) <= set(self.replicas):
            return f"isr {list(self.isr)} is not within the replicas {list(self.replicas)}"
        if self.leader != NO_LEADER and self.leader not in self.replicas:
            return f"leader {self.leader} is not one of the replicas {list(self.replicas)}"
        if self.leader_epoch < 0 or self.partition_epoch < 0:
            return f"negative epoch (leader {self.leader_epoch}, partition {self.partition_epoch})"
        return None

    def newer_than(self, other: PartitionState | None) -> bool:
        if other is None:
            return True
        if self.leader_epoch != other.leader_epoch:
            return self.leader_epoch > other.leader_epoch
        return self.partition_epoch > other.partition_epoch


@dataclass
class FollowerProgress:
    """What the leader knows of one follower (filled by the replication issue's fetch path)."""

    log_end_offset: int = -1
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1
    last_fetch_leader_log_end_offset: int = -1  # the leader's log end at the previous fetch
    log_start_offset: int = -1  # as its last fetch said (Fetch v5+): DeleteRecords' low watermark
    # The high watermark our last fetch answer told it (handlers/fetch.py: a follower that has
    # not been told the current one is answered at once, not after max wait; KIP-392).
    high_watermark_sent: int = -1


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    broker_id: int
    log: Log
    clock: Clock
    state: PartitionState | None = None
    role: Role = Role.OFFLINE
    followers: dict[int, FollowerProgress] = field(default_factory=dict)
    # The topic's min.insync.replicas (topic_configs.py): set_min_insync_replicas, under_min_isr.
    _min_insync_replicas: int = field(default=1, init=False)
    # Follower only: the leader's high watermark as its last fetch answer gave it, which may be
    # above our log end (the log's own is capped there). The fetcher sets it; handlers/fetch.py
    # tells KIP-392's "known committed, not yet held here" (OFFSET_NOT_AVAILABLE) by it.
    leader_high_watermark: int = -1
    # The ISR of an AlterPartition in flight (isr.IsrManager); None when there is none.
    proposed_isr: tuple[int, ...] | None = None
    # Where our leader epoch began (the log end when we became leader); -1 when not leading.
    leader_epoch_start_offset: int = -1
    # Called when a follower outside the ISR may now join it (the ISR task wakes early).
    on_isr_candidate: Callable[[Partition], None] | None = None
    # Corrupt places in the log already reported (handlers/fetch.py logs each once).
    corruption_reported: set[str] = field(default_factory=set)
    # Told when a read finds corrupt data in our log (ReplicaManager.storage_failed takes the
    # replica offline and repairs it).
    on_corrupt: Callable[[Partition, CorruptLog], None] | None = None

    def __repr__(self) -> str:
        return f"Partition({self.name}, {self.role.value}, epoch {self.leader_epoch})"

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.index}"

    # ------------------------------------------------------------------------------ reading
    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch if self.state else -1

    @property
    def leader_id(self) -> int:
        return self.state.leader if self.state else NO_LEADER

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def high_watermark(self) -> int:
        return self.log.high_watermark

    @property
    def log_end_offset(self) -> int:
        return self.log.log_end_offset

    @property
    def log_start_offset(self) -> int:
        return self.log.log_start_offset

    @property
    def isr(self) -> tuple[int, ...]:
        return self.state.isr if self.state else ()

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The ISR plus the members of an AlterPartition in flight (high watermark, acks)."""
        if self.proposed_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.proposed_isr if r not in self.isr)

    @property
    def min_insync_replicas(self) -> int:
        """The topic's min.insync.replicas, as set (under_min_isr applies it)."""
        return self._min_insync_replicas

    def under_min_isr(self, *, maximal: bool = False) -> bool:
        """The one min.insync.replicas rule (Kafka's Partition.effectiveMinIsr): fewer in-sync
        replicas than min.insync.replicas, capped at the replication factor (a setting above it
        could never be met). Appends with acks=all and the metrics count the ISR the controller
        confirmed; the high watermark and the acks=all answer count the maximal one (`maximal`:
        an AlterPartition in flight included, as the controller may already have accepted it)."""
        members = self.maximal_isr if maximal else self.isr
        replication_factor = len(self.state.replicas) if self.state else 0
        return len(members) < min(self._min_insync_replicas, replication_factor)

    def fence(self, current_leader_epoch: int) -> int:
        """KIP-320/KIP-359: 0, FENCED_LEADER_EPOCH or UNKNOWN_LEADER_EPOCH."""
        return leader_epoch_error(current_leader_epoch, self.leader_epoch)

    @property
    def last_stable_offset(self) -> int:
        return self.log.last_stable_offset

    def readable_end(self, from_replica: bool, read_committed: bool = False) -> int:
        """The offset reads stop before: the high watermark for consumers (the last stable
        offset for read_committed ones), the log end for replicas (followers must see what is
        not yet committed to commit it)."""
        if from_replica:
            return self.log_end_offset
        return self.last_stable_offset if read_committed else self.high_watermark

    # ---------------------------------------------------------------------------- transitions
    def apply(self, new: PartitionState) -> bool:
        """Take the controller's state if it is newer; False (and no change) if it is not.
        InvalidPartitionState (and no change) if it breaks the partition's invariants."""
        if not new.newer_than(self.state):
            return False
        problem = new.problem()
        if problem is not None:
            raise InvalidPartitionState(f"{self.name}: {problem}")
        old_role, old_epoch = self.role, self.leader_epoch
        old_partition_epoch = self.state.partition_epoch if self.state else -1
        assert new.leader_epoch > old_epoch or (
            new.leader_epoch == old_epoch and new.partition_epoch > old_partition_epoch), \
            f"{self.name}: epochs went back to {new.leader_epoch}/{new.partition_epoch}"
        self.state = new
        self.proposed_isr = None  # the controller's word replaces any proposal in flight
        if new.leader == self.broker_id:
            self._become_leader(old_role, old_epoch)
        elif new.leader == NO_LEADER:
            self.role = Role.OFFLINE
            log.info("%s: offline at leader epoch %d (no leader)", self.name, new.leader_epoch)
        else:
            self._become_follower(old_role)
        return True

    def _become_leader(self, old_role: Role, old_epoch: int) -> None:
        assert self.state is not None
        epoch = self.state.leader_epoch
        if old_role is not Role.LEADER or old_epoch != epoch:
            self.log.begin_leader_epoch(epoch)
            self.leader_epoch_start_offset = self.log_end_offset
            now_ms = self.clock()  # a follower's lag counts from when we began to lead
            self.followers = {r: FollowerProgress(last_caught_up_ms=now_ms)
                              for r in self.state.replicas if r != self.broker_id}
            log.info("%s: became LEADER at leader epoch %d (was %s at %d), log end %d, high "
                     "watermark %d, isr %s", self.name, epoch, old_role.value, old_epoch,
                     self.log_end_offset, self.high_watermark, list(self.state.isr))
        else:
            log.info("%s: isr %s at partition epoch %d", self.name, list(self.state.isr),
                     self.state.partition_epoch)
        self.role = Role.LEADER
        self.maybe_advance_high_watermark()

    def _become_follower(self, old_role: Role) -> None:
        assert self.state is not None
        self.role = Role.FOLLOWER
        self.followers = {}
        self.leader_epoch_start_offset = -1
        log.info("%s: became FOLLOWER of %d at leader epoch %d (was %s), log end %d",
                 self.name, self.state.leader, self.state.leader_epoch, old_role.value,
                 self.log_end_offset)

    def go_offline(self, why: str) -> None:
        """Stop serving: the partition is removed here, or the broker is closing."""
        if self.role is not Role.OFFLINE:
            log.debug("%s: offline: %s", self.name, why)
        self.role = Role.OFFLINE

    def take_offline(self, why: str) -> Role:
        """Our replica's log failed (a storage error): neither lead nor follow until the
        controller has acted on it. The role we had."""
        was = self.role
        self.role = Role.OFFLINE
        self.followers = {}
        self.leader_epoch_start_offset = -1
        self.proposed_isr = None
        log.info("%s: replica offline at leader epoch %d (was %s): %s", self.name,
                 self.leader_epoch, was.value, why)
        return was

    def follow_again(self) -> None:
        """Back to following the leader of our current state (a repaired replica outside the
        ISR, which the controller need not be told about)."""
        assert self.state is not None and self.state.leader not in (self.broker_id, NO_LEADER)
        self._become_follower(self.role)

    def resign(self, why: str) -> bool:
        """Stop leading without a new state (our generation ended: docs/control-plane.md says
        stop acting as a leader). The next LeaderAndIsr, with a newer epoch, decides again."""
        if self.role is not Role.LEADER:
            return False
        self.role = Role.OFFLINE
        log.info("%s: stopped leading at leader epoch %d: %s", self.name, self.leader_epoch, why)
        return True

    # ----------------------------------------------------------------------------- following
    def follow_high_watermark(self, leader_high_watermark: int) -> bool:
        """A fetch answer from our leader gave its high watermark: ours is that, capped at our
        log end. True if ours changed. It may move back (see Invariants)."""
        assert self.role is not Role.LEADER, f"{self.name}: a leader follows no high watermark"
        self.leader_high_watermark = leader_high_watermark  # KIP-392: committed, maybe not here
        new = max(min(leader_high_watermark, self.log_end_offset), self.log_start_offset)
        if new == self.log.high_watermark:
            return False
        self._set_high_watermark(new)
        return True

    def truncate_to(self, offset: int, why: str | None = None) -> None:
        """Cut our log from offset on (a follower truncating by leader epoch, KIP-101; a damaged
        replica: `why` says so); the high watermark comes down with the log end if it was
        above it."""
        assert self.role is not Role.LEADER, f"{self.name}: a leader does not truncate"
        if why is None:
            self.log.truncate_to(offset)
        else:
            self.log.truncate_to(offset, why)
        self._check_high_watermark()

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop the whole log and start it at offset (the leader's log starts past our end)."""
        assert self.role is not Role.LEADER, f"{self.name}: a leader does not truncate"
        self.log.truncate_fully_and_start_at(offset)
        self._check_high_watermark()

    # ------------------------------------------------------------------------------- leading
    def append_as_leader(self, records: bytes) -> AppendInfo:
        """Append client batches at our leader epoch. Storage errors propagate (each carries its
        Kafka error code); the caller has checked that we lead."""
        assert self.role is Role.LEADER, self
        info = self.log.append_as_leader(records, self.leader_epoch)
        self.maybe_advance_high_watermark()
        return info

    def update_follower(self, replica_id: int, log_end_offset: int,
                        last_fetched_epoch: int = -1, log_start_offset: int = -1) -> bool:
        """A follower fetched from log_end_offset (so holds everything before it). True if the
        high watermark moved. A fetch past our log end, or one whose last fetched epoch
        diverges from ours (it will truncate first), says nothing about what it holds of our
        log and is ignored, as Kafka does."""
        progress = self.followers.get(replica_id)
        if progress is None or self.role is not Role.LEADER:
            return False
        progress.log_start_offset = max(progress.log_start_offset, log_start_offset)
        leader_end = self.log_end_offset
        if log_end_offset > leader_end or self._diverges(last_fetched_epoch, log_end_offset):
            return False
        now_ms = self.clock()
        if log_end_offset >= leader_end:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, now_ms)
        elif log_end_offset >= progress.last_fetch_leader_log_end_offset >= 0:
            progress.last_caught_up_ms = max(progress.last_caught_up_ms, progress.last_fetch_ms)
        progress.log_end_offset = log_end_offset
        progress.last_fetch_ms = now_ms
        progress.last_fetch_leader_log_end_offset = leader_end
        if self.on_isr_candidate is not None and self.may_join_isr(replica_id):
            self.on_isr_candidate(self)
        return self.maybe_advance_high_watermark()

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords on the leader: offsets below offset become unreadable (-1: the high
        watermark). The new log start offset; InvalidPartitionState if this is not the leader
        or offset lies beyond the high watermark (nothing acknowledged-but-uncommitted goes)."""
        if self.role is not Role.LEADER:
            raise InvalidPartitionState(f"{self.name}: only the leader deletes records")
        target = self.high_watermark if offset == -1 else offset
        if not 0 <= target <= self.high_watermark:
            raise InvalidPartitionState(
                f"{self.name}: cannot delete records before {offset}: the high watermark is "
                f"{self.high_watermark}")
        self.log.advance_log_start_offset(target)
        return self.log_start_offset

    def low_watermark(self) -> int:
        """The lowest log start offset among the leader and its in-sync followers: below it, no
        in-sync replica still holds a record (what DeleteRecords answers)."""
        starts = [self.log_start_offset]
        for replica in self.isr:
            if replica != self.broker_id:
                progress = self.followers.get(replica)
                starts.append(progress.log_start_offset if progress is not None else -1)
        return min(starts)

    def _diverges(self, last_fetched_epoch: int, fetch_offset: int) -> bool:
        if last_fetched_epoch < 0:
            return False
        epoch, end = self.log.end_offset_for_epoch(last_fetched_epoch)
        return epoch != last_fetched_epoch or end < fetch_offset

    def may_join_isr(self, replica_id: int) -> bool:
        """Kafka's isFollowerInSync for a replica outside the ISR: it holds everything up to
        the high watermark and has reached our current leader epoch (so its log is ours up to
        there). Liveness and backoff are the ISR manager's to check."""
        progress = self.followers.get(replica_id)
        if (progress is None or self.role is not Role.LEADER or replica_id in self.isr
                or self.proposed_isr is not None):
            return False
        return (progress.log_end_offset >= self.high_watermark
                and progress.log_end_offset >= self.leader_epoch_start_offset >= 0)

    def maybe_advance_high_watermark(self) -> bool:
        if self.role is not Role.LEADER or self.state is None:
            return False
        if self.under_min_isr():
            # KIP-966: what left the ISR since must still hold everything committed. The ISR
            # the controller holds, not the maximal one: an expansion in flight may never be
            # accepted, and the controller elects from its ISR and ELR (simulation seed 395).
            return False
        ends = [self.log_end_offset]
        for member in self.maximal_isr:
            if member != self.broker_id:
                progress = self.followers.get(member)
                ends.append(progress.log_end_offset if progress else -1)
        new_hw = min(ends)
        if new_hw <= self.log.high_watermark:
            return False
        self._set_high_watermark(new_hw)
        return True

    def set_min_insync_replicas(self, value: int) -> bool:
        """The topic's min.insync.replicas (its settings were applied or changed). True if the
        high watermark moved (a lower setting may let it advance)."""
        assert value >= 1, f"{self.name}: min.insync.replicas {value}"
        if value == self._min_insync_replicas:
            return False
        self._min_insync_replicas = value
        return self.maybe_advance_high_watermark()

    def propose_isr(self, isr: tuple[int, ...]) -> None:
        """An AlterPartition for this ISR is in flight (isr.IsrManager): the maximal ISR counts
        its members until the controller answers."""
        assert self.role is Role.LEADER and self.state is not None, \
            f"{self.name}: only a leader proposes an ISR"
        assert set(isr) <= set(self.state.replicas) and self.broker_id in isr, \
            f"{self.name}: proposed isr {list(isr)} is not within {list(self.state.replicas)} " \
            "or leaves the leader out"
        self.proposed_isr = isr

    def withdraw_isr_proposal(self) -> bool:
        """The proposal in flight failed: back to the ISR we hold. True if the high watermark
        moved (the maximal ISR shrank)."""
        self.proposed_isr = None
        return self.maybe_advance_high_watermark()

    # ---------------------------------------------------------------------------- invariants
    def _set_high_watermark(self, new: int) -> None:
        old = self.log.high_watermark
        assert self.log_start_offset <= new <= self.log_end_offset, \
            f"{self.name}: high watermark {new} outside the log [{self.log_start_offset}, " \
            f"{self.log_end_offset}]"
        assert self.role is not Role.LEADER or new >= old, \
            f"{self.name}: the leader's high watermark went back from {old} to {new}"
        self.log.update_high_watermark(new)

    def _check_high_watermark(self) -> None:
        hw = self.log.high_watermark
        assert self.log_start_offset <= hw <= self.log_end_offset, \
            f"{self.name}: high watermark {hw} outside the log [{self.log_start_offset}, " \
            f"{self.log_end_offset}]"

    def lagging_followers(self, lag_ms_max: int) -> Sequence[int]:
        """ISR members out of sync (Kafka's isCaughtUp negated): not caught up for lag_ms_max
        and not at our log end. A member we have no progress for counts from when we began
        to lead."""
        now_ms = self.clock()
        return [r for r in self.isr if r != self.broker_id and r in self.followers
                and self._lagging(self.followers[r], lag_ms_max, now_ms)]

    def keeps_up(self, replica_id: int, lag_ms_max: int) -> bool:
        """A follower the shrink rule would keep: at our log end or caught up within
        lag_ms_max. Kafka expands the ISR only as a follower fetches, so a follower that stopped
        fetching (paused, its session not yet expired) is never added back; we decide on a
        timer, so without this it would be: while the ISR is below min.insync.replicas the high
        watermark stands still (KIP-966), its old log end stays >= it, and it would join and be
        shrunk away again every lag_ms_max, with acks=all writes waiting on it each time."""
        progress = self.followers.get(replica_id)
        return progress is not None and not self._lagging(progress, lag_ms_max, self.clock())

    def _lagging(self, progress: FollowerProgress, lag_ms_max: int, now_ms: int) -> bool:
        return (progress.log_end_offset != self.log_end_offset
                and now_ms - progress.last_caught_up_ms > lag_ms_max)
