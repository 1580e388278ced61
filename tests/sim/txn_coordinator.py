"""The simulated transaction coordinator: the broker's real `TxnCore` driven as
broker/txn/coordinator.py drives it, and the `__transaction_state` log it writes to.

Theory of operation
-------------------
`TxnLog` is the one `__transaction_state` partition: durable records in Kafka's layouts (as the
core writes them; read back by the core's real load), a leader epoch (the coordinator epoch),
and the appends in flight. Its leader is the coordinator. `move(to)` is a leader election: the
epoch goes up at once, so an append of the old leader still in flight fails (but, as an acks=all
append that reached the new leader before the election does, sometimes survives: it is in the
log the new leader loads, and its writer is answered an error all the same); the old leader
hears of it one LeaderAndIsr later (queued while it is paused: a zombie coordinator acts on its
stale state until then); the new leader is told at once (LOADING) and loads the log after a gap.

`Coordinator` is one broker life's driver of the real core (core.py; core_driver.py does what
both simulations' drivers do alike), as coordinator.py is in the broker: requests become the
core's events under a token and are answered by its `Resolve`; an `Append` goes to the log (a
delay, then `appended`); a `Load` replays the log; `WriteMarkers` is sent by txn_markers.py's
`MarkerSender`, its outcome given back (`markers_done`, `markers_given_up`); `CoordinatorAbort`
tells the checkers which producer epoch is fenced; the core is ticked at its
`next_deadline_ms()`. Every decision (what to write, when to answer, the
second phase and its retries, timeouts, completing what a load finds in Prepare*) is the real
code's; the timings are scaled down (TICK_MS, RETRY_*).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from epochlog.broker.coordinator_shards import Append, Load
from epochlog.broker.txn import log_records
from epochlog.broker.txn.core import CoordinatorAbort, TxnCore, WriteMarkers
from epochlog.broker.txn.state import PREPARED
from epochlog.protocol.error_codes import ErrorCode as E

from .core_driver import CoreDriver
from .txn_markers import MarkerSender

if TYPE_CHECKING:
    from .scheduler import Scheduler
    from .txn_broker import TxnBroker
    from .txn_checkers import TxnCheckers

APPEND_MS_MIN, APPEND_MS_MAX = 1, 8
LOAD_MS_MIN, LOAD_MS_MAX = 10, 80
NOTICE_MS_MIN, NOTICE_MS_MAX = 1, 20  # the LeaderAndIsr telling the old leader
TICK_MS = 100  # core.py's TICK_MS (1 s), scaled down
RETRY_FIRST_MS, RETRY_MAX_MS = 20, 200  # core.py's 50 ms and 1 s
TIMEOUT_MAX_MS = 60_000
EXPIRATION_MS = 7 * 24 * 3600 * 1000  # transactional.id.expiration.ms: no id expires here
INDEX = 0  # the one `__transaction_state` partition
SURVIVES = 0.5  # the chance that an append in flight at an election is in the new log
PRODUCER_ID_FIRST = 1000


@dataclass
class _Append:
    records: list[tuple[bytes, bytes | None]]
    epoch: int
    done: Callable[[int], None]


class TxnLog:
    """The `__transaction_state` partition: its records, leader and epoch."""

    def __init__(self, sim: Scheduler, checkers: TxnCheckers) -> None:
        self.sim = sim
        self.checkers = checkers
        self.records: list[tuple[bytes, bytes | None]] = []
        self.epoch = 0
        self.leader: int | None = None
        self.brokers: dict[int, TxnBroker] = {}
        self.moves = 0
        self.survived = 0
        self.on_phase: Callable[[str, int], None] = lambda phase, broker: None
        self._inflight: dict[int, _Append] = {}
        self._next_append = 0
        self._next_producer_id = PRODUCER_ID_FIRST

    def new_producer_id(self) -> int:
        self._next_producer_id += 1  # producer_ids.py: never repeats across brokers
        return self._next_producer_id

    # ------------------------------------------------------------------------ appends
    def append(self, records: list[tuple[bytes, bytes | None]], epoch: int,
               done: Callable[[int], None]) -> None:
        """Append records as the leader of `epoch`; done(error) when they are replicated or
        failed (in the simulation's time; the caller gets it when it runs)."""
        self._next_append += 1
        self._inflight[self._next_append] = _Append(records, epoch, done)
        self.sim.after(self.sim.rng.randint(APPEND_MS_MIN, APPEND_MS_MAX), self._replicated,
                       self._next_append)

    def _replicated(self, append_id: int) -> None:
        a = self._inflight.pop(append_id, None)
        if a is None:  # an election came first: whether it survived or not, it failed
            return
        if a.epoch != self.epoch:
            a.done(E.NOT_LEADER_OR_FOLLOWER)
            return
        self._durable(a.records)
        a.done(0)

    def _durable(self, records: list[tuple[bytes, bytes | None]]) -> None:
        for key, value in records:
            self.records.append((key, value))
            tid, entry = log_records.parse(key, value, len(self.records) - 1)
            if entry is None:
                continue
            self.sim.log(f"txn log: {tid} {entry.status.kafka_name} producer "
                         f"{entry.producer_id} epoch {entry.producer_epoch} "
                         f"{sorted(entry.partitions)}")
            self.checkers.logged(tid, entry)
            if entry.status in PREPARED and self.leader is not None:
                self.on_phase("prepared", self.leader)

    # ------------------------------------------------------------------------ elections
    def move(self, to: int) -> None:
        """A new leader (and coordinator): `to` loads the log after a gap."""
        old, self.leader = self.leader, None
        inflight, self._inflight = list(self._inflight.values()), {}
        for a in inflight:
            # only the leader of the moment replicates: a stale leader's append is lost
            if a.epoch == self.epoch and self.sim.rng.random() < SURVIVES:
                self.survived += 1
                self._durable(a.records)
            a.done(E.NOT_LEADER_OR_FOLLOWER)
        self.epoch += 1
        self.moves += 1
        self.sim.log(f"txn log: leader {old} -> {to} (epoch {self.epoch})")
        if old is not None and old != to:
            broker = self.brokers[old]
            self.sim.after(self.sim.rng.randint(NOTICE_MS_MIN, NOTICE_MS_MAX), broker.execute,
                           broker.life, broker.not_leader, self.epoch)
        new = self.brokers[to]
        if new.coordinator is not None:
            new.coordinator.lead(self.epoch)

    def lost(self, broker_id: int) -> None:
        """The leader's process died: no leader until the next election."""
        if self.leader == broker_id:
            self.leader = None


class Coordinator(CoreDriver):
    """The real transaction coordinator core on one broker, for one process life."""

    def __init__(self, broker: TxnBroker) -> None:
        super().__init__(broker)
        self.broker = broker
        self.log = broker.txn_log
        self.core = TxnCore(self.log.new_producer_id, partition_of=lambda tid: INDEX,
                            timeout_max_ms=TIMEOUT_MAX_MS, expiration_ms=EXPIRATION_MS,
                            expiration_check_ms=EXPIRATION_MS, check_ms=TICK_MS,
                            retry_first_ms=RETRY_FIRST_MS, retry_max_ms=RETRY_MAX_MS)

    @property
    def checkers(self) -> TxnCheckers:
        return self.log.checkers

    @property
    def loading(self) -> bool:
        shard = self.core.shards.get(INDEX)
        return shard is not None and shard.loading

    def leads(self, leader_epoch: int) -> bool:
        """Whether this life still holds the shard of leader_epoch (the markers' still_leading)."""
        shard = self.core.shards.get(INDEX)
        return (self.broker.coordinator is self and shard is not None
                and shard.leader_epoch == leader_epoch)

    # ------------------------------------------------------------------------ the core's
    def next_deadline_ms(self) -> int | None:
        return self.core.next_deadline_ms()

    def tick(self) -> list[Any]:
        return self.core.tick(self.now())

    def perform(self, action: Any) -> None:
        if isinstance(action, Append):
            self._append(action)
        elif isinstance(action, WriteMarkers):
            self._write_markers(action)
        elif isinstance(action, CoordinatorAbort):
            self.checkers.aborted_by_coordinator(action.producer_id, action.producer_epoch,
                                                 action.why)
        else:
            assert isinstance(action, Load), action
            took_ms = self.node.sim.rng.randint(LOAD_MS_MIN, LOAD_MS_MAX)
            self.node.timer(took_ms, self._load, action, took_ms)

    # ------------------------------------------------------------------------ partition states
    def lead(self, epoch: int) -> None:
        """We lead `__transaction_state` at epoch: LOADING, the log read after a gap."""
        self.run(self.core.partition_applied(INDEX, epoch))

    def not_leader(self, epoch: int) -> None:
        """A LeaderAndIsr of `epoch` names another leader of `__transaction_state`."""
        shard = self.core.shards.get(INDEX)
        if shard is not None and shard.leader_epoch < epoch:
            self.run(self.core.partition_applied(INDEX, None))

    def _load(self, load: Load, took_ms: int) -> None:
        for offset, (key, value) in enumerate(self.log.records):
            self.core.replay(INDEX, load.leader_epoch, offset, key, value)
        actions = self.core.loaded(self.now(), INDEX, load.leader_epoch, 0, len(self.log.records),
                                   took_ms)
        if self.leads(load.leader_epoch) and load.leader_epoch == self.log.epoch:
            self.log.leader = self.broker.node_id
        self.run(actions)

    # ------------------------------------------------------------------------ the log
    def _append(self, a: Append) -> None:
        life = self.broker.life

        def replicated(error: int) -> None:
            self.broker.execute(life, self._appended, a, a.errors.get(error, error))

        self.log.append(list(a.records), a.leader_epoch, replicated)

    def _appended(self, a: Append, error: int) -> None:
        self.run(self.core.appended(self.now(), a.append_id, error, 0))

    # ------------------------------------------------------------------ the second phase
    def _write_markers(self, w: WriteMarkers) -> None:
        b = self.broker
        if b.broken == "complete_without_markers":
            self.run(self.core.markers_done(self.now(), w))
            return
        MarkerSender(b, b.network, len(self.log.brokers), w,
                     lambda: self.leads(w.leader_epoch),
                     lambda outcome, fenced: self._markers_sent(w, outcome, fenced)).start()

    def _markers_sent(self, w: WriteMarkers, outcome: str, fenced: str | None) -> None:
        if outcome == "written":
            self.log.on_phase("markers_written", self.broker.node_id)
            self.run(self.core.markers_done(self.now(), w))
            return
        self.checkers.count(f"markers_{outcome}")
        self.run(self.core.markers_given_up(w, fenced))
