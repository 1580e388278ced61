"""`IsrManager`: when a leader shrinks or expands a partition's ISR (sans-IO, injected clock).

Theory of operation
-------------------
A leader changes its ISR only by asking the controller (AlterPartition, naming the leader epoch
and partition epoch it holds; docs/control-plane.md), one request in flight per partition, as
Kafka's `Partition.maybeShrinkIsr` / `maybeExpandIsr` do:

    shrink  ISR members that are out of sync: not caught up for `lag_time_max_ms` and not at our
            log end (Partition.lagging_followers, Kafka's lastCaughtUpTimeMs rule).
    expand  one follower outside the ISR whose log end is >= the high watermark and >= the start
            offset of our leader epoch (Partition.may_join_isr), which the shrink rule would
            keep (Partition.keeps_up: Kafka expands only as a follower fetches, so one that
            stopped fetching never joins), which the metadata cache shows
            live (`replica_live`) and which the controller has not just refused as
            INELIGIBLE_REPLICA (then it waits `retry_backoff_ms`, so a dead or fenced broker is
            not proposed in a tight loop). Shrinks go first; expansions one replica at a time.

`due(partitions)` returns the proposals to send now and marks each partition *pending*
(`Partition.proposed_isr`): no second proposal while one is in flight, and the high watermark is
taken over the maximal ISR (current plus proposed members). That is Kafka's safety rule: the
controller may accept an expansion whose answer never reaches us, and from then on it may elect
the new member, which must therefore hold everything we call committed.

`on_answer(partition, proposal, error, state)` applies the controller's answer:

    0                                   adopt the answered state (Partition.apply: it is newer by
                                        its partition epoch), log who left/joined and why
    FENCED_LEADER_EPOCH,                clear pending; a LeaderAndIsr with the controller's state
    INVALID_UPDATE_VERSION              is coming. If the answer's state has our leader epoch and
                                        is newer, adopt it now (an earlier try of ours may have
                                        been accepted with its answer lost: the controller sends
                                        no LeaderAndIsr for a change the leader asked for)
    INELIGIBLE_REPLICA                  clear pending, back the proposed member off
    NOT_CONTROLLER, STALE_BROKER_EPOCH, stay pending (the maximal ISR keeps counting) and send
    NETWORK_EXCEPTION, REQUEST_TIMED_OUT the same proposal again after retry_backoff_ms
    anything else                       clear pending, log it

Every state the manager holds is bounded by the partitions led times their replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from epochlog.protocol.error_codes import ErrorCode, name_of

from .partition import Partition, PartitionState

log = logging.getLogger("epochlog.broker")
E = ErrorCode

# Answers after which the same proposal is sent again (the outcome is unknown or the controller
# will be able to decide later); while retrying the partition stays pending.
RETRIABLE = frozenset({E.NOT_CONTROLLER, E.STALE_BROKER_EPOCH, E.NETWORK_EXCEPTION,
                       E.REQUEST_TIMED_OUT, E.UNKNOWN_SERVER_ERROR})
# Answers after which a LeaderAndIsr carries the controller's state to us.
SUPERSEDED = frozenset({E.FENCED_LEADER_EPOCH, E.INVALID_UPDATE_VERSION})


@dataclass(frozen=True)
class IsrProposal:
    """One partition's AlterPartition: the epochs we hold and the ISR we ask for."""

    topic: str
    index: int
    leader_epoch: int
    partition_epoch: int
    isr: tuple[int, ...]
    left: tuple[int, ...] = ()
    joined: tuple[int, ...] = ()
    why: str = ""


@dataclass
class _InFlight:
    proposal: IsrProposal
    retry_at_ms: int | None = None  # set after a retriable failure: send again from then on


@dataclass
class IsrCounters:
    shrinks_total: int = 0
    expands_total: int = 0
    alter_partition_failures_total: int = 0
    failures_by_error: dict[str, int] = field(default_factory=dict)


class IsrManager:
    def __init__(self, broker_id: int, clock: Callable[[], int], *, lag_time_max_ms: int,
                 retry_backoff_ms: int,
                 replica_live: Callable[[int], bool] = lambda _: True) -> None:
        assert lag_time_max_ms > 0 and retry_backoff_ms >= 0
        self.broker_id = broker_id
        self.clock = clock
        self.lag_time_max_ms = lag_time_max_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.replica_live = replica_live
        self.counters = IsrCounters()
        self._in_flight: dict[tuple[str, int], _InFlight] = {}
        self._ineligible_until: dict[tuple[str, int, int], int] = {}  # (t, i, replica) -> ms

    # ------------------------------------------------------------------------------ deciding
    def due(self, partitions: Iterable[Partition]) -> list[IsrProposal]:
        """Proposals to send now (new ones, and retries whose backoff is over); each new one
        marks its partition pending."""
        now_ms = self.clock()
        self._ineligible_until = {k: t for k, t in self._ineligible_until.items() if t > now_ms}
        out = []
        for p in partitions:
            key = (p.topic, p.index)
            flight = self._in_flight.get(key)
            if flight is not None:
                if not _still_pending(p, flight.proposal):
                    del self._in_flight[key]  # a LeaderAndIsr replaced it
                else:
                    if flight.retry_at_ms is not None and now_ms >= flight.retry_at_ms:
                        flight.retry_at_ms = None
                        out.append(flight.proposal)
                    continue
            proposal = self._decide(p, now_ms)
            if proposal is not None:
                p.propose_isr(proposal.isr)
                self._in_flight[key] = _InFlight(proposal)
                out.append(proposal)
        return out

    def _decide(self, p: Partition, now_ms: int) -> IsrProposal | None:
        if not p.is_leader or p.state is None or p.proposed_isr is not None:
            return None
        lagging = p.lagging_followers(self.lag_time_max_ms)
        if lagging:
            why = "; ".join(self._lag_reason(p, r, now_ms) for r in lagging)
            return self._proposal(p, tuple(r for r in p.isr if r not in lagging),
                                  left=tuple(lagging), why=why)
        for r in p.state.replicas:
            if (r != self.broker_id and p.may_join_isr(r) and self.replica_live(r)
                    and p.keeps_up(r, self.lag_time_max_ms)
                    and (p.topic, p.index, r) not in self._ineligible_until):
                why = (f"{r} caught up: log end {p.followers[r].log_end_offset} >= high "
                       f"watermark {p.high_watermark} and leader epoch start "
                       f"{p.leader_epoch_start_offset}")
                return self._proposal(p, p.isr + (r,), joined=(r,), why=why)
        return None

    def _lag_reason(self, p: Partition, replica: int, now_ms: int) -> str:
        f = p.followers[replica]
        return (f"{replica} not caught up for {now_ms - f.last_caught_up_ms} ms > "
                f"{self.lag_time_max_ms} (its log end {f.log_end_offset}, ours "
                f"{p.log_end_offset})")

    @staticmethod
    def _proposal(p: Partition, isr: tuple[int, ...], *, left: tuple[int, ...] = (),
                  joined: tuple[int, ...] = (), why: str) -> IsrProposal:
        assert p.state is not None
        return IsrProposal(p.topic, p.index, p.state.leader_epoch, p.state.partition_epoch, isr,
                           left, joined, why)

    def next_retry_ms(self) -> int | None:
        """The earliest time a retry is due (for the driver's sleep); None if none waits."""
        times = [f.retry_at_ms for f in self._in_flight.values() if f.retry_at_ms is not None]
        return min(times) if times else None

    # ------------------------------------------------------------------------------ answers
    def on_answer(self, partition: Partition, proposal: IsrProposal, error: int,
                  state: PartitionState | None) -> bool:
        """Apply the controller's answer to a proposal from `due`. True when the partition
        changed (the caller pokes its waiters: the high watermark may have moved)."""
        key = (proposal.topic, proposal.index)
        flight = self._in_flight.get(key)
        mine = flight is not None and flight.proposal is proposal \
            and _still_pending(partition, proposal)
        if error in RETRIABLE:
            self._count_failure(error)
            if mine:
                assert flight is not None
                flight.retry_at_ms = self.clock() + self.retry_backoff_ms
                log.info("%s: AlterPartition %s answered %s; retrying in %d ms",
                         partition.name, list(proposal.isr), name_of(error),
                         self.retry_backoff_ms)
            return False
        if flight is not None and flight.proposal is proposal:
            del self._in_flight[key]
        old_isr = partition.isr
        adopted = False
        if error == 0 or error in SUPERSEDED:
            adopted = self._adopt(partition, state)
        if error:
            self._count_failure(error)
            self._log_refusal(partition, proposal, error, adopted)
            if error == E.INELIGIBLE_REPLICA:
                until = self.clock() + self.retry_backoff_ms
                for r in proposal.joined:
                    self._ineligible_until[(proposal.topic, proposal.index, r)] = until
        if adopted:
            self._log_change(partition, proposal, old_isr, error)
            return True
        if mine and partition.proposed_isr == proposal.isr:
            return partition.withdraw_isr_proposal()  # the maximal ISR shrinks
        return False

    @staticmethod
    def _adopt(partition: Partition, state: PartitionState | None) -> bool:
        """Apply the answered state when it is for our leader epoch and newer than ours."""
        if state is None or partition.state is None or not partition.is_leader:
            return False
        if state.leader != partition.broker_id or state.leader_epoch != partition.leader_epoch:
            return False  # leadership moved: the LeaderAndIsr that is coming says where
        return partition.apply(state)

    def _count_failure(self, error: int) -> None:
        c = self.counters
        c.alter_partition_failures_total += 1
        name = name_of(error)
        c.failures_by_error[name] = c.failures_by_error.get(name, 0) + 1

    def _log_change(self, partition: Partition, proposal: IsrProposal, old_isr: tuple[int, ...],
                    error: int) -> None:
        new_isr = partition.isr
        left = [r for r in old_isr if r not in new_isr]
        joined = [r for r in new_isr if r not in old_isr]
        self.counters.shrinks_total += bool(left)
        self.counters.expands_total += bool(joined)
        if error:
            why = f"the controller's state, answered with {name_of(error)}"
        else:
            why = proposal.why
        log.info("%s: ISR %s -> %s at partition epoch %d (left %s, joined %s): %s",
                 partition.name, list(old_isr), list(new_isr),
                 partition.state.partition_epoch if partition.state else -1, left, joined, why)

    @staticmethod
    def _log_refusal(partition: Partition, proposal: IsrProposal, error: int,
                     adopted: bool) -> None:
        then = "adopting the controller's state" if adopted else (
            "waiting for the controller's LeaderAndIsr" if error in SUPERSEDED else
            "keeping the ISR we hold")
        # Expected races, said and not warned about (Kafka logs them below WARN too):
        # INELIGIBLE_REPLICA, with a member that is shutting down, restarting or whose log went
        # offline; FENCED_LEADER_EPOCH and INVALID_UPDATE_VERSION, the controller having changed
        # the partition meanwhile (brokers registering one after another in a restart of the
        # whole cluster change the partitions' epochs while their leaders propose ISRs).
        expected = error == E.INELIGIBLE_REPLICA or error in SUPERSEDED
        level = logging.INFO if expected else logging.WARNING
        log.log(level, "%s: AlterPartition to %s (leader epoch %d, partition epoch %d) refused: "
                "%s; %s", partition.name, list(proposal.isr), proposal.leader_epoch,
                proposal.partition_epoch, name_of(error), then)


def _still_pending(p: Partition, proposal: IsrProposal) -> bool:
    """The partition is still the one the proposal was made for, waiting for its answer."""
    return (p.is_leader and p.state is not None and p.proposed_isr == proposal.isr
            and p.state.leader_epoch == proposal.leader_epoch
            and p.state.partition_epoch == proposal.partition_epoch)
