"""`docker kill` of the group coordinator while a consumer group rebalances, on a compose cluster
(issue 15), judged by epochlog.testing's History and check.

A ComposeCluster from the pytest plugin's fixture (`epochlog_cluster(target="compose")`), with
settings through its generated override file (offsets topic of 3
partitions replicated 3 times, no initial rebalance delay, min.insync.replicas 2), every fault
recorded in the History with its time. An idempotent acks=all confluent-kafka producer on the
host writes unique values; consumers of one group (recording adapters) poll and commit by hand.
Member A reads; member B joins, and as soon as A gives up its partitions (the rebalance has
begun) the coordinator's container is killed (`docker kill`). Member C joins and A leaves while
the group's coordination moves to another broker. The killed broker is started again
(`docker start`, its volume's data) and rejoins every ISR. Then the producer flushes and stops,
B and C read until the group has seen every acknowledged value, a fresh reader reads every
partition from the start, and `check` must find nothing: no anomaly, every send acknowledged.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from epochlog.testing import History, check
from epochlog.testing.adapter_confluent import Consumer, Producer
from epochlog.testing.compose_cluster import ComposeCluster
from epochlog.testing.history import Fault, Poll, Rebalance, Send
from epochlog.testing.requests import until

TOPIC = "orders"
PARTITIONS = 6
GROUP = "g-compose"
OFFSETS_TOPIC = "__consumer_offsets"
SETTINGS = {"min.insync.replicas": 2, "offsets.topic.num.partitions": 3,
            "offsets.topic.replication.factor": 3, "group.initial.rebalance.delay.ms": 0}
SEND_INTERVAL_S = 0.005  # about 200 records a second
SESSION_MS = 6000
STEP_S_MAX = 90.0  # each wait of the scenario
FLUSH_S = 60.0


DEBUG_LINES = 300


class _Keep(logging.Handler):
    """Keeps a logger's latest lines, stamped with the history's time."""

    def __init__(self, lines: deque[str], history: History) -> None:
        super().__init__()
        self.lines, self.history = lines, history

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{self.history.now_ms():.0f} ms {record.getMessage()}")


class Member:
    """One consumer of the group in a thread of its own: poll, commit what it read."""

    def __init__(self, bootstrap: str, history: History, name: str,
                 read: set[bytes], errors: deque[str]) -> None:
        # librdkafka's own account of the group and its fetches, the latest lines kept for a
        # failure's detail (a member that stops reading while it holds partitions, say)
        self.debug: deque[str] = deque(maxlen=DEBUG_LINES)
        logger = logging.getLogger(f"rdkafka.{name}")
        logger.propagate = False
        logger.setLevel(logging.DEBUG)
        logger.addHandler(_Keep(self.debug, history))
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                                  "auto.offset.reset": "earliest", "enable.auto.commit": False,
                                  "session.timeout.ms": SESSION_MS,
                                  "heartbeat.interval.ms": 500, "debug": "cgrp,fetch",
                                  "logger": logger}, history=history, name=name)
        self.name, self.read, self.errors = name, read, errors
        self.history = history
        self.doing = "starting"  # for a failure's detail: a member that hangs, and where
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.consumer.subscribe([TOPIC])
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.3)
                if msg is None:
                    continue
                if msg.error() is not None:  # for a failure's detail; librdkafka goes on
                    self.errors.append(f"{self.name} at {self._ms():.0f} ms: {msg.error()}")
                    continue
                self.read.add(msg.value())
                self.doing = f"a synchronous commit since {self._ms():.0f} ms"
                try:
                    self.consumer.commit(asynchronous=False)
                except Exception as exc:  # a commit across the failover: the next one retries
                    self.errors.append(f"{self.name} at {self._ms():.0f} ms: {exc!r}")
                self.doing = f"polling since {self._ms():.0f} ms"
        finally:
            self.consumer.close()  # leaves the group

    def _ms(self) -> float:
        return self.history.now_ms()

    def leave(self) -> None:
        self.stop.set()
        self.thread.join(STEP_S_MAX)
        assert not self.thread.is_alive(), f"{self.name} did not close"


def produce(bootstrap: str, history: History, stop: threading.Event) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "linger.ms": 5,
                         "message.timeout.ms": 90_000}, history=history, name="producer")
    n = 0
    while not stop.is_set():
        producer.produce(TOPIC, f"v-{n}".encode(), str(n % 11).encode())
        n += 1
        producer.poll(SEND_INTERVAL_S)
    assert producer.flush(FLUSH_S) == 0, "records unacknowledged after the flush"


def acked(history: History) -> set[bytes]:
    return {op.value for op in history.ops
            if isinstance(op, Send) and op.acked and op.value is not None}


def wait(what: str, done: Callable[[], bool],
         detail: Callable[[], str] | None = None) -> None:
    until(lambda: done() or None, what, STEP_S_MAX, interval_s=0.1, detail=detail)


def unread(history: History, read: set[bytes], errors: deque[str]) -> str:
    """For a failure: the acknowledged values the group has not read, by partition (offsets),
    each member's last assignment change, and the members' last commit errors."""
    missing: dict[int | None, list[int]] = {}
    for op in history.ops:
        if isinstance(op, Send) and op.acked and op.value is not None and op.value not in read:
            missing.setdefault(op.partition, []).append(op.offset or -1)
    parts = {p: f"{len(o)} at offsets {min(o)}..{max(o)}" for p, o in sorted(
        missing.items(), key=lambda kv: -1 if kv[0] is None else kv[0])}
    last: dict[str, str] = {}
    polled: dict[tuple[str, int], tuple[int, int]] = {}  # (member, partition) -> (offset, t_ms)
    for op in history.ops:
        if isinstance(op, Rebalance):
            last[op.client] = f"{op.change} {sorted(p for _, p in op.partitions)} " \
                              f"at {op.t_ms or 0:.0f} ms"
        elif isinstance(op, Poll):
            for r in op.records:
                polled[(op.client, r.partition)] = (r.offset, round(op.t_ms or 0))
    faults = [f"{op.kind} {op.targets} at {op.t_ms or 0:.0f} ms" for op in history.ops
              if isinstance(op, Fault)]
    return f"unread by partition: {parts}\nlast rebalance of each member: {last}\n" \
           f"last read (offset, ms) by member and partition: {dict(sorted(polled.items()))}\n" \
           f"faults: {faults}\nconsumer and commit errors (last 10): {list(errors)[-10:]}"


def revoked_by(history: History, client: str, after: int) -> bool:
    return any(isinstance(op, Rebalance) and op.client == client and op.change == "revoked"
               for op in history.ops[after:])


def read_back(bootstrap: str, history: History) -> None:
    """A fresh reader of every partition from the start, until it has every acknowledged value:
    the final log, as the checker takes it."""
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": "read-back",
                       "enable.auto.commit": False}, history=history, name="read-back")
    reader.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen: set[bytes] = set()
    wanted = acked(history)
    deadline = time.monotonic() + STEP_S_MAX
    while not wanted <= seen and time.monotonic() < deadline:
        seen.update(m.value() for m in reader.consume(500, timeout=0.5) if not m.error())
    reader.close()
    assert wanted <= seen, f"the read-back missed {len(wanted - seen)} acknowledged values"


def test_docker_kill_of_the_coordinator_mid_rebalance_loses_nothing(
        epochlog_cluster: Callable[..., ComposeCluster], images: dict[str, str]) -> None:
    history = History()
    cluster = epochlog_cluster(target="compose", settings=SETTINGS,
                               on_fault=history.record_fault, images=images,
                               project="epochlog-test-group")
    assert isinstance(cluster, ComposeCluster)
    members: list[Member] = []
    try:
        env = cluster.project.inspect("controller")["Config"]["Env"]
        assert "EPOCHLOG_DEFAULT_MIN_INSYNC_REPLICAS=2" in env, env  # the override file
        cluster.create_topic(TOPIC, PARTITIONS, 3)
        victim = cluster.coordinator_of(GROUP)  # makes the offsets topic
        cluster.wait_fully_replicated(OFFSETS_TOPIC)
        bootstrap = cluster.bootstrap_servers
        read: set[bytes] = set()
        errors: deque[str] = deque(maxlen=100)  # the latest, for a failure's detail
        stop = threading.Event()
        producer = threading.Thread(target=produce, args=(bootstrap, history, stop),
                                    daemon=True)
        producer.start()
        try:
            members.append(Member(bootstrap, history, "member-a", read, errors))
            wait("member A to read", lambda: len(read) >= 200)
            mark = len(history.ops)
            members.append(Member(bootstrap, history, "member-b", read, errors))
            wait("member A to give up its partitions (the rebalance began)",
                 lambda: revoked_by(history, "member-a", mark))
            cluster.kill(victim)  # mid-rebalance

            members.append(Member(bootstrap, history, "member-c", read, errors))
            members[0].leave()
            def moved() -> int | None:  # right after the kill the brokers may still name it
                found = cluster.coordinator_of(GROUP, timeout_s=STEP_S_MAX)
                return found if found != victim else None

            successor = until(moved, f"the group's coordination to move off broker {victim}",
                              STEP_S_MAX)
            before = len(acked(history))
            wait("acknowledgements without the killed broker",
                 lambda: len(acked(history)) >= before + 300)

            cluster.restart(victim)  # docker start, with its volume's data
            for topic in (TOPIC, OFFSETS_TOPIC):
                state = cluster.wait_fully_replicated(topic, timeout_s=STEP_S_MAX)
                assert all(victim in p.isr_nodes for p in state.values()), state
        finally:
            stop.set()
            producer.join(FLUSH_S + 30)
        assert not producer.is_alive(), "the producer did not finish its flush"
        wait("the group to read every acknowledged value", lambda: acked(history) <= read,
             lambda: unread(history, read, errors))
        for member in members[1:]:
            member.leave()
        read_back(bootstrap, history)
    except BaseException:
        print(cluster.logs_tail())  # shown with the failure
        for member in members:
            print(f"--- {member.name}: {member.doing}; librdkafka's last {len(member.debug)} "
                  "lines (served by its polls)")
            print("\n".join(member.debug))
        raise

    verdict = check(history)
    sends = [op for op in history.ops if isinstance(op, Send)]
    assert verdict.ok and not verdict.anomalies, f"{verdict}\nerrors: {list(errors)[:10]}"
    assert sends and all(op.acked for op in sends), \
        [(op.value, op.error) for op in sends if not op.acked][:5]
    faults = [(op.kind, tuple(op.targets)) for op in history.ops if isinstance(op, Fault)]
    assert faults == [("kill", (victim,)), ("restart", (victim,))], faults
    rebalances = [op for op in history.ops if isinstance(op, Rebalance)]
    assert {op.client for op in rebalances} >= {"member-a", "member-b", "member-c"}
    print(f"\ncoordinator {victim} killed mid-rebalance, {successor} took over; "
          f"{len(sends)} sends, {len(rebalances)} rebalance events: {verdict}")
