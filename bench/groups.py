"""Consumer groups: rebalance times and commit latency, epochlog's client against confluent-kafka.

    python bench/groups.py [--members 3] [--partitions 12] [--rounds 3] [--commits 300]
                           [--clients epochlog,confluent] [--strategies range,cooperative-sticky]

One cluster of 3 brokers (real child processes; `__consumer_offsets` with 3 partitions and
replication factor 3, no initial rebalance delay) serves every run, so both clients meet the same
coordinators in the same run. The yardstick is confluent-kafka (librdkafka), with the same
session timeout, heartbeat interval, max poll interval and assignor.

What is timed, per client and assignor, each round in a fresh group on one topic of --partitions
partitions (no records: only the group protocol is measured):
1. first join: from the first of --members members' subscribe() to the group being settled:
   every member holds a non-empty assignment, the assignments are disjoint, and together they
   cover every partition;
2. scale up: one more member subscribes; time until settled again (--members + 1 members);
3. scale down: the first member (the group's first leader) closes, leaving the group; time until
   the others are settled again.
The median over --rounds is printed, with the range beside it. After each settled point the
group must stay unchanged for a quiet period (QUIET_HEARTBEATS heartbeat intervals) before the
next step starts, so that a follow-up round of the step before is not billed to the next one;
then the step waits a random part of a heartbeat interval (the same sequence for both clients,
--seed), so that it does not always start at the same phase of the members' heartbeats.
`__consumer_offsets` is created and its followers fetching before anything is timed.

Theory: a join is round trips plus waiting. A member that joins a stable group makes the
coordinator start a round; the others hear of it from their next heartbeat (up to one
heartbeat_interval_ms, HEARTBEAT_MS here), rejoin, and the round completes when all have joined;
then SyncGroup, once the leader has computed the assignment (from metadata: a round trip if it
asks for fresh metadata, more if that request waits behind a long-polling Fetch on the same
connection). Members that join a new group at once may land in different rounds: one whose
SyncGroup is answered REBALANCE_IN_PROGRESS rejoins, and any backoff it takes before that is
billed to the first join. Eager (range) members give up everything before rejoining: one round.
Cooperative (cooperative-sticky, KIP-429) members keep their partitions; the first round takes
away what must move, its owners give it up and rejoin, and a second round hands it out: two rounds,
but nothing stops being consumed except what moves. A member that leaves (LeaveGroup) starts a round
at once; the others again learn of it from a heartbeat. So both clients should land near a small
multiple of the heartbeat interval, and the differences are in how promptly each rejoins.

4. commit latency: one member in a fresh group, settled; then --commits synchronous commits of
   one partition's offset (with its leader epoch), one after another. p50, p99 and commits/s.
   Each commit is an OffsetCommit to the coordinator, which appends it to its `__consumer_offsets`
   partition and answers once the 3 replicas have it (acks=all): the floor is one client round
   trip plus one replication round trip.

How each client is driven: members of one client run in this one process. Ours are tasks on one
event loop, each calling poll(timeout_ms=POLL_MS) in a loop; a RebalanceListener checks the group
after every assignment (poll() applies a completed round at once). confluent's are polled
round-robin from this thread with poll(0), then a CONFLUENT_IDLE_S sleep (each has its own
background threads, which do the joining and heartbeating; the assignment is applied inside
poll(), so the check follows each sweep: resolution about a millisecond). A confluent member
closes on a thread of its own, so the others go on being polled meanwhile, as ours go on while
one awaits close().

Each section also gives elapsed seconds and the CPU seconds this process (the client side, all
its threads) and the 3 brokers (from /proc) spent in it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from epochlog.protocol.api_keys import ApiKey

REPO = str(Path(__file__).resolve().parent.parent)
if REPO not in sys.path:  # run as `python bench/groups.py`: bench/ is not installed
    sys.path.insert(0, REPO)

from bench.clients import process_cpu_s

BROKER_ARGS = ("--set", "offsets_topic_num_partitions=3",
               "--set", "offsets_topic_replication_factor=3",
               "--set", "group_initial_rebalance_delay_ms=0",
               "--set", "group_min_session_timeout_ms=1000")
TOPIC = "bench-groups"
SESSION_MS = 6000
HEARTBEAT_MS = 300
MAX_POLL_INTERVAL_MS = 30_000
POLL_MS = 100  # our members' poll() timeout
CONFLUENT_IDLE_S = 0.001  # between sweeps of poll(0) over confluent's members
QUIET_HEARTBEATS = 3  # a settled group must stay unchanged this many heartbeat intervals
SETTLE_WAIT_S = 30.0  # bound on one step
CLOSE_WAIT_S = 30.0  # bound on closing the members of one round
STEPS = ("first join", "scale up", "scale down")

Assignments = dict[str, set[tuple[str, int]]]


def settled(assignments: Assignments, partitions: int) -> bool:
    """Every member holds something, no partition twice, every partition once."""
    if not assignments or any(not a for a in assignments.values()):
        return False
    union = set().union(*assignments.values())
    return sum(map(len, assignments.values())) == len(union) == partitions and \
        union == {(TOPIC, p) for p in range(partitions)}


def describe(assignments: Assignments) -> str:
    return "; ".join(f"{name}: {sorted(p for _, p in a)}" for name, a in assignments.items())


@dataclass
class Costs:
    """Elapsed and CPU seconds of a section: this process (all threads) and the brokers."""
    brokers: list[int]
    elapsed: float = 0.0
    client_cpu: float = 0.0
    broker_cpu: float = 0.0
    _start: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __enter__(self) -> Self:
        self._start = (time.perf_counter(), time.process_time(),
                       sum(process_cpu_s(p) for p in self.brokers))
        return self

    def __exit__(self, *exc: object) -> None:
        wall, cpu, broker = self._start
        self.elapsed += time.perf_counter() - wall
        self.client_cpu += time.process_time() - cpu
        self.broker_cpu += sum(process_cpu_s(p) for p in self.brokers) - broker


@dataclass
class Result:
    steps: dict[str, list[float]] = field(default_factory=lambda: {s: [] for s in STEPS})
    unsettled: int = 0  # quiet periods in which a settled group changed again


@dataclass
class CommitResult:
    latencies_s: list[float]
    elapsed: float

    @property
    def rate(self) -> float:
        return len(self.latencies_s) / self.elapsed

    def quantile(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# ------------------------------------------------------------------------------- epochlog
def epochlog_rounds(bootstrap: str, strategy: str, members: int, partitions: int, rounds: int,
                    group_prefix: str, prime: Callable[[str], None],
                    phase: Callable[[], float]) -> Result:
    import uvloop

    from epochlog.client import Consumer, RebalanceListener

    settings: dict[str, Any] = {
        "session_timeout_ms": SESSION_MS, "heartbeat_interval_ms": HEARTBEAT_MS,
        "max_poll_interval_ms": MAX_POLL_INTERVAL_MS, "enable_auto_commit": False,
        "auto_offset_reset": "earliest", "partition_assignment_strategy": [strategy]}

    class Group:
        """The members of one round; `changed` is set on every listener call, `settled_at`
        records when the members' assignments last became settled."""

        def __init__(self) -> None:
            self.members: dict[str, Consumer] = {}
            self.pollers: dict[str, asyncio.Task[None]] = {}
            self.changed = asyncio.Event()
            self.settled_at: float | None = None

        def assignments(self) -> Assignments:
            return {n: {(tp.topic, tp.partition) for tp in c.assignment()}
                    for n, c in self.members.items()}

        def check(self) -> None:
            self.changed.set()
            now = time.perf_counter()
            if settled(self.assignments(), partitions):
                if self.settled_at is None:
                    self.settled_at = now
            else:
                self.settled_at = None

        async def add(self, name: str, group_id: str) -> Consumer:
            consumer = Consumer(bootstrap, group_id=group_id, client_id=name, **settings)
            await consumer.start()  # metadata and connections: before the clock starts
            return consumer

        def subscribe(self, name: str, consumer: Consumer) -> None:
            group = self

            class Listener(RebalanceListener):
                def on_partitions_revoked(self, revoked: Any) -> None:
                    group.check()

                def on_partitions_assigned(self, assigned: Any) -> None:
                    group.check()

                def on_partitions_lost(self, lost: Any) -> None:
                    group.check()

            self.members[name] = consumer
            consumer.subscribe([TOPIC], listener=Listener())
            self.pollers[name] = asyncio.get_running_loop().create_task(self._poll(consumer))

        @staticmethod
        async def _poll(consumer: Consumer) -> None:
            while True:
                await consumer.poll(timeout_ms=POLL_MS)

        async def settle(self, start: float, what: str) -> float:
            """Seconds from start to settled, once it stayed so through the quiet period."""
            deadline = time.monotonic() + SETTLE_WAIT_S
            quiet_s = QUIET_HEARTBEATS * HEARTBEAT_MS / 1000
            self.check()
            while True:
                self._raise_failures()
                if self.settled_at is not None:
                    at = self.settled_at
                    self.changed.clear()
                    try:
                        async with asyncio.timeout(quiet_s):
                            await self.changed.wait()
                    except TimeoutError:
                        return at - start
                    self._raise_failures()
                    if self.settled_at != at:
                        result.unsettled += 1
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(f"epochlog {strategy}: {what} not settled within "
                                       f"{SETTLE_WAIT_S:g} s: {describe(self.assignments())}")
                self.changed.clear()
                try:
                    async with asyncio.timeout(min(remaining, 0.5)):
                        await self.changed.wait()
                except TimeoutError:
                    pass

        def _raise_failures(self) -> None:
            for name, task in self.pollers.items():
                if task.done() and not task.cancelled() and task.exception() is not None:
                    raise RuntimeError(f"epochlog member {name} failed") from task.exception()

        def remove(self, name: str) -> asyncio.Task[None]:
            """Out of the group's view at once; its close (LeaveGroup) runs as a task."""
            consumer = self.members.pop(name)
            poller = self.pollers.pop(name)

            async def close() -> None:
                poller.cancel()
                await asyncio.gather(poller, return_exceptions=True)
                await consumer.close()

            return asyncio.get_running_loop().create_task(close())

        async def close(self) -> None:
            async with asyncio.timeout(CLOSE_WAIT_S):
                for name in list(self.members):
                    await self.remove(name)

    result = Result()

    async def one_round(group_id: str) -> None:
        group = Group()
        try:
            names = [f"m{i}" for i in range(members)]
            consumers = [await group.add(n, group_id) for n in names]
            start = time.perf_counter()
            for name, consumer in zip(names, consumers, strict=True):
                group.subscribe(name, consumer)
            result.steps["first join"].append(await group.settle(start, "first join"))

            extra = await group.add(f"m{members}", group_id)
            await asyncio.sleep(phase())
            start = time.perf_counter()
            group.subscribe(f"m{members}", extra)
            result.steps["scale up"].append(await group.settle(start, "scale up"))

            await asyncio.sleep(phase())
            start = time.perf_counter()
            leaving = group.remove(names[0])
            result.steps["scale down"].append(await group.settle(start, "scale down"))
            async with asyncio.timeout(CLOSE_WAIT_S):
                await leaving
        finally:
            await group.close()

    async def run() -> None:
        for r in range(rounds):
            group_id = f"{group_prefix}-{r}"
            prime(group_id)
            await one_round(group_id)

    uvloop.run(run())
    return result


def epochlog_commits(bootstrap: str, group_id: str, commits: int, epoch: int,
                     costs: Costs) -> CommitResult:
    import uvloop

    from epochlog.client import Consumer, TopicPartition

    async def run() -> CommitResult:
        async with Consumer(bootstrap, group_id=group_id, session_timeout_ms=SESSION_MS,
                            heartbeat_interval_ms=HEARTBEAT_MS,
                            max_poll_interval_ms=MAX_POLL_INTERVAL_MS, enable_auto_commit=False,
                            partition_assignment_strategy=["range"]) as consumer:
            consumer.subscribe([TOPIC])
            tp = TopicPartition(TOPIC, 0)
            deadline = time.monotonic() + SETTLE_WAIT_S
            while tp not in consumer.assignment():
                if time.monotonic() > deadline:
                    raise RuntimeError("epochlog: the commit member got no assignment")
                await consumer.poll(timeout_ms=POLL_MS)
            latencies = []
            with costs:
                for offset in range(1, commits + 1):
                    sent = time.perf_counter()
                    await consumer.commit({tp: (offset, epoch)})
                    latencies.append(time.perf_counter() - sent)
            committed = await consumer.committed([tp])
            if committed[tp] != (commits, epoch):
                raise RuntimeError(f"epochlog: committed {committed[tp]}, not {commits}")
            return CommitResult(latencies, costs.elapsed)

    return uvloop.run(run())


# ------------------------------------------------------------------------------- confluent
def _confluent_config(group_id: str, name: str, strategy: str, bootstrap: str) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group_id, "client.id": name,
            "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": HEARTBEAT_MS,
            "max.poll.interval.ms": MAX_POLL_INTERVAL_MS, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "partition.assignment.strategy": strategy}


def confluent_rounds(bootstrap: str, strategy: str, members: int, partitions: int, rounds: int,
                     group_prefix: str, prime: Callable[[str], None],
                     phase: Callable[[], float]) -> Result:
    import confluent_kafka

    result = Result()
    quiet_s = QUIET_HEARTBEATS * HEARTBEAT_MS / 1000

    def make(group_id: str, name: str) -> Any:
        consumer = confluent_kafka.Consumer(_confluent_config(group_id, name, strategy,
                                                              bootstrap))
        consumer.list_topics(TOPIC, timeout=SETTLE_WAIT_S)  # connected, as our start()
        return consumer

    def assignments(group: dict[str, Any]) -> Assignments:
        return {n: {(tp.topic, tp.partition) for tp in c.assignment()}
                for n, c in group.items()}

    def sweep(group: dict[str, Any]) -> None:
        for consumer in group.values():
            msg = consumer.poll(0)
            if msg is not None and msg.error() is not None and msg.error().fatal():
                raise RuntimeError(f"confluent: {msg.error()}")

    def idle(group: dict[str, Any], seconds: float) -> None:
        """Go on polling (as the application would) for a while."""
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            sweep(group)
            time.sleep(CONFLUENT_IDLE_S)

    def settle(group: dict[str, Any], start: float, what: str) -> float:
        deadline = time.monotonic() + SETTLE_WAIT_S
        settled_at: float | None = None
        last: Assignments = {}
        while True:
            sweep(group)
            now = time.perf_counter()
            current = assignments(group)
            if current != last:
                if settled_at is not None:
                    result.unsettled += 1
                settled_at = now if settled(current, partitions) else None
                last = current
            if settled_at is not None and now - settled_at >= quiet_s:
                return settled_at - start
            if time.monotonic() > deadline:
                raise RuntimeError(f"confluent {strategy}: {what} not settled within "
                                   f"{SETTLE_WAIT_S:g} s: {describe(current)}")
            time.sleep(CONFLUENT_IDLE_S)

    def one_round(group_id: str) -> None:
        names = [f"m{i}" for i in range(members)]
        group: dict[str, Any] = {}  # the members subscribed and not closing
        unsubscribed: list[Any] = []
        try:
            unsubscribed = [make(group_id, n) for n in names]
            start = time.perf_counter()
            for name, consumer in zip(names, unsubscribed, strict=True):
                consumer.subscribe([TOPIC])
                group[name] = consumer
            unsubscribed = []
            result.steps["first join"].append(settle(group, start, "first join"))

            unsubscribed = [make(group_id, f"m{members}")]
            idle(group, phase())
            start = time.perf_counter()
            unsubscribed[0].subscribe([TOPIC])
            group[f"m{members}"] = unsubscribed.pop()
            result.steps["scale up"].append(settle(group, start, "scale up"))

            idle(group, phase())
            leaving = group.pop(names[0])
            start = time.perf_counter()
            closer = threading.Thread(target=leaving.close, daemon=True)
            closer.start()
            result.steps["scale down"].append(settle(group, start, "scale down"))
            closer.join(CLOSE_WAIT_S)
            if closer.is_alive():
                raise RuntimeError("confluent: a member did not close")
        finally:
            for consumer in [*unsubscribed, *group.values()]:
                consumer.close()

    for r in range(rounds):
        group_id = f"{group_prefix}-{r}"
        prime(group_id)
        one_round(group_id)
    return result


def confluent_commits(bootstrap: str, group_id: str, commits: int, epoch: int,
                      costs: Costs) -> CommitResult:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(_confluent_config(group_id, "c0", "range", bootstrap))
    try:
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + SETTLE_WAIT_S
        while not any(tp.partition == 0 for tp in consumer.assignment()):
            if time.monotonic() > deadline:
                raise RuntimeError("confluent: the commit member got no assignment")
            consumer.poll(POLL_MS / 1000)
        latencies = []
        with costs:
            for offset in range(1, commits + 1):
                sent = time.perf_counter()
                answer = consumer.commit(offsets=[confluent_kafka.TopicPartition(
                    TOPIC, 0, offset, leader_epoch=epoch)], asynchronous=False)
                latencies.append(time.perf_counter() - sent)
                if answer is None or answer[0].error is not None:
                    raise RuntimeError(f"confluent: commit failed: {answer}")
        committed = consumer.committed([confluent_kafka.TopicPartition(TOPIC, 0)],
                                       timeout=SETTLE_WAIT_S)
        if committed[0].offset != commits:
            raise RuntimeError(f"confluent: committed {committed[0].offset}, not {commits}")
        return CommitResult(latencies, costs.elapsed)
    finally:
        consumer.close()


ROUNDS: dict[str, Callable[..., Result]] = {"epochlog": epochlog_rounds,
                                            "confluent": confluent_rounds}
COMMITS: dict[str, Callable[..., CommitResult]] = {"epochlog": epochlog_commits,
                                                   "confluent": confluent_commits}


# ------------------------------------------------------------------------------------ main
def prime_coordinator(cluster: Any, group_id: str) -> None:
    """FindCoordinator until the group's coordinator answers: `__consumer_offsets` exists and its
    partition is loaded, so no step bills the offsets topic's creation or loading."""
    from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest

    deadline = time.monotonic() + SETTLE_WAIT_S
    while True:
        answer = cluster.ask(ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(
            key=group_id, key_type=0, coordinator_keys=[group_id]))
        if answer.coordinators[0].error_code == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"no coordinator for {group_id}: {answer}")
        time.sleep(0.05)


def warm_offsets_topic(cluster: Any, prime: Callable[[str], None]) -> None:
    """Create `__consumer_offsets` (a FindCoordinator does) and wait until every follower of
    each of its partitions fetches: until then an acks=all append, hence the first SyncGroup or
    commit of a group, waits for the followers to start (a start-up cost, not a group's)."""
    prime("bench-warm-up")
    offsets = "__consumer_offsets"
    cluster.wait_leaders(offsets, len(cluster.metadata(topics=[offsets]).topics[0].partitions))
    for topic in cluster.metadata(topics=[offsets]).topics:
        for p in topic.partitions:
            for replica in p.replica_nodes:
                if replica != p.leader_id:
                    cluster.brokers[replica].wait_line(
                        rf"{offsets}-{p.partition_index}: truncating -> fetching")


def row(label: str, ours: float | None, theirs: float | None, unit: str,
        higher_is_better: bool = False, extra: str = "") -> str:
    def fmt(v: float | None) -> str:
        return f"{v:>10.1f} {unit:<4}" if v is not None else f"{'-':>10} {'':<4}"

    line = f"  {label:<30}{fmt(ours)}{fmt(theirs)}"
    if ours and theirs:
        speed = ours / theirs if higher_is_better else theirs / ours
        line += f"   {speed:5.2f}x"
    return line + extra


def ms(values: Iterable[float]) -> float:
    return statistics.median(values) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--commits", type=int, default=300)
    parser.add_argument("--clients", default="epochlog,confluent")
    parser.add_argument("--strategies", default="range,cooperative-sticky")
    parser.add_argument("--seed", type=int, default=1, help="for the heartbeat phases")
    parser.add_argument("--dir", default=None, help="where to put data (default: a temp dir)")
    args = parser.parse_args()
    if args.partitions < args.members + 1:
        parser.error("--partitions must be at least --members + 1 (every member holds some)")
    from epochlog.testing import Cluster

    clients = args.clients.split(",")
    strategies = args.strategies.split(",")
    root = Path(tempfile.mkdtemp(prefix="bench_groups_", dir=args.dir))
    try:
        with Cluster(3, base_dir=root / "cluster", broker_args=BROKER_ARGS) as cluster:
            pids = [b.pid for b in cluster.brokers.values()]
            bootstrap = cluster.bootstrap_servers
            cluster.create_topic(TOPIC, args.partitions, 3)
            epoch = cluster.wait_leaders(TOPIC, args.partitions)[0][1]
            prime = functools.partial(prime_coordinator, cluster)
            warm_offsets_topic(cluster, prime)
            results: dict[tuple[str, str], Result] = {}
            costs: dict[tuple[str, str], Costs] = {}
            for strategy in strategies:
                for client in clients:
                    with costs.setdefault((client, strategy), Costs(pids)):
                        rng = random.Random(args.seed)  # the same phases for each client
                        results[(client, strategy)] = ROUNDS[client](
                            bootstrap, strategy, args.members, args.partitions,
                            args.rounds, f"bench-{client}-{strategy}", prime,
                            functools.partial(rng.uniform, 0, HEARTBEAT_MS / 1000))
            commit_results: dict[str, CommitResult] = {}
            for client in clients:
                group_id = f"bench-{client}-commits"
                prime(group_id)
                costs[(client, "commits")] = Costs(pids)
                commit_results[client] = COMMITS[client](
                    bootstrap, group_id, args.commits, epoch, costs[(client, "commits")])
        report(args, clients, strategies, results, commit_results, costs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def report(args: argparse.Namespace, clients: list[str], strategies: list[str],
           results: dict[tuple[str, str], Result], commit_results: dict[str, CommitResult],
           costs: dict[tuple[str, str], Costs]) -> None:
    ours, theirs = "epochlog", "confluent"
    print(f"3 brokers, __consumer_offsets 3 partitions RF 3; topic of {args.partitions} "
          f"partitions; {args.members} members (+1, -1); session {SESSION_MS} ms, heartbeat "
          f"{HEARTBEAT_MS} ms; median of {args.rounds} rounds")
    print(f"  {'':<30}{ours:>15}{theirs:>15}   epochlog speed (x confluent, >1: faster); "
          "range ms")
    for strategy in strategies:
        print(f"{strategy} (time to settled)")
        for step in STEPS:
            runs = {c: results[(c, strategy)].steps[step] for c in clients}
            spread = "   " + "; ".join(
                f"{c} {min(v) * 1000:.0f}-{max(v) * 1000:.0f}" for c, v in runs.items())
            medians = {c: ms(v) for c, v in runs.items()}
            print(row(step, medians.get(ours), medians.get(theirs), "ms", extra=spread))
        for client in clients:
            c, r = costs[(client, strategy)], results[(client, strategy)]
            print(f"    {client}: {c.elapsed:5.2f} s elapsed; CPU s: client {c.client_cpu:5.2f}, "
                  f"brokers {c.broker_cpu:5.2f}; changes after settling: {r.unsettled}")
    print(f"commits ({args.commits} synchronous commits of one partition, one after another)")
    for label, get, unit, higher in (
            ("p50", lambda r: r.quantile(0.5) * 1000, "ms", False),
            ("p99", lambda r: r.quantile(0.99) * 1000, "ms", False),
            ("rate", lambda r: r.rate, "/s", True)):
        got = {c: get(r) for c, r in commit_results.items()}
        print(row(label, got.get(ours), got.get(theirs), unit, higher))
    for client in clients:
        c = costs[(client, "commits")]
        n = args.commits
        print(f"    {client}: {c.elapsed:5.2f} s elapsed; CPU per commit: "
              f"client {c.client_cpu / n * 1e6:6.0f} us, brokers {c.broker_cpu / n * 1e6:6.0f} us")


if __name__ == "__main__":
    main()
