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

Faults: txn_faults.py. A controller loop elects a new leader of `__transaction_state` when there
is none.

Logs are of 1 KiB, 4 KiB or 1 MiB segments; in half the seeds the last producer epoch
(state.EPOCH_MAX, 32766) is lowered to 2 or 4, so that ids roll over to new producer ids.

Broken variants (`broken`), to show the checkers fail: `complete_without_markers` (the
coordinator writes Complete* without sending markers), `no_marker_check` (partitions skip
storage's marker epoch checks).

Replay: `python -m tests.sim --txn SEED --verbose`.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import tempfile
import traceback
from dataclasses import dataclass
from typing import Any

from epochlog.broker.txn import state

from .network import Network
from .result import SimResult
from .scheduler import Scheduler
from .trace import real_logs
from .txn_broker import TxnBroker
from .txn_checkers import TxnCheckers
from .txn_coordinator import TxnLog
from .txn_faults import TxnFaults
from .txn_partitions import leader_of
from .txn_producer import ProducerNode

TOPIC = "orders"
BROKEN_VARIANTS = ("complete_without_markers", "no_marker_check")
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


class TxnResult(SimResult[TxnSimSettings]):
    LIVENESS_FAILS = True

    def seed_name(self) -> str:
        return f"txn seed {self.seed}"

    def shape(self) -> str:
        s = self.settings
        return (f"{s.partitions} partitions, {s.producers} producers over "
                f"{s.transactional_ids} ids")

    def replay_command(self) -> str:
        broken = f" --broken={self.settings.broken}" if self.settings.broken else ""
        return f"python -m tests.sim --txn {self.seed}{broken} --verbose"


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
            self.producers.append(p)
            self.network.add(p)
        self.faults = TxnFaults(self)
        self.txn_log.on_phase = self.faults.phase
        for p in self.producers:
            p.on_exit = self.faults.exited

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
        self.faults.start()
        self.sim.run_until(s.chaos_ms)
        self.faults.heal()
        self.sim.run_until(s.chaos_ms + s.quiet_ms)
        self.checkers.final({tp: self.brokers[leader_of(tp, s.brokers)].store
                             for tp in self.tps})

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

    def figures(self) -> dict[str, Any]:
        c = self.checkers.counts
        keep = ("told_commit", "told_abort", "timed_out", "fenced", "zombie_batches",
                "markers", "refused_batch_INVALID_PRODUCER_EPOCH",
                "refused_marker_TRANSACTION_COORDINATOR_FENCED", "markers_fenced",
                "crash_after_prepared", "crash_after_markers_written",
                "producer_id_rollovers")
        return {"events": self.sim.events, "faults": self.faults.injected,
                "moves": self.txn_log.moves,
                "survived": self.txn_log.survived, "lost": self.network.lost,
                **{k: c.get(k, 0) for k in keep}}


def _scratch_root() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run_txn_seed(seed: int, settings: TxnSimSettings | None = None,
                 verbose: bool = False) -> TxnResult:
    settings = settings or txn_settings_for(seed)
    result = TxnResult(seed, settings)
    data_dir = tempfile.mkdtemp(prefix=f"epochlog-txnsim-{seed}-", dir=_scratch_root())
    sim: TxnSimulation | None = None
    epoch_max, state.EPOCH_MAX = state.EPOCH_MAX, settings.epoch_max  # read at every bump
    try:
        sim = TxnSimulation(seed, settings, data_dir, verbose)
        with real_logs(sim.sim, sim.trace, verbose):
            sim.run()
    except Exception:
        result.error = traceback.format_exc(limit=12)
    finally:
        state.EPOCH_MAX = epoch_max
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
