"""The fault schedule of the transaction simulation (txn_harness.py), drawn from its seed.

Every few hundred ms (fault_gap_ms_min..max) until the chaos ends, one fault of KINDS (by
weight): crash a producer (restarted later: a re-init) or pause it (a zombie when it resumes
fenced); make one dawdle past its transaction timeout; move the coordinator (a leader election of
`__transaction_state`); crash the coordinator's broker, at once or, armed by `crash_mid_commit`,
right after the next Prepare* is written or right after the next transaction's markers are all
written (`phase`), before its Complete*; pause it past the controller's session (a zombie
coordinator: another broker is elected); crash or pause any broker (its data partitions go away
or queue); make links lossy. A producer that exits (fenced, gave up) is started again by its
supervisor (`exited`). `heal` ends every fault.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .txn_broker import TxnBroker
    from .txn_harness import TxnSimulation
    from .txn_producer import ProducerNode

KINDS = {"crash_producer": 3, "pause_producer": 3, "dawdle": 2, "move_coordinator": 2,
         "crash_coordinator": 2, "crash_mid_commit": 3, "pause_coordinator": 2,
         "crash_broker": 1, "pause_broker": 1, "lossy": 1}


class TxnFaults:
    def __init__(self, world: TxnSimulation) -> None:
        self.sim = world.sim
        self.rng = world.rng
        self.settings = world.settings
        self.network = world.network
        self.checkers = world.checkers
        self.txn_log = world.txn_log
        self.brokers = world.brokers
        self.producers = world.producers
        self.injected = 0
        self.armed = ""  # crash_mid_commit: the phase after which the coordinator dies

    def start(self) -> None:
        self.sim.after(self._gap(), self.fault)

    def _gap(self) -> int:
        return self.rng.randint(self.settings.fault_gap_ms_min, self.settings.fault_gap_ms_max)

    def fault(self) -> None:
        if self.sim.now_ms >= self.settings.chaos_ms:
            return
        kinds = list(KINDS)
        kind = self.rng.choices(kinds, weights=[KINDS[k] for k in kinds])[0]
        if getattr(self, f"_{kind}")():
            self.injected += 1
            self.checkers.count(f"fault_{kind}")
        self.sim.after(self._gap(), self.fault)

    def _live_producer(self) -> ProducerNode | None:
        live = [p for p in self.producers if p.up and not p.paused]
        return self.rng.choice(live) if live else None

    def _crash_producer(self) -> bool:
        p = self._live_producer()
        if p is None:
            return False
        p.crash()
        self._restart_later(p, self.rng.randint(50, 800))
        return True

    def exited(self, p: ProducerNode) -> None:
        """A producer process exited (fenced, gave up): its supervisor starts it again."""
        self._restart_later(p, self.rng.randint(50, 600))

    def _restart_later(self, p: ProducerNode, delay_ms: int) -> None:
        at = min(self.sim.now_ms + delay_ms, max(self.sim.now_ms, self.settings.chaos_ms))
        self.sim.at(at, self._restart, p)

    def _restart(self, p: ProducerNode) -> None:
        if not p.up:
            p.boot()

    def _pause_producer(self) -> bool:
        p = self._live_producer()
        if p is None:
            return False
        p.pause(self.rng.randint(50, 1200))
        return True

    def _dawdle(self) -> bool:
        p = self._live_producer()
        if p is None:
            return False
        p.dawdle_ms = self.settings.txn_timeout_ms + self.rng.randint(-200, 600)
        return True

    def _coordinator(self) -> TxnBroker | None:
        leader = self.txn_log.leader
        return None if leader is None else self.brokers[leader]

    def _move_coordinator(self) -> bool:
        current = self._coordinator()
        others = [b for b in self.brokers.values() if b.up and b is not current]
        if current is None or not others:
            return False
        self.txn_log.move(self.rng.choice(others).node_id)
        return True

    def _crash_coordinator(self) -> bool:
        current = self._coordinator()
        if current is None:
            return False
        self._crash_broker_now(current)
        return True

    def _crash_mid_commit(self) -> bool:
        self.armed = self.rng.choice(["prepared", "markers_written"])
        return True

    def phase(self, phase: str, broker_id: int) -> None:
        if phase == self.armed and self.sim.now_ms < self.settings.chaos_ms:
            self.armed = ""
            self.checkers.count(f"crash_after_{phase}")
            self.sim.log(f"fault: the coordinator dies after {phase}")
            self.sim.after(self.rng.randint(0, 2), self._crash_broker_now,
                           self.brokers[broker_id])

    def _crash_broker_now(self, broker: TxnBroker) -> None:
        if not broker.up:
            return
        broker.crash()
        self.sim.after(self.rng.randint(100, 800), self._restart_broker, broker)

    def _restart_broker(self, broker: TxnBroker) -> None:
        if not broker.up:
            broker.boot()

    def _pause_coordinator(self) -> bool:
        current = self._coordinator()
        if current is None or current.paused:
            return False
        current.pause(self.rng.randint(100, 1200))
        self.sim.after(self.settings.session_ms, self._replace_if_paused, current)
        return True

    def _replace_if_paused(self, broker: TxnBroker) -> None:
        """The controller's session of a paused broker ran out: elect another leader."""
        others = [b for b in self.brokers.values() if b.up and not b.paused]
        if broker.paused and self.txn_log.leader == broker.node_id and others:
            self.txn_log.move(self.rng.choice(others).node_id)

    def _crash_broker(self) -> bool:
        up = [b for b in self.brokers.values() if b.up]
        if not up:
            return False
        self._crash_broker_now(self.rng.choice(up))
        return True

    def _pause_broker(self) -> bool:
        up = [b for b in self.brokers.values() if b.up and not b.paused]
        if not up:
            return False
        broker = self.rng.choice(up)
        broker.pause(self.rng.randint(50, 600))
        self.sim.after(self.settings.session_ms, self._replace_if_paused, broker)
        return True

    def _lossy(self) -> bool:
        self.network.loss = self.rng.uniform(0.02, 0.15)
        self.sim.after(self.rng.randint(100, 600), self._calm)
        return True

    def _calm(self) -> None:
        self.network.loss = 0.0

    def heal(self) -> None:
        self.sim.log("HEAL")
        self.armed = ""
        self.network.heal()
        for broker in self.brokers.values():
            if not broker.up:
                broker.boot()
            broker.resume_now()
        for p in self.producers:
            p.draining = True
            p.dawdle_ms = 0
            if not p.up:
                p.boot()
            p.resume_now()
