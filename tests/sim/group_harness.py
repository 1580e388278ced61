"""One simulated run of a consumer group: `run_group_seed(seed)` builds the group from the seed,
injects faults, heals, waits, checks, and returns a `GroupResult`.

Timeline (simulated ms): brokers and members start at 0, the group's first coordinator loads;
faults are injected until `chaos_ms`; then every fault is healed (crashed members and brokers
restart, paused ones resume, stalls end, the network heals, the group gets a coordinator) and
the group has `quiet_ms` to settle; then the final checks run (group_checkers.py).

Everything that varies comes from the seed: 2-4 members, 1-6 partitions, the assignor (eager
range or roundrobin, or cooperative-sticky), static members or not, each member's poll interval,
message delays and losses, and the fault schedule. Timeouts are scaled down (a 600 ms session,
a 1.5 s max.poll.interval.ms) so that a few seconds cover many rebalances.

Faults (weights in KINDS): crash a member and restart it later (a static one keeps its instance
id); pause one (SIGSTOP), sometimes past its session; stall its application past
max.poll.interval.ms or not; close it gracefully and start it again; move the coordinator; crash
the coordinating broker (the group moves to another after a gap); make links lossy.

Replay: `python -m tests.sim --group SEED --verbose`.
"""

from __future__ import annotations

import dataclasses
import random
import traceback
from dataclasses import dataclass
from typing import Any

from epochlog.broker.groups.state import GroupSettings
from epochlog.client.group_member import MemberSettings

from .group_checkers import GroupCheckers
from .group_coordinator import GroupBroker, GroupCluster
from .group_member_node import MemberNode
from .network import Network
from .result import SimResult
from .scheduler import Scheduler
from .trace import real_logs

TOPIC = "orders"
GROUP = "sim-group"
STRATEGIES = (("range",), ("roundrobin",), ("cooperative-sticky",),
              ("cooperative-sticky", "range"))
BROKEN_VARIANTS = ("keep_revoked", "stale_commit")
KINDS = {"crash_member": 3, "pause_member": 3, "stall_member": 2, "close_member": 1,
         "move_coordinator": 2, "crash_coordinator": 2, "lossy": 1}
MEMBER_BASE_ID = 100


@dataclass(frozen=True)
class GroupSimSettings:
    members: int = 3
    partitions: int = 4
    brokers: int = 3
    strategy: int = 0  # index in STRATEGIES
    static: bool = False
    chaos_ms: int = 4000
    quiet_ms: int = 3500
    settle_ms: int = 1200  # liveness: every partition consumed in the last this many ms
    session_timeout_ms: int = 600
    heartbeat_interval_ms: int = 100
    max_poll_interval_ms: int = 1500
    request_timeout_ms: int = 500
    retry_backoff_ms: int = 50
    auto_commit_interval_ms: int = 150
    initial_rebalance_delay_ms: int = 100
    fault_gap_ms_min: int = 80
    fault_gap_ms_max: int = 500
    codec_every: int = 50
    broken: str = ""  # one of BROKEN_VARIANTS: a deliberately wrong member, to test checkers


def group_settings_for(seed: int, **overrides: Any) -> GroupSimSettings:
    shape = random.Random(seed ^ 0x6A0B)
    base = GroupSimSettings(members=shape.choice([2, 3, 3, 4]), partitions=shape.randint(1, 6),
                            strategy=shape.randrange(len(STRATEGIES)),
                            static=shape.random() < 0.3)
    return dataclasses.replace(base, **overrides)


class GroupResult(SimResult[GroupSimSettings]):
    def seed_name(self) -> str:
        return f"group seed {self.seed}"

    def shape(self) -> str:
        s = self.settings
        return (f"{s.members} members, {s.partitions} partitions, "
                f"{'+'.join(STRATEGIES[s.strategy])}{', static' if s.static else ''}")

    def replay_command(self) -> str:
        broken = f" --broken={self.settings.broken}" if self.settings.broken else ""
        return f"python -m tests.sim --group {self.seed}{broken} --verbose"


class GroupSimulation:
    def __init__(self, seed: int, settings: GroupSimSettings, verbose: bool = False) -> None:
        self.settings = s = settings
        self.sim = Scheduler(seed)
        self.trace: list[str] = []
        if verbose:
            self.sim.trace = self.trace.append
        self.rng = self.sim.rng
        self.network = Network(self.sim, codec_every=s.codec_every)
        self.checkers = GroupCheckers()
        self.checkers.clock = self.sim.clock
        self.cluster = GroupCluster(self.sim, GROUP, GroupSettings(
            min_session_timeout_ms=100,
            initial_rebalance_delay_ms=s.initial_rebalance_delay_ms), self.checkers)
        broker_ids = list(range(1, s.brokers + 1))
        for node_id in broker_ids:
            broker = GroupBroker(self.sim, node_id, self.cluster)
            self.cluster.brokers[node_id] = broker
            self.network.add(broker)
        strategy = STRATEGIES[s.strategy]
        self.members: list[MemberNode] = []
        for i in range(s.members):
            member_settings = MemberSettings(
                group_id=GROUP, group_instance_id=f"instance-{i}" if s.static else None,
                session_timeout_ms=s.session_timeout_ms,
                heartbeat_interval_ms=s.heartbeat_interval_ms,
                max_poll_interval_ms=s.max_poll_interval_ms,
                partition_assignment_strategy=strategy,
                auto_commit_interval_ms=s.auto_commit_interval_ms,
                request_timeout_ms=s.request_timeout_ms, retry_backoff_ms=s.retry_backoff_ms,
                metadata_max_age_ms=2000, join_timeout_extra_ms=500)
            member = MemberNode(self.sim, MEMBER_BASE_ID + i, f"m{i}", self.network,
                                member_settings, TOPIC, s.partitions, broker_ids, self.checkers,
                                poll_ms=self.rng.randint(15, 60), broken=s.broken)
            member.on_exit = self._exited
            self.members.append(member)
            self.network.add(member)
        self.checkers.members = self.members
        self.faults = 0

    # ------------------------------------------------------------------ the run
    def run(self) -> None:
        s = self.settings
        for broker in self.cluster.brokers.values():
            broker.boot()
        self.cluster.move(1)
        for member in self.members:
            member.boot()
        self.sim.after(self._gap(), self._fault)
        self.sim.run_until(s.chaos_ms)
        self._heal()
        self.sim.run_until(s.chaos_ms + s.quiet_ms)
        self.checkers.final(TOPIC, s.partitions, s.chaos_ms + s.quiet_ms - s.settle_ms)

    def _gap(self) -> int:
        return self.rng.randint(self.settings.fault_gap_ms_min, self.settings.fault_gap_ms_max)

    def _fault(self) -> None:
        if self.sim.now_ms >= self.settings.chaos_ms:
            return
        kinds = list(KINDS)
        kind = self.rng.choices(kinds, weights=[KINDS[k] for k in kinds])[0]
        if getattr(self, f"_{kind}")():
            self.faults += 1
        self.sim.after(self._gap(), self._fault)

    def _live_member(self) -> MemberNode | None:
        live = [m for m in self.members if m.up and not m.closing]
        return self.rng.choice(live) if live else None

    def _crash_member(self) -> bool:
        m = self._live_member()
        if m is None:
            return False
        m.crash()
        self._restart_later(m, self.rng.randint(50, 1500))
        return True

    def _exited(self, m: MemberNode) -> None:
        """A member process exited (closed, or failed): its supervisor starts it again."""
        self._restart_later(m, self.rng.randint(200, 1000))

    def _restart_later(self, m: MemberNode, delay_ms: int) -> None:
        # not after the heal: the quiet period must leave time to settle
        at = min(self.sim.now_ms + delay_ms, max(self.sim.now_ms, self.settings.chaos_ms))
        self.sim.at(at, self._restart, m)

    def _restart(self, m: MemberNode) -> None:
        if not m.up:
            m.boot()

    def _pause_member(self) -> bool:
        m = self._live_member()
        if m is None or m.paused:
            return False
        m.pause(self.rng.randint(50, 1500))
        return True

    def _stall_member(self) -> bool:
        m = self._live_member()
        if m is None:
            return False
        m.stall(self.rng.randint(100, 2500))
        return True

    def _close_member(self) -> bool:
        m = self._live_member()
        if m is None or m.paused:
            return False
        m.close()  # its process exits once it has left; _exited starts it again
        return True

    def _move_coordinator(self) -> bool:
        current = self.cluster.coordinator
        others = [b for b in self.cluster.brokers.values()
                  if b.up and b.node_id != current and not b.loading]
        if current is None or not others:
            return False
        self.cluster.move(self.rng.choice(others).node_id)
        return True

    def _crash_coordinator(self) -> bool:
        current = self.cluster.coordinator
        if current is None:
            return False
        broker = self.cluster.brokers[current]
        self.network.crashed(broker)
        broker.crash()
        self.sim.after(self.rng.randint(50, 300), self._elect, current)
        self.sim.after(self.rng.randint(200, 1500), self._restart_broker, broker)
        return True

    def _elect(self, crashed: int) -> None:
        """The offsets partition's new leader: another broker loads the group."""
        if self.cluster.coordinator is not None or \
                any(b.loading for b in self.cluster.brokers.values()):
            return
        up = [b for b in self.cluster.brokers.values() if b.up and b.node_id != crashed]
        if up:
            self.cluster.move(self.rng.choice(up).node_id)

    def _restart_broker(self, broker: GroupBroker) -> None:
        if not broker.up:
            broker.boot()

    def _lossy(self) -> bool:
        self.network.loss = self.rng.uniform(0.02, 0.15)
        self.sim.after(self.rng.randint(100, 800), self._calm)
        return True

    def _calm(self) -> None:
        self.network.loss = 0.0

    def _heal(self) -> None:
        self.sim.log("HEAL")
        self.network.heal()
        for broker in self.cluster.brokers.values():
            if not broker.up:
                broker.boot()
        if self.cluster.coordinator is None and \
                not any(b.loading for b in self.cluster.brokers.values()):
            self.cluster.move(self.rng.choice(sorted(self.cluster.brokers)))
        for m in self.members:
            if not m.up:
                m.boot()
            m.resume_now()
            m.stalled_until = -1

    def figures(self) -> dict[str, Any]:
        c = self.checkers
        return {"events": self.sim.events, "faults": self.faults,
                "generations": max(c.generations_seen, default=-1),
                "commits": c.commits_checked, "moves": self.cluster.moves,
                "fatal": len(c.fatal_errors), **c.counts}


def run_group_seed(seed: int, settings: GroupSimSettings | None = None,
                   verbose: bool = False) -> GroupResult:
    settings = settings or group_settings_for(seed)
    result = GroupResult(seed, settings)
    sim: GroupSimulation | None = None
    try:
        sim = GroupSimulation(seed, settings, verbose)
        with real_logs(sim.sim, sim.trace, verbose):
            sim.run()
    except Exception:
        result.error = traceback.format_exc(limit=12)
    if sim is not None:
        result.violations = list(sim.checkers.violations)
        result.liveness = list(sim.checkers.liveness)
        result.figures = sim.figures()
        result.trace = sim.trace
    return result
