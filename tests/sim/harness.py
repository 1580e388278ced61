"""One simulated run: `run_seed(seed)` builds a cluster from the seed, injects faults, heals,
waits, checks, and returns a `Result` (violations, figures, and the replay command).

Timeline of a run (simulated ms): the controller and the brokers start at 0; the topic is created
(replication factor 3, min.insync.replicas 2, unclean election off) once every broker has
registered; producers start; faults are injected until `chaos_ms`; then every fault is healed
and the cluster has `quiet_ms` to converge; then the final checks run.

Everything that varies comes from the seed: the cluster's size (3 brokers, sometimes 4-5), the
partition count (1-3), message delays and losses, the fault schedule. Timeouts are scaled down
(a 1.2 s session instead of 9 s; the 500 ms connection-loss grace is not, since it covers a
reconnect) so that one run covers many leader changes in a few thousand events. The real code's
log lines are silenced unless `verbose`, where they are interleaved with the simulation's own
trace, each stamped with simulated time.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any

from .broker_node import BrokerNode
from .checkers import Checkers
from .controller_node import ControllerNode
from .faults import FaultInjector
from .network import Network
from .producer import SimProducer
from .result import SimResult
from .scheduler import Scheduler

TOPIC = "sim"
TOPIC_CONFIGS = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false"}
BROKEN_VARIANTS = ("no_truncation", "ack_on_append", "admit_unconfirmed")
TOPIC_CREATED_MS_MAX = 5000


@dataclass(frozen=True)
class Settings:
    brokers: int = 3
    partitions: int = 1
    producers: int = 2
    chaos_ms: int = 8000
    quiet_ms: int = 4500
    settle_ms: int = 3000  # liveness: an acknowledged write per partition after heal + this
    session_timeout_ms: int = 1200
    heartbeat_ms: int = 300
    request_timeout_ms: int = 600
    send_backoff_ms_max: int = 1000
    rebalance_check_ms: int = 2000  # the controller's leader_imbalance_check_interval
    controller_queue_max: int = 64
    lag_time_max_ms: int = 800
    isr_check_ms: int = 100
    isr_retry_ms: int = 300
    fetch_max_wait_ms: int = 150
    fetch_backoff_ms: int = 50
    produce_timeout_ms: int = 1000
    retry_backoff_ms: int = 50
    fault_gap_ms_min: int = 100
    fault_gap_ms_max: int = 700
    segment_bytes: int = 4096
    flush_ms: int = 1000
    torn_writes: bool = True
    codec_every: int = 20
    broken: str = ""  # one of BROKEN_VARIANTS: a deliberately wrong harness, to test the checkers
    # The broker's controller_request_timeout_ms: its requests to the controller, and how long a
    # control request waits for a registration answer. Real default 10 s, equal to the
    # controller's request timeout; scaled the same way here.
    controller_request_timeout_ms: int = 600
    # The controller's broker_connection_loss_grace_ms: not scaled (it covers a reconnect,
    # and the simulated network has real-scale delays).
    connection_loss_grace_ms: int = 500


def settings_for(seed: int, **overrides: object) -> Settings:
    """The settings a seed runs with: its cluster shape from its own Random, then overrides."""
    import random
    shape = random.Random(seed ^ 0x5EED)
    base = Settings(brokers=shape.choice([3, 3, 3, 4, 5]), partitions=shape.randint(1, 3))
    return dataclasses.replace(base, **overrides)  # type: ignore[arg-type]


class Result(SimResult[Settings]):
    def shape(self) -> str:
        return f"{self.settings.brokers} brokers, {self.settings.partitions} partitions"

    def replay_command(self) -> str:
        flags = "".join(f" --{f.name.replace('_', '-')}={getattr(self.settings, f.name)}"
                        for f in dataclasses.fields(Settings)
                        if getattr(self.settings, f.name) !=
                        getattr(settings_for(self.seed), f.name))
        return f"python -m tests.sim {self.seed}{flags} --verbose"


class _SimTimeFormatter(logging.Formatter):
    def __init__(self, sim: Scheduler) -> None:
        super().__init__()
        self.sim = sim

    def format(self, record: logging.LogRecord) -> str:
        return f"{self.sim.now_ms:>7}ms   [{record.name}] {record.getMessage()}"


class Simulation:
    def __init__(self, seed: int, settings: Settings, data_dir: str,
                 verbose: bool = False) -> None:
        self.seed = seed
        self.settings = settings
        self.sim = Scheduler(seed)
        self.trace: list[str] = []
        if verbose:
            self.sim.trace = self.trace.append
        self.net = Network(self.sim, codec_every=settings.codec_every)
        self.checkers = Checkers()
        self.checkers.clock = self.sim.clock
        topics = {TOPIC: dict(TOPIC_CONFIGS)}
        self.controller = ControllerNode(self.sim, self.net, settings)
        self.net.add(self.controller)
        self.brokers: dict[int, BrokerNode] = {}
        for bid in range(1, settings.brokers + 1):
            node = BrokerNode(self.sim, self.net, settings, bid,
                              os.path.join(data_dir, f"broker{bid}"), topics, self.checkers)
            self.brokers[bid] = node
            self.net.add(node)
        self.partitions = [(TOPIC, i) for i in range(settings.partitions)]
        self.producers = [SimProducer(self.sim, self.net, settings, 100 + i, self.partitions,
                                      list(self.brokers), self.checkers)
                          for i in range(settings.producers)]
        for p in self.producers:
            self.net.add(p)
        self.faults = FaultInjector(self.sim, self.net, settings, self.controller,
                                    list(self.brokers.values()))
        self.topic_created_ms = -1

    def run(self) -> None:
        s = self.settings
        sim = self.sim
        self.controller.boot()
        for node in self.brokers.values():
            sim.after(sim.rng.randint(0, 50), node.boot)
        sim.after(100, self._create_topic)
        while self.topic_created_ms < 0:
            assert sim.now_ms < TOPIC_CREATED_MS_MAX, "the topic was never created"
            sim.run_until(sim.now_ms + 50)
        chaos_end = self.topic_created_ms + s.chaos_ms
        sim.run_until(chaos_end)
        self.faults.heal_all()
        end = chaos_end + s.quiet_ms
        sim.run_until(end)
        for p in self.producers:
            p.active = False
        self.checkers.final(self.controller, self.brokers, chaos_end + s.settle_ms)

    def _create_topic(self) -> None:
        state = self.controller.state
        ready = (self.controller.up and not self.controller.paused and state is not None
                 and sum(b.eligible for b in state.brokers.values()) >= self.settings.brokers)
        if not ready:
            self.sim.after(50, self._create_topic)
            return
        result = self.controller.admin(lambda st: st.create_topic(
            TOPIC, self.settings.partitions, 3, None, TOPIC_CONFIGS))
        assert result.error == 0, result
        self.topic_created_ms = self.sim.now_ms
        self.faults.plan(self.sim.now_ms + 200, self.sim.now_ms + self.settings.chaos_ms)
        self.sim.log(f"topic {TOPIC} created: {self.settings.partitions} partitions")
        for p in self.producers:
            p.boot()

    def figures(self) -> dict[str, Any]:
        return {"events": self.sim.events, "sim_ms": self.sim.now_ms,
                "acked": sum(p.acked for p in self.producers),
                "produced": sum(p.sent for p in self.producers),
                "faults": sum(self.faults.injected.values()),
                "leader_epochs": len(self.checkers.leaders),
                "truncations": sum(b.follower_stats.truncations for b in self.brokers.values()),
                "connection_losses": self.controller.connection_losses,
                "elr_elections": self.controller.counters()["elections_from_elr"],
                "unclean_restarts": self.controller.counters()["unclean_restarts"],
                "held": sum(b.held_total for b in self.brokers.values()),
                "messages": self.net.sent, "lost": self.net.lost,
                "codec_checked": self.net.codec_checked}


def _scratch_root() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run_seed(seed: int, settings: Settings | None = None, verbose: bool = False) -> Result:
    """Run one seed; never raises for what the simulated code does (that is in the Result)."""
    settings = settings or settings_for(seed)
    result = Result(seed, settings)
    data_dir = tempfile.mkdtemp(prefix=f"epochlog-sim-{seed}-", dir=_scratch_root())
    logger = logging.getLogger("epochlog")
    old_level, old_propagate = logger.level, logger.propagate
    handler = None
    started = time.perf_counter()
    sim = None
    try:
        sim = Simulation(seed, settings, data_dir, verbose)
        if verbose:
            handler = logging.StreamHandler(_TraceStream(sim.trace))
            handler.setFormatter(_SimTimeFormatter(sim.sim))
            logger.addHandler(handler)
            logger.setLevel(logging.INFO)
            logger.propagate = False
        else:
            logger.setLevel(logging.CRITICAL + 1)
        sim.run()
        result.violations = list(sim.checkers.violations)
        result.liveness = list(sim.checkers.liveness)
    except Exception:
        result.error = traceback.format_exc(limit=12)
        if sim is not None:
            result.violations = list(sim.checkers.violations)
    finally:
        logger.setLevel(old_level)
        logger.propagate = old_propagate
        if handler is not None:
            logger.removeHandler(handler)
        if sim is not None:
            result.figures = sim.figures()
            result.trace = sim.trace
            for b in sim.brokers.values():
                if b.replicas is not None:
                    for each in b.replicas.logs.logs.values():
                        each.close()
        result.figures["wall_s"] = round(time.perf_counter() - started, 3)
        shutil.rmtree(data_dir, ignore_errors=True)
    return result


class _TraceStream:
    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def write(self, text: str) -> None:
        text = text.rstrip("\n")
        if text:
            self.lines.append(text)

    def flush(self) -> None:
        pass
