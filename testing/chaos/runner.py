"""One chaos run: a cluster, the workload, a scenario's seeded fault schedule, the heal, the
read-back and the verdict.

    outcome = run(RunConfig(scenario=get("kill-leader"), seed=7, duration_s=15))
    outcome.ok, outcome.verdict, outcome.problems

Theory of operation
-------------------
1. The cluster is opened on the target (targets.py) with fast failover settings, network faults
   if the scenario needs them, and every fault it applies recorded in the History (with its
   time). The topic is made and fully replicated before traffic starts.
2. The workload (workload.py) starts; the schedule's windows are applied in order, each at its
   start time and undone at its end time (a fault that takes long to apply delays the next
   window, never skips it). Targets named by role (the leader of partition 1, the coordinator)
   are resolved when the window opens.
3. Healing: the network is healed, any node still down is started again, and the topic must be
   fully replicated again (bounded). Producers stop and flush.
4. Reading back: a fresh consumer reads every partition from start to end (the final log); the
   group's consumers get DRAIN_S to have seen all of it between them.
5. check() judges the history. The run fails on any failing anomaly, on a history that tested
   nothing (no acknowledged send or no record read: `Verdict.unexercised`), and on `problems`: the
   cluster did not heal, the read-back did not finish, the group did not catch up, a window
   could not be applied, or (where the scenario expects no loss) an acknowledged value is not
   in the final log: check() does not see a value that was polled before a truncation and
   whose offset nothing replaced since, so the runner compares the final log itself.

An `Observer` (live.py) is told of each phase, window and fault as they happen.

One time origin: the workload's start. The schedule counts from it, and so does every part of
the report (the fault list, the picture, the console): `Outcome.origin_ms` is where it falls on
the history's clock, and the observer is told when it is. A window has three moments: the
fault applied, the fault undone (the heal: a restart, resume or network heal begins), and the
cluster recovered (that call returned: a restarted broker has registered again), so the fault
can be shown apart from the recovery.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from epochlog.client import KafkaError

from ..checker import Verdict, check
from ..damage import damage
from ..history import History, Send
from ..targets import open_cluster
from .scenarios import FAST_FAILOVER, Scenario, Window
from .workload import Client, Workload, read_back, require_client

TOPIC = "chaos"
GROUP = "chaos"
HEAL_S = 90.0  # the topic fully replicated again after the last fault
DRAIN_S = 60.0  # the group's consumers catch up with the final log
READ_BACK_S = 90.0
REBALANCE_LEAD_S = 0.3  # a consumer joins or leaves this long before the coordinator dies
WAIT_S = 60.0  # a leader, a coordinator, a restart


class Observer(Protocol):
    def started(self, history: History) -> None: ...
    def phase(self, text: str) -> None: ...
    def window(self, window: Window | None) -> None: ...  # the fault now active, or None
    def workload_started(self, monotonic_s: float) -> None: ...  # the time origin
    def fault(self, kind: str, targets: tuple[int | str, ...], detail: str) -> None: ...


class Quiet:
    def started(self, history: History) -> None:
        pass

    def phase(self, text: str) -> None:
        pass

    def window(self, window: Window | None) -> None:
        pass

    def workload_started(self, monotonic_s: float) -> None:
        pass

    def fault(self, kind: str, targets: tuple[int | str, ...], detail: str) -> None:
        pass


@dataclass
class RunConfig:
    scenario: Scenario
    seed: int
    duration_s: float
    client: Client = "ours"
    target: str = "local"
    rate_per_s: float = 50.0  # per producer
    base_dir: Path | None = None  # the cluster's data; a temporary folder when None


@dataclass
class Applied:
    """A window as it happened, in ms since the history began (its clock): the fault from
    start_ms to heal_ms, the recovery from heal_ms to end_ms."""
    window: Window
    start_ms: float  # the fault applied
    end_ms: float | None = None  # recovered: the undoing returned (a restarted node is back)
    victims: list[int | str] = field(default_factory=list)
    heal_ms: float | None = None  # the fault undone; None: it could not be (see problems)


@dataclass
class Outcome:
    config: RunConfig
    schedule: list[Window]
    history: History
    verdict: Verdict
    applied: list[Applied]
    problems: list[str]
    errors: list[str]
    error_count: int
    final_values: int
    lost_acked: int  # acknowledged values the final log does not hold
    elapsed_s: float
    origin_ms: float  # the workload's start on the history's clock: the report's time origin

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not self.problems


def cluster_settings(s: Scenario) -> dict[str, object]:
    settings: dict[str, object] = {**FAST_FAILOVER, "min.insync.replicas": s.min_insync_replicas,
                                   "offsets_topic_replication_factor": min(3, s.brokers)}
    if s.unclean:
        settings["unclean.leader.election.enable"] = True
    return {**settings, **s.settings}


def run(config: RunConfig, observer: Observer | None = None,
        tamper: Callable[[History], None] | None = None) -> Outcome:
    """The whole run (see the module's notes). tamper, for the runner's own tests, changes the
    history before it is checked (e.g. takes an acknowledged record out of the read-back)."""
    obs = observer or Quiet()
    s = config.scenario
    require_client(config.client)  # before a cluster is started for a workload that cannot run
    schedule = s.schedule(config.seed, config.duration_s)
    history = History()
    t0 = time.monotonic()  # the history's clock starts here too (within a millisecond)

    def recorded(kind: str, targets: tuple[int | str, ...], detail: str) -> None:
        history.record_fault(kind, targets, detail)
        obs.fault(kind, targets, detail)

    obs.started(history)
    if s.loss_expected:
        history.expect_loss(s.loss_expected)
    kwargs: dict[str, Any] = {"settings": cluster_settings(s), "on_fault": recorded}
    if config.base_dir is not None:
        kwargs["base_dir"] = config.base_dir
    if s.network:
        kwargs["network"] = True
    if s.request_hooks:
        kwargs["request_hooks"] = True
    if s.local_only and config.target != "local":
        raise ValueError(f"scenario {s.name} runs on the local target only: the harness writes "
                         f"into the brokers' data dirs (not {config.target!r})")
    problems: list[str] = []
    applied: list[Applied] = []
    obs.phase("starting the cluster")
    cluster = open_cluster(config.target, s.brokers, **kwargs)
    cluster.start()
    try:
        cluster.create_topic(TOPIC, partitions=s.partitions,
                             replication_factor=s.replication_factor)
        cluster.wait_fully_replicated(TOPIC, timeout_s=WAIT_S)
        workload = Workload(cluster.bootstrap_servers, history, topic=TOPIC,
                            partitions=s.partitions, client=config.client, acks=s.acks,
                            idempotent=s.idempotent, rate_per_s=config.rate_per_s, group=GROUP)
        try:
            start = time.monotonic()
            origin_ms = (start - t0) * 1000
            obs.workload_started(start)
            obs.phase("running the workload")
            workload.start()
            _apply_schedule(cluster, workload, schedule, start, t0, applied, problems, obs,
                            recorded)
            _sleep_until(start + config.duration_s)
            obs.phase("healing")
            _heal(cluster, s, problems)
            obs.phase("stopping the producers")
            workload.stop_producing()
            obs.phase("reading back")
            final: set[bytes] = set()
            try:
                final = read_back(cluster.bootstrap_servers, history, TOPIC, s.partitions,
                                  READ_BACK_S)
            except (TimeoutError, OSError, RuntimeError, KafkaError) as exc:
                problems.append(f"the read-back failed: {type(exc).__name__}: {exc}")
            obs.phase("the group catches up")
            if final and not workload.drain(final, DRAIN_S):
                problems.append(f"the group's consumers had not read every value of the final "
                                f"log {DRAIN_S:.0f}s after the producers stopped")
        finally:
            workload.close()
    finally:
        try:
            cluster.close()
        except Exception as exc:  # noqa: BLE001 - e.g. a broker that failed its shutdown
            problems.append(f"closing the cluster: {type(exc).__name__}: {exc}")
    obs.window(None)
    obs.phase("checking")
    if tamper is not None:
        tamper(history)
    verdict = check(history)
    lost = _acked_values(history) - final if final else set()
    if workload.corrupt_count:
        problems.append(f"clients were served {workload.corrupt_count} corrupt batch(es): a "
                        f"broker sent bytes whose CRC fails")
    if lost and not s.loss_expected:
        problems.append(f"{len(lost)} acknowledged value(s) are not in the final log, e.g. "
                        f"{sorted(lost)[:3]}")
    if verdict.unexercised and workload.errors:  # the verdict says what is missing; this, why
        problems.append(f"the workload tested nothing ({'; '.join(verdict.unexercised)}); its "
                        f"clients' first error: {workload.errors[0]}")
    return Outcome(config=config, schedule=schedule, history=history, verdict=verdict,
                   applied=applied, problems=problems, errors=list(workload.errors),
                   error_count=workload.error_count, final_values=len(final),
                   lost_acked=len(lost),
                   elapsed_s=time.monotonic() - t0, origin_ms=origin_ms)


def _acked_values(history: History) -> set[bytes]:
    return {op.value for op in history.ops
            if isinstance(op, Send) and op.acked and op.value is not None}


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def _apply_schedule(cluster: Any, workload: Workload, schedule: list[Window], start: float,
                    t0: float, applied: list[Applied], problems: list[str],
                    obs: Observer, recorded: Callable[[str, tuple[int | str, ...], str], None]
                    ) -> None:
    def ms() -> float:
        return (time.monotonic() - t0) * 1000

    for w in schedule:
        _sleep_until(start + w.start_s)
        record = Applied(window=w, start_ms=ms())
        applied.append(record)
        obs.window(w)
        try:
            _open_window(cluster, workload, w, record, start, recorded)
            _sleep_until(start + w.end_s)
            record.heal_ms = ms()
            _close_window(cluster, w, record)
        except Exception as exc:  # noqa: BLE001 - a window that cannot be applied fails the run
            problems.append(f"window {w.describe()}: {type(exc).__name__}: {exc}")
            if w.kind in ("slow", "cut-leader"):
                _heal_quietly(cluster)
        record.end_ms = ms()
        obs.window(None)


def _replicas(cluster: Any, partition: int) -> tuple[int, list[int]]:
    """(leader, followers) of the chaos topic's partition."""
    leader = cluster.leader_of(TOPIC, partition, timeout_s=WAIT_S)
    p = cluster.partitions(TOPIC)[partition]
    return leader, [r for r in p.replica_nodes if r != leader]


def _broker_ids(cluster: Any) -> list[int]:
    """The broker ids of either backend (the compose one names them broker_ids)."""
    ids = getattr(cluster, "broker_ids", None)
    return list(ids) if ids is not None else list(cluster.brokers)


def _resolve(cluster: Any, w: Window) -> int | str:
    if w.target == "leader":
        return _replicas(cluster, w.partition)[0]
    if w.target == "follower":
        followers = _replicas(cluster, w.partition)[1]
        return followers[w.follower_index % len(followers)]
    if w.target == "coordinator":
        return int(cluster.coordinator_of(GROUP, timeout_s=WAIT_S))
    if w.target == "controller":
        return str(cluster.controller)
    return w.broker


def _open_window(cluster: Any, workload: Workload, w: Window, record: Applied, start: float,
                 recorded: Callable[[str, tuple[int | str, ...], str], None]) -> None:
    if w.kind == "rebalance-kill":
        victim = _resolve(cluster, w)
        left = None if w.join else workload.remove_consumer()
        if left is None:  # joining, or the last consumer would have left: one joins
            recorded("rebalance", (), f"consumer {workload.add_consumer()} joins the group")
        else:
            recorded("rebalance", (), f"consumer {left} leaves the group")
        time.sleep(REBALANCE_LEAD_S)
        cluster.kill(victim)
        record.victims = [victim]
        return
    if w.kind == "unclean":
        leader, followers = _replicas(cluster, w.partition)
        follower = followers[0]
        record.victims = [leader, follower]
        cluster.kill(follower)  # the leader acknowledges alone now (acks=1)
        _sleep_until(start + (w.start_s + w.end_s) / 2)
        cluster.kill(leader)
        cluster.restart(follower)  # elected uncleanly: it lacks the leader's tail
        return
    victim = _resolve(cluster, w)
    record.victims = [victim]
    if w.kind == "kill":
        cluster.kill(victim)
    elif w.kind == "pause":
        cluster.pause(victim)
    elif w.kind == "stop":
        cluster.stop(victim)
    elif w.kind == "slow":
        cluster.slow(victim, delay_ms=w.delay_ms, jitter_ms=w.jitter_ms)
    elif w.kind == "inject":
        cluster.inject(victim, "PRODUCE", "error", error="NOT_LEADER_OR_FOLLOWER", times=w.times)
        cluster.inject(victim, "FETCH", "delay", delay_ms=w.delay_ms, times=w.times)
    elif w.kind == "damage":
        if w.clean:
            cluster.stop(victim)
        else:
            cluster.kill(victim)
        rng = random.Random(w.damage_seed)
        what = damage(Path(cluster.node(victim).data_dir), TOPIC, rng)
        recorded("damage", (victim,), what)
    elif w.kind == "cut-leader":
        others: set[int | str] = {b for b in _broker_ids(cluster) if b != victim}
        if w.with_controller:
            others.add(cluster.controller)
        cluster.partition({victim}, others)
    else:
        raise ValueError(f"unknown fault kind {w.kind!r}")


def _close_window(cluster: Any, w: Window, record: Applied) -> None:
    if w.kind in ("kill", "stop", "rebalance-kill", "damage"):
        cluster.restart(record.victims[0])
    elif w.kind == "pause":
        cluster.resume(record.victims[0])
    elif w.kind in ("slow", "cut-leader"):
        cluster.heal()
    elif w.kind == "inject":
        cluster.clear_injections(record.victims[0])
    elif w.kind == "unclean":
        cluster.restart(record.victims[0])  # the old leader: it truncates its tail


def _heal_quietly(cluster: Any) -> None:
    try:
        cluster.heal()
    except Exception:  # noqa: BLE001, S110 - _heal reports what stays broken
        pass


def _heal(cluster: Any, s: Scenario, problems: list[str]) -> None:
    """Network whole, every node running, the topic fully replicated (bounded)."""
    try:
        if s.network:
            cluster.heal()
        for row in cluster.status():
            if row.state == "paused":
                cluster.resume(row.node)
            elif row.state != "running":
                cluster.restart(row.node)
        cluster.wait_fully_replicated(TOPIC, timeout_s=HEAL_S)
    except Exception as exc:  # noqa: BLE001 - the run fails, saying why
        problems.append(f"the cluster did not heal: {type(exc).__name__}: {exc}")


