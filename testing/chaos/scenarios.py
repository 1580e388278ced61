"""The chaos scenarios, as data, and the seeded fault schedule each one makes.

A scenario says what cluster and topic it needs, what the producers send with (acks, idempotence),
and which kind of fault it applies; `schedule(seed, duration_s)` turns it into `Window`s: when each
fault starts and ends (seconds after the workload starts) and the choices the seed made (which
partition's leader, which follower, how slow). The same scenario, seed and duration give the same
schedule, always (a `random.Random` seeded from the three, nothing else); which broker a "leader
of partition 1" is, only the running cluster can say, so that is resolved when the window opens.

Fault kinds (runner.py applies them; each window's end undoes its start):
- kill / pause / stop: SIGKILL / SIGSTOP / SIGTERM the target, then restart / resume / restart;
- cut-leader: the partition's leader cut off from its followers (and, if the seed says so, from
  the controller too, so it is fenced and replaced while it runs on), then healed;
- slow: the target's packets delayed (delay_ms ± jitter_ms), then healed;
- rebalance-kill: a consumer joins or leaves the group, and the group's coordinator is SIGKILLed
  while the group rebalances; restarted at the end;
- inject: test-only request hooks on the partition's leader (Cluster.inject): its next Produce
  requests answered NOT_LEADER_OR_FOLLOWER and its next Fetch requests delayed, `times` each;
  the hooks left are removed at the end;
- unclean: the partition's follower killed, the leader acknowledges alone (acks=1), then is
  killed, the follower comes back and is elected uncleanly, the old leader comes back and
  truncates: acknowledged writes are lost by design, and every consumer must report it;
- damage: a broker stopped (SIGTERM, a clean shutdown) or SIGKILLed, as the seed says, then one
  of its files damaged (epochlog.testing.damage: bits flipped, a page zeroed, a segment cut short,
  an index or a checkpoint broken), then started again: the other replicas are intact, so nothing
  acknowledged may be lost and no corrupt batch may reach a client (local clusters only: the
  harness writes into the broker's data dir).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Literal

FaultKind = Literal["kill", "pause", "stop", "cut-leader", "slow", "rebalance-kill", "unclean",
                    "inject", "damage"]
# Who a window hits: the leader or a follower of its partition, the group's coordinator, the
# controller, or the broker named in the window.
TargetKind = Literal["leader", "follower", "coordinator", "controller", "broker"]

WARMUP_S = 2.0  # traffic flows before the first fault
COOLDOWN_S = 1.0  # the last fault ends at least this long before the duration is up
DURATION_S_MIN = 5.0


@dataclass(frozen=True)
class Window:
    """One fault: applied at start_s, undone at end_s (seconds after the workload starts)."""

    start_s: float
    end_s: float
    kind: FaultKind
    target: TargetKind
    partition: int = 0  # whose leader or follower
    broker: int = 0  # the broker, for target "broker"
    follower_index: int = 0  # which follower (index into the followers), for target "follower"
    delay_ms: int = 0  # slow
    jitter_ms: int = 0  # slow
    with_controller: bool = False  # cut-leader: cut from the controller as well
    join: bool = True  # rebalance-kill: a consumer joins (True) or leaves (False)
    times: int = 0  # inject: how many requests of each kind are hooked
    clean: bool = True  # damage: stopped cleanly (True) or SIGKILLed before the damage
    damage_seed: int = 0  # damage: seeds what is damaged, once the files are known

    def describe(self) -> str:
        who = {"leader": f"leader of partition {self.partition}",
               "follower": f"follower {self.follower_index} of partition {self.partition}",
               "coordinator": "the group's coordinator", "controller": "the controller",
               "broker": f"broker {self.broker}"}[self.target]
        extra = {"slow": f" by {self.delay_ms}±{self.jitter_ms} ms",
                 "cut-leader": " from its followers" + (" and the controller"
                                                        if self.with_controller else ""),
                 "rebalance-kill": " as a consumer " + ("joins" if self.join else "leaves"),
                 "inject": f": {self.times} Produce answered NOT_LEADER_OR_FOLLOWER, "
                           f"{self.times} Fetch delayed {self.delay_ms} ms",
                 "damage": (" stopped" if self.clean else " killed") + ", its files damaged",
                 }.get(self.kind, "")
        return f"{self.start_s:.1f}-{self.end_s:.1f}s {self.kind} {who}{extra}"


@dataclass(frozen=True)
class Scenario:
    name: str
    summary: str
    kind: FaultKind
    target: TargetKind
    brokers: int = 3
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    acks: Literal["all", "1"] = "all"
    idempotent: bool = True
    unclean: bool = False  # unclean leader election allowed
    network: bool = False  # needs network faults (namespaces or the proxy fallback)
    request_hooks: bool = False  # needs the brokers' test-only request hooks
    local_only: bool = False  # needs the local target (the harness writes into data dirs)
    loss_expected: str | None = None  # why acknowledged writes may be lost, when they may
    fault_s: tuple[float, float] = (2.0, 4.0)  # how long a fault lasts, seeded in this range
    gap_s: tuple[float, float] = (1.0, 2.5)  # between one fault's end and the next's start
    windows_max: int = 3
    settings: dict[str, object] = field(default_factory=dict)

    def schedule(self, seed: int, duration_s: float) -> list[Window]:
        """The fault windows of a run: a function of (scenario, seed, duration) only."""
        if duration_s < DURATION_S_MIN:
            raise ValueError(f"duration {duration_s}s: at least {DURATION_S_MIN}s")
        rng = random.Random(f"{self.name}/{seed}/{duration_s:.3f}")
        if self.kind == "stop":
            return self._rolling(rng, duration_s)
        windows: list[Window] = []
        t = WARMUP_S
        while len(windows) < self.windows_max:
            start = t + (rng.uniform(*self.gap_s) if windows else 0.0)
            length = rng.uniform(*self.fault_s)
            if start + length > duration_s - COOLDOWN_S:
                break
            windows.append(self._window(rng, round(start, 2), round(start + length, 2)))
            t = start + length
        if not windows:  # a short run still gets one fault, squeezed into it
            windows.append(self._window(rng, WARMUP_S, round(max(
                WARMUP_S + 0.5, duration_s - COOLDOWN_S), 2)))
        return windows

    def _window(self, rng: random.Random, start: float, end: float) -> Window:
        return Window(
            start_s=start, end_s=end, kind=self.kind, target=self.target,
            partition=rng.randrange(self.partitions),
            follower_index=rng.randrange(max(1, self.replication_factor - 1)),
            delay_ms=rng.choice((100, 200, 300, 400)) if self.kind in ("slow", "inject") else 0,
            jitter_ms=rng.choice((0, 25, 50)) if self.kind == "slow" else 0,
            times=rng.randint(3, 10) if self.kind == "inject" else 0,
            with_controller=rng.random() < 0.5 if self.kind == "cut-leader" else False,
            join=rng.random() < 0.6 if self.kind == "rebalance-kill" else True,
            broker=rng.randint(1, self.brokers) if self.target == "broker" else 0,
            clean=rng.random() < 0.5 if self.kind == "damage" else True,
            damage_seed=rng.randrange(1 << 30) if self.kind == "damage" else 0)

    def _rolling(self, rng: random.Random, duration_s: float) -> list[Window]:
        """Each broker stopped and restarted once, in a seeded order, evenly over the run."""
        order = rng.sample(range(1, self.brokers + 1), self.brokers)
        span = (duration_s - WARMUP_S - COOLDOWN_S) / self.brokers
        return [Window(start_s=round(WARMUP_S + i * span, 2),
                       end_s=round(WARMUP_S + i * span + span * rng.uniform(0.3, 0.6), 2),
                       kind="stop", target="broker", broker=b) for i, b in enumerate(order)]


FAST_FAILOVER: dict[str, object] = {
    "broker_session_timeout_ms": 3000, "broker_heartbeat_interval_ms": 750,
    "replica_lag_time_max_ms": 3000, "offsets_topic_num_partitions": 3,
    "group_initial_rebalance_delay_ms": 0, "group_min_session_timeout_ms": 1000,
}

SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("kill-leader", "SIGKILL a partition's leader under load, restart it later",
             "kill", "leader"),
    Scenario("kill-coordinator", "SIGKILL the group's coordinator while a consumer joins or "
             "leaves (mid-rebalance), restart it later", "rebalance-kill", "coordinator",
             fault_s=(2.5, 4.0)),
    Scenario("kill-controller", "SIGKILL the controller, restart it later", "kill",
             "controller"),
    Scenario("zombie-leader", "SIGSTOP a partition's leader past its session (it is replaced "
             "while frozen), SIGCONT it later", "pause", "leader", fault_s=(4.0, 6.0),
             windows_max=2),
    Scenario("partition-leader", "cut a partition's leader off its followers (and maybe the "
             "controller) while clients still reach it, heal later", "cut-leader", "leader",
             network=True, fault_s=(3.0, 5.0), windows_max=2),
    Scenario("rolling-restart", "a controlled shutdown and restart of each broker in turn",
             "stop", "broker"),
    Scenario("unclean-election", "acks=1 and unclean election: the follower dies, the leader "
             "acknowledges alone and dies, the follower is elected uncleanly; the lost writes are "
             "expected and each consumer must report the truncation", "unclean", "leader",
             partitions=1, replication_factor=2, min_insync_replicas=1, acks="1",
             idempotent=False, unclean=True, fault_s=(5.0, 7.0), windows_max=1,
             loss_expected="an unclean leader election with acks=1 loses what only the old "
             "leader had",
             # unclean recovery elects at once among the replicas that answer: it would
             # otherwise wait for the dead leader, which returns within the window and, holding
             # the most, would lead with nothing lost (KIP-966 doing its job, not this scenario's)
             settings={"unclean.recovery.timeout.ms": 0}),
    Scenario("injected-errors", "test-only request hooks on a partition's leader: Produce "
             "answered NOT_LEADER_OR_FOLLOWER and Fetch delayed, a few times each", "inject",
             "leader", request_hooks=True),
    Scenario("storage-damage", "stop or SIGKILL a broker, damage one of its files (bits "
             "flipped, a page zeroed, a segment cut short, an index or a checkpoint broken), "
             "start it again: it must serve no corrupt byte and repair from the intact replicas",
             "damage", "broker", local_only=True, fault_s=(2.0, 3.5), gap_s=(3.0, 5.0)),
    Scenario("slow-follower", "delay a follower's packets by 100-400 ms, heal later", "slow",
             "follower", network=True),
)}


def get(name: str) -> Scenario:
    found = SCENARIOS.get(name)
    if found is None:
        raise KeyError(f"no scenario {name!r}: `epochlog chaos list` shows "
                       f"{', '.join(SCENARIOS)}")
    return found
