"""The simulated transaction coordinator: the real `TxnState` driven as
broker/txn/coordinator.py drives it, and the `__transaction_state` log it writes to.

Theory of operation
-------------------
`TxnLog` is the one `__transaction_state` partition: durable records in Kafka's layouts
(log_records.txn_key / txn_value, read back with log_records.parse), a leader epoch (the
coordinator epoch), and the appends in flight. Its leader is the coordinator. `move(to)` is a
leader election: the epoch goes up at once, so an append of the old leader still in flight fails
(but, as an acks=all append that reached the new leader before the election does, sometimes
survives: it is in the log the new leader loads, and its writer is answered an error all the
same); the old leader hears of it one LeaderAndIsr later (queued while it is paused: a zombie
coordinator acts on its stale state until then); the new leader loads the log after a gap.

`CoordinatorShard` is coordinator.py's `TxnShard` plus the code around it, on one broker:
LOADING (requests get COORDINATOR_LOAD_IN_PROGRESS) while the log replays into a fresh
`TxnState`, then every id left in Prepare* is completed. A request is the state machine's
`Answer`: an error at once, or a transition appended to the log (a delay), then `written()`
(or `write_failed()`) and the answer. Ending a transaction: Prepare* written, the markers sent
(txn_markers.py), then `markers_written()`'s Complete* written, retried while leading. A timer
aborts the transactions past their timeout (`timed_out`, `abort_timed_out`) every TICK_MS.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from epochlog.broker.txn import log_records
from epochlog.broker.txn.log_records import Status, TxnLogEntry
from epochlog.broker.txn.state import PREPARED, TxnState
from epochlog.protocol.error_codes import ErrorCode as E

from .txn_markers import MarkerSender

if TYPE_CHECKING:
    from .scheduler import Scheduler
    from .txn_broker import TxnBroker
    from .txn_checkers import TxnCheckers

APPEND_MS_MIN, APPEND_MS_MAX = 1, 8
LOAD_MS_MIN, LOAD_MS_MAX = 10, 80
NOTICE_MS_MIN, NOTICE_MS_MAX = 1, 20  # the LeaderAndIsr telling the old leader
TICK_MS = 100  # coordinator.py's TICK_MS (1 s), scaled down
RETRY_FIRST_MS, RETRY_MAX_MS = 20, 200
TIMEOUT_MAX_MS = 60_000
SURVIVES = 0.5  # the chance that an append in flight at an election is in the new log
PRODUCER_ID_FIRST = 1000


@dataclass
class _Append:
    tid: str
    entry: TxnLogEntry
    epoch: int
    done: Callable[[int], None]


class TxnLog:
    """The `__transaction_state` partition: its records, leader and epoch."""

    def __init__(self, sim: Scheduler, checkers: TxnCheckers) -> None:
        self.sim = sim
        self.checkers = checkers
        self.records: list[tuple[bytes, bytes]] = []
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
    def append(self, tid: str, entry: TxnLogEntry, epoch: int,
               done: Callable[[int], None]) -> None:
        """Append one record as the leader of `epoch`; done(error) when it is replicated or
        failed (in the simulation's time; the caller gets it when it runs)."""
        self._next_append += 1
        self._inflight[self._next_append] = _Append(tid, entry, epoch, done)
        self.sim.after(self.sim.rng.randint(APPEND_MS_MIN, APPEND_MS_MAX), self._replicated,
                       self._next_append)

    def _replicated(self, append_id: int) -> None:
        a = self._inflight.pop(append_id, None)
        if a is None:  # an election came first: whether it survived or not, it failed
            return
        if a.epoch != self.epoch:
            a.done(E.NOT_LEADER_OR_FOLLOWER)
            return
        self._durable(a.tid, a.entry)
        a.done(0)

    def _durable(self, tid: str, entry: TxnLogEntry) -> None:
        self.records.append((log_records.txn_key(tid), log_records.txn_value(entry)))
        self.sim.log(f"txn log: {tid} {entry.status.kafka_name} producer {entry.producer_id} "
                     f"epoch {entry.producer_epoch} {sorted(entry.partitions)}")
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
                self._durable(a.tid, a.entry)
            a.done(E.NOT_LEADER_OR_FOLLOWER)
        self.epoch += 1
        self.moves += 1
        self.sim.log(f"txn log: leader {old} -> {to} (epoch {self.epoch})")
        if old is not None and old != to:
            broker = self.brokers[old]
            self.sim.after(self.sim.rng.randint(NOTICE_MS_MIN, NOTICE_MS_MAX), broker.execute,
                           broker.life, broker.not_leader, self.epoch)
        new = self.brokers[to]
        new.loading_epoch = self.epoch
        self.sim.after(self.sim.rng.randint(LOAD_MS_MIN, LOAD_MS_MAX), new.execute, new.life,
                       new.lead, self.epoch)

    def lost(self, broker_id: int) -> None:
        """The leader's process died: no leader until the next election."""
        if self.leader == broker_id:
            self.leader = None


class CoordinatorShard:
    """Our leadership of `__transaction_state` at one epoch, and its ids."""

    def __init__(self, broker: TxnBroker, epoch: int) -> None:
        self.broker = broker
        self.log = broker.txn_log
        self.epoch = epoch
        self.state = TxnState(self.log.new_producer_id, TIMEOUT_MAX_MS)
        self.loading = True
        self._completing: set[str] = set()

    @property
    def checkers(self) -> TxnCheckers:
        return self.log.checkers

    def now(self) -> int:
        return self.broker.sim.now_ms

    def current(self) -> bool:
        return self.broker.shard is self

    def load(self) -> None:
        for offset, (key, value) in enumerate(self.log.records):
            tid, entry = log_records.parse(key, value, offset)
            self.state.load(tid, entry)
        self.loading = False
        self.broker.sim.log(f"{self.broker.name}: loaded {len(self.state.ids)} transactional "
                            f"ids at epoch {self.epoch}")
        for tid in self.state.unfinished():
            self.complete_soon(tid)
        self.broker.timer(TICK_MS, self._tick)

    # ------------------------------------------------------------------------ the log
    def _write(self, tid: str, entry: TxnLogEntry, then: Callable[[int], None]) -> None:
        life = self.broker.life

        def appended(error: int) -> None:
            self.broker.execute(life, self._written, tid, entry, error, then)

        self.log.append(tid, entry, self.epoch, appended)

    def _written(self, tid: str, entry: TxnLogEntry, error: int,
                 then: Callable[[int], None]) -> None:
        error = E.NOT_COORDINATOR if error == E.NOT_LEADER_OR_FOLLOWER else error
        if not self.current():
            then(error or E.NOT_COORDINATOR)  # unloaded meanwhile: the new leader reloads it
            return
        if error:
            self.state.write_failed(tid)
            then(error)
            return
        self.state.written(tid, entry)
        then(0)

    # ------------------------------------------------------------------------ requests
    def init_producer_id(self, tid: str, timeout_ms: int, expected: tuple[int, int] | None,
                         reply: Callable[[int, int, int], None]) -> None:
        answer = self.state.init_producer_id(tid, timeout_ms, self.now(), expected)
        write = answer.write
        if write is None:
            reply(answer.error, answer.producer_id, answer.producer_epoch)
            return

        def written(error: int) -> None:
            if error:
                reply(error, -1, -1)
                return
            if write.status in PREPARED:  # fenced an open transaction: abort it
                self.checkers.aborted_by_coordinator(write.producer_id,
                                                     write.producer_epoch - 1, "fenced")
                self.complete_soon(tid)
            elif not answer.error:
                self.checkers.handed_out(tid, answer.producer_id, answer.producer_epoch)
            reply(answer.error, answer.producer_id, answer.producer_epoch)

        self._write(tid, write, written)

    def add_partitions(self, tid: str, producer_id: int, producer_epoch: int,
                       partitions: list[tuple[str, int]], reply: Callable[[int], None]) -> None:
        answer = self.state.add_partitions(tid, producer_id, producer_epoch, partitions,
                                           self.now())
        if answer.write is None:
            reply(answer.error)
            return
        self._write(tid, answer.write, reply)

    def end_txn(self, tid: str, producer_id: int, producer_epoch: int, commit: bool,
                reply: Callable[[int], None]) -> None:
        answer = self.state.end_txn(tid, producer_id, producer_epoch, commit, self.now())
        if answer.write is None:
            reply(answer.error)
            return

        def written(error: int) -> None:
            if not error:
                self.complete_soon(tid)
            reply(error or answer.error)

        self._write(tid, answer.write, written)

    # ------------------------------------------------------------------ the second phase
    def complete_soon(self, tid: str) -> None:
        if tid in self._completing:
            return
        m = self.state.ids.get(tid)
        if m is None or m.status not in PREPARED:
            return
        self._completing.add(tid)
        entry = m.entry
        b = self.broker
        if b.broken == "complete_without_markers":
            self._finish(tid, RETRY_FIRST_MS)
            return
        MarkerSender(b, b.network, len(self.log.brokers), entry.producer_id,
                     entry.producer_epoch, entry.status is Status.PREPARE_COMMIT, self.epoch,
                     entry.partitions, self.current,
                     lambda outcome: self._markers_sent(tid, outcome)).start()

    def _markers_sent(self, tid: str, outcome: str) -> None:
        if outcome != "written":
            self.checkers.count(f"markers_{outcome}")
            self._completing.discard(tid)
            return
        self.log.on_phase("markers_written", self.broker.node_id)
        self._finish(tid, RETRY_FIRST_MS)

    def _finish(self, tid: str, delay_ms: int) -> None:
        if not self.current():
            self._completing.discard(tid)
            return
        answer = self.state.markers_written(tid, self.now())
        if answer.write is None:
            self._completing.discard(tid)
            return

        def written(error: int) -> None:
            if not error:
                self._completing.discard(tid)
            else:
                self.broker.timer(delay_ms, self._finish, tid, min(delay_ms * 2, RETRY_MAX_MS))

        self._write(tid, answer.write, written)

    # ------------------------------------------------------------------------ timeouts
    def _tick(self) -> None:
        if not self.current():
            return
        now = self.now()
        for tid in self.state.timed_out(now):
            answer = self.state.abort_timed_out(tid, now)
            if answer.write is not None:
                self._abort(tid, answer.write)
        self.broker.timer(TICK_MS, self._tick)

    def _abort(self, tid: str, entry: TxnLogEntry) -> None:
        def written(error: int) -> None:
            if not error:
                self.checkers.aborted_by_coordinator(entry.producer_id,
                                                     entry.producer_epoch - 1, "timed out")
                self.complete_soon(tid)

        self._write(tid, entry, written)
