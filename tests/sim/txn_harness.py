"""One simulated run of transactions: `run_txn_seed(seed)` builds brokers, the transaction log and
transactional producers from the seed, injects faults, heals, waits, checks, and returns a
`TxnResult`.

Timeline (simulated ms): brokers start at 0 and broker 1 is elected leader of
`__transaction_state`; producers start and run transactions; faults until `chaos_ms`; then every
fault is healed (brokers and producers restart, pauses end, the network heals), producers finish
their transaction and begin no other (`draining`), and `quiet_ms` pass; then the final checks
(txn_checkers.py). A read_committed view of every partition is checked every VIEW_EVERY_MS.

Everything that varies comes from the seed: 2-4 data partitions on 3 brokers, 3-5 producers over
2-3 transactional ids (so that producers of one id fence one another), delays and losses, and
the fault schedule. Timeouts are scaled down (a 500 ms transaction timeout, 200 ms requests).

Faults (weights in KINDS): crash a producer (restarted later: a re-init) or pause it (a zombie
when it resumes fenced); make one dawdle past its transaction timeout; move the coordinator
(a leader election of `__transaction_state`); crash the coordinator's broker, at a random time or
right after a Prepare* is written or right after a transaction's markers are all written
(`crash_mid_commit`); pause it past the controller's session (a zombie coordinator: another
broker is elected and loads the log); crash or pause any broker (its data partitions go away);
make links lossy. A controller loop elects a new leader when there is none.

Logs are of 1 KiB, 4 KiB or 1 MiB segments; in half the seeds the last producer epoch
(state.EPOCH_MAX, 32766) is lowered to 2 or 4, so that ids roll over to new producer ids.

Broken variants (`broken`), to show the checkers fail: `complete_without_markers` (the
coordinator writes Complete* without sending markers), `no_marker_check` (partitions skip
storage's marker epoch checks).

Replay: `python -m tests.sim --txn SEED --verbose`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import shutil
import tempfile
import traceback
from dataclasses import dataclass, field
from typing import Any

from epochlog.broker.txn import state

from .network import Network
from .scheduler import Scheduler
from .txn_broker import TxnBroker
from .txn_checkers import TxnCheckers
from .txn_coordinator import TxnLog
from .txn_partitions import leader_of
from .txn_producer import ProducerNode

TOPIC = "orders"
BROKEN_VARIANTS = ("complete_without_markers", "no_marker_check")
KINDS = {"crash_producer": 3, "pause_producer": 3, "dawdle": 2, "move_coordinator": 2,
         "crash_coordinator": 2, "crash_mid_commit": 3, "pause_coordinator": 2,
         "crash_broker": 1, "pause_broker": 1, "lossy": 1}
PRODUCER_BASE_ID = 100
CONTROLLER_TICK_MS = 50
VIEW_EVERY_MS = 250


@dataclass(frozen=True)
class TxnSimSettings:
    brokers: int = 3
    partitions: int = 3
    producers: int = 4
    transactional_ids: int = 2
    chaos_ms: int = 3000
    quiet_ms: int = 2500
    session_ms: int = 300  # the controller's: a paused coordinator is replaced after it
    txn_timeout_ms: int = 500
    request_timeout_ms: int = 200
    retry_backoff_ms: int = 20
    max_block_ms: int = 1500
    think_ms_max: int = 40
    fault_gap_ms_min: int = 60
    fault_gap_ms_max: int = 400
    codec_every: int = 20
    segment_bytes: int = 1 << 20  # small ones make logs of many segments to recover and read
    epoch_max: int = state.EPOCH_MAX  # lowered: ids roll over to new producer ids
    broken: str = ""  # one of BROKEN_VARIANTS


def txn_settings_for(seed: int, **overrides: Any) -> TxnSimSettings:
    shape = random.Random(seed ^ 0x7A11)
    base = TxnSimSettings(partitions=shape.randint(2, 4), producers=shape.randint(3, 5),
                          transactional_ids=shape.choice([2, 2, 3]),
                          segment_bytes=shape.choice([1024, 4096, 1 << 20]),
                          epoch_max=shape.choice([2, 4, state.EPOCH_MAX, state.EPOCH_MAX]))
    return dataclasses.replace(base, **overrides)


@dataclass
class TxnResult:
    seed: int
    settings: TxnSimSettings
    violations: list[str] = field(default_factory=list)
    liveness: list[str] = field(default_factory=list)
    error: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.violations and not self.liveness and self.error is None

    def describe(self) -> str:
        s = self.settings
        lines = [f"txn seed {self.seed}: {'ok' if self.ok else 'FAILED'} ({s.partitions} "
                 f"partitions, {s.producers} producers over {s.transactional_ids} ids) "
                 f"{self.figures}"]
        if self.error:
            lines.append(f"  exception: {self.error}")
        lines += [f"  violation: {v}" for v in self.violations[:10]]
        lines += [f"  liveness: {v}" for v in self.liveness[:10]]
        if not self.ok:
            broken = f" --broken={s.broken}" if s.broken else ""
            lines.append(f"  replay: python -m tests.sim --txn {self.seed}{broken} --verbose")
        return "\n".join(lines)


class TxnSimulation:
    def __init__(self, seed: int, settings: TxnSimSettings, data_dir: str,
                 verbose: bool = False) -> None:
        self.settings = s = settings
        self.sim = Scheduler(seed)
        self.trace: list[str] = []
        if verbose:
            self.sim.trace = self.trace.append
        self.rng = self.sim.rng
        self.network = Network(self.sim, codec_every=s.codec_every)
        self.checkers = TxnCheckers(self.sim.clock)
        self.txn_log = TxnLog(self.sim, self.checkers)
        self.txn_log.on_phase = self._phase
        self.tps = [(TOPIC, p) for p in range(s.partitions)]
        self.brokers: dict[int, TxnBroker] = {}
        for node_id in range(1, s.brokers + 1):
            led = [tp for tp in self.tps if leader_of(tp, s.brokers) == node_id]
            broker = TxnBroker(self.sim, node_id, self.network, self.txn_log, data_dir, led,
                               self.checkers, s.segment_bytes, s.broken)
            self.brokers[node_id] = self.txn_log.brokers[node_id] = broker
            self.network.add(broker)
        self.producers: list[ProducerNode] = []
        for i in range(s.producers):
            p = ProducerNode(self.sim, PRODUCER_BASE_ID + i, f"p{i}", self.network, self.checkers,
                             f"tx{i % s.transactional_ids}", self.tps, s.brokers,
                             txn_timeout_ms=s.txn_timeout_ms,
                             request_timeout_ms=s.request_timeout_ms,
                             retry_backoff_ms=s.retry_backoff_ms, max_block_ms=s.max_block_ms,
                             think_ms_max=s.think_ms_max)
            p.on_exit = self._exited
            self.producers.append(p)
            self.network.add(p)
        self.faults = 0
        self.armed = ""  # crash_mid_commit: the phase after which the coordinator dies

    # ------------------------------------------------------------------ the run
    def run(self) -> None:
        s = self.settings
        for broker in self.brokers.values():
            broker.boot()
        self.txn_log.move(1)
        for p in self.producers:
            p.boot()
        self.sim.after(CONTROLLER_TICK_MS, self._controller)
        self.sim.after(VIEW_EVERY_MS, self._views)
        self.sim.after(self._gap(), self._fault)
        self.sim.run_until(s.chaos_ms)
        self._heal()
        self.sim.run_until(s.chaos_ms + s.quiet_ms)
        self.checkers.final({tp: self.brokers[leader_of(tp, s.brokers)].store
                             for tp in self.tps})

    def _gap(self) -> int:
        return self.rng.randint(self.settings.fault_gap_ms_min, self.settings.fault_gap_ms_max)

    def _controller(self) -> None:
        """Elect a leader of `__transaction_state` when it has none (nor one loading)."""
        log = self.txn_log
        if log.leader is None and not any(b.up and b.loading for b in self.brokers.values()):
            up = [b.node_id for b in self.brokers.values() if b.up]
            if up:
                log.move(self.rng.choice(up))
        self.sim.after(CONTROLLER_TICK_MS, self._controller)

    def _views(self) -> None:
        for broker in self.brokers.values():
            if broker.up:
                for tp in broker.store.tps:
                    self.checkers.view(tp, broker.store.read_committed(tp))
        self.sim.after(VIEW_EVERY_MS, self._views)

    # ------------------------------------------------------------------ faults
    def _fault(self) -> None:
        if self.sim.now_ms >= self.settings.chaos_ms:
            return
        kinds = list(KINDS)
        kind = self.rng.choices(kinds, weights=[KINDS[k] for k in kinds])[0]
        if getattr(self, f"_{kind}")():
            self.faults += 1
            self.checkers.count(f"fault_{kind}")
        self.sim.after(self._gap(), self._fault)

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

    def _exited(self, p: ProducerNode) -> None:
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

    def _phase(self, phase: str, broker_id: int) -> None:
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

    def _heal(self) -> None:
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

    def figures(self) -> dict[str, Any]:
        c = self.checkers.counts
        keep = ("told_commit", "told_abort", "timed_out", "fenced", "zombie_batches",
                "markers", "refused_batch_INVALID_PRODUCER_EPOCH",
                "refused_marker_TRANSACTION_COORDINATOR_FENCED", "markers_fenced",
                "crash_after_prepared", "crash_after_markers_written",
                "producer_id_rollovers")
        return {"events": self.sim.events, "faults": self.faults, "moves": self.txn_log.moves,
                "survived": self.txn_log.survived, "lost": self.network.lost,
                **{k: c.get(k, 0) for k in keep}}


class _TraceStream:
    def __init__(self, trace: list[str]) -> None:
        self.trace = trace

    def write(self, text: str) -> None:
        if text.strip():
            self.trace.append(text.rstrip())

    def flush(self) -> None:
        pass


def _scratch_root() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run_txn_seed(seed: int, settings: TxnSimSettings | None = None,
                 verbose: bool = False) -> TxnResult:
    settings = settings or txn_settings_for(seed)
    result = TxnResult(seed, settings)
    data_dir = tempfile.mkdtemp(prefix=f"epochlog-txnsim-{seed}-", dir=_scratch_root())
    sim: TxnSimulation | None = None
    handler: logging.Handler | None = None
    epoch_max, state.EPOCH_MAX = state.EPOCH_MAX, settings.epoch_max  # read at every bump
    try:
        sim = TxnSimulation(seed, settings, data_dir, verbose)
        if verbose:
            handler = logging.StreamHandler(_TraceStream(sim.trace))
            logging.getLogger("epochlog").addHandler(handler)
        sim.run()
    except Exception:
        result.error = traceback.format_exc(limit=12)
    finally:
        state.EPOCH_MAX = epoch_max
        if handler is not None:
            logging.getLogger("epochlog").removeHandler(handler)
        if sim is not None:
            for broker in sim.brokers.values():
                broker.store.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    if sim is not None:
        result.violations = list(sim.checkers.violations)
        result.liveness = list(sim.checkers.liveness)
        result.figures = sim.figures()
        result.trace = sim.trace
    return result
