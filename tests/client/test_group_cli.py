"""`epochlog consume TOPIC --group G` processes as group members, against real broker processes.

What is checked, and why:
- SIGKILL: after its session timeout (not before) the survivors take the killed member's
  partitions and start each at its last committed offset: records after that commit are read
  twice, none is lost;
- SIGTERM: the member commits and leaves (exit 130, as produce's interrupted end), so the
  survivors rebalance at once (well before the session timeout) and no record is read twice;
- SIGSTOP: the stopped member (no heartbeats) is expelled after the session timeout; on SIGCONT
  it finds itself out, reports its partitions lost and rejoins;
- static membership: a member killed and restarted with the same --group-instance-id within the
  session timeout gets its partitions back without a rebalance (no new generation anywhere); a
  second live process with the same instance id is fenced (FENCED_INSTANCE_ID, exit 1);
- as a user types it: two processes print every record once between them, --max-messages and
  --timeout-ms end them with exit 0, and a later run of the group prints nothing old.

Each process's client_id (--consumer-property) names it in DescribeGroups, which tells who owns
what; its stdout lines (--print-offset) tell what it read, and when.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from epochlog.client import Producer
from epochlog.client.console import EXIT_INTERRUPTED
from epochlog.client.consumer_protocol import decode_assignment
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_groups import DescribeGroupsRequest
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest
from epochlog.protocol.apis.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from tests.broker.cluster import Cluster

BROKER_ARGS = ("--set", "offsets_topic_num_partitions=3",
               "--set", "group_initial_rebalance_delay_ms=0",
               "--set", "group_min_session_timeout_ms=1000")
WAIT_S = 30.0
LINE = re.compile(rb"^(\d+):(\d+):(.*)$")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("group-cli"), brokers=2, broker_args=BROKER_ARGS) as c:
        yield c


def until(what: str, done: Callable[[], bool], timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


class Member:
    """One `epochlog consume --group` process; threads collect its stdout records (with the
    time each arrived) and its stderr lines."""

    def __init__(self, cluster: Cluster, name: str, topic: str, group: str, *extra: str,
                 session_ms: int = 3000, commit_ms: int = 200) -> None:
        self.name = name
        self.args = [sys.executable, "-m", "epochlog", "consume", topic, "--group", group,
                     "--print-offset", "--from-beginning", "--log-level", "INFO",
                     "--bootstrap-server", cluster.bootstrap,
                     "--consumer-property", f"client_id={name}",
                     "--consumer-property", f"session_timeout_ms={session_ms}",
                     "--consumer-property", f"heartbeat_interval_ms={max(100, session_ms // 10)}",
                     "--consumer-property", f"auto_commit_interval_ms={commit_ms}", *extra]
        self.records: list[tuple[float, int, int, bytes]] = []  # (time, partition, offset, value)
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._threads = [threading.Thread(target=self._read_out, daemon=True),
                         threading.Thread(target=self._read_err, daemon=True)]
        for t in self._threads:
            t.start()

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            found = LINE.match(raw.rstrip(b"\n"))
            assert found, raw
            with self.lock:
                self.records.append((time.monotonic(), int(found[1]), int(found[2]), found[3]))

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            with self.lock:
                self.errors.append(raw.decode(errors="replace").rstrip())

    def values(self) -> list[bytes]:
        with self.lock:
            return [v for _, _, _, v in self.records]

    def read(self, since: float = 0.0) -> list[tuple[int, int]]:
        with self.lock:
            return [(p, o) for t, p, o, _ in self.records if t >= since]

    def log_has(self, pattern: str) -> bool:
        with self.lock:
            return any(re.search(pattern, line) for line in self.errors)

    def generations(self) -> list[int]:
        with self.lock:
            return [int(m[1]) for line in self.errors
                    if (m := re.search(r": generation (\d+) \(", line))]

    def wait(self, timeout_s: float = WAIT_S) -> int:
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"{self.name} did not exit:\n" + self.stderr()) from None
        for t in self._threads:
            t.join(timeout_s)
        return rc

    def stderr(self) -> str:
        with self.lock:
            return "\n".join(self.errors[-40:])

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()


def coordinator(cluster: Cluster, group: str) -> Any:
    found: list[int] = []

    def ask() -> bool:
        c = cluster.any_broker().call(ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(
            key_type=0, coordinator_keys=[group])).coordinators[0]
        if c.error_code == 0:
            found.append(c.node_id)
        return c.error_code == 0

    until(f"the coordinator of {group}", ask)
    return cluster.brokers[found[-1]]


def owners(cluster: Cluster, group: str) -> tuple[str, dict[str, set[int]]]:
    """The group's state and each member's partitions, by client id (DescribeGroups)."""
    g = coordinator(cluster, group).call(ApiKey.DESCRIBE_GROUPS,
                                         DescribeGroupsRequest(groups=[group])).groups[0]
    return g.group_state, {m.client_id: {tp.partition for tp in decode_assignment(
        m.member_assignment).partitions} for m in g.members}


def settled(cluster: Cluster, group: str, names: set[str], partitions: int) -> bool:
    state, by = owners(cluster, group)
    parts = [p for owned in by.values() for p in owned]
    return (state == "Stable" and set(by) == names and all(by.values())
            and sorted(parts) == list(range(partitions)))


def committed(cluster: Cluster, group: str, topic: str, partitions: int) -> dict[int, int]:
    answer = coordinator(cluster, group).call(ApiKey.OFFSET_FETCH, OffsetFetchRequest(
        group_id=group, topics=[OffsetFetchRequestTopic(
            name=topic, partition_indexes=list(range(partitions)))]))
    return {p.partition_index: p.committed_offset for t in answer.topics for p in t.partitions}


class Feed:
    """Produces records to every partition in a thread until stopped; values are unique."""

    def __init__(self, cluster: Cluster, topic: str, partitions: int, per_round: int = 12,
                 pause_s: float = 0.05, prefix: str = "") -> None:
        self.cluster, self.topic, self.partitions = cluster, topic, partitions
        self.per_round, self.pause_s, self.prefix = per_round, pause_s, prefix
        self.sent: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self._thread.start()

    async def _run(self) -> None:
        async with Producer(self.cluster.bootstrap, linger_ms=1) as p:
            while not self._stop.is_set():
                values = [f"{self.prefix}{len(self.sent) + i}".encode()
                          for i in range(self.per_round)]
                await asyncio.gather(*(
                    p.send_and_wait(self.topic, value=v, partition=i % self.partitions)
                    for i, v in enumerate(values)))
                self.sent += values
                await asyncio.sleep(self.pause_s)

    def stop(self) -> list[bytes]:
        self._stop.set()
        self._thread.join(WAIT_S)
        assert not self._thread.is_alive()
        return self.sent


def produce(cluster: Cluster, topic: str, partitions: int, values: list[bytes]) -> None:
    async def go() -> None:
        async with Producer(cluster.bootstrap, linger_ms=1) as p:
            await asyncio.gather(*(p.send_and_wait(topic, value=v, partition=i % partitions)
                                   for i, v in enumerate(values)))
    asyncio.run(go())


def all_read(members: list[Member], sent: list[bytes]) -> Callable[[], bool]:
    return lambda: set(sent) <= {v for m in members for v in m.values()}


# ------------------------------------------------------------------------------------- tests
def test_a_killed_member_is_replaced_from_its_last_commit(cluster: Cluster) -> None:
    topic, group, n = "cli-kill", "g-cli-kill", 6
    cluster.create_topic(topic, partitions=n)
    members = [Member(cluster, name, topic, group) for name in ("a", "b", "c")]
    feed = Feed(cluster, topic, n)
    try:
        until("three members share the partitions",
              lambda: settled(cluster, group, {"a", "b", "c"}, n))
        _, by = owners(cluster, group)
        victim = members[2]
        time.sleep(1.0)  # records flow; auto-commits every 200 ms
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        killed_at = time.monotonic()
        time.sleep(0.3)  # a commit already on the wire lands
        last = committed(cluster, group, topic, n)
        until("the survivors take the partitions",
              lambda: settled(cluster, group, {"a", "b"}, n), timeout_s=WAIT_S)
        took = time.monotonic() - killed_at
        assert took >= 3.0 * 0.8, f"replaced after {took:.2f}s, before the session timeout"
        sent = feed.stop()
        until("every record read", all_read(members, sent))
        victim_read = set(victim.read())
        after = [pair for m in members[:2] for pair in m.read(since=killed_at)]
        assert all(last[p] > 0 for p in by["c"]), last  # it had committed
        for p in sorted(by["c"]):
            taken = sorted(o for q, o in after if q == p)
            assert taken and taken[0] == last[p], (p, taken[:3], last[p])  # its last commit
            assert all(o >= last[p] for q, o in victim_read if q == p and (q, o) in after)
        values = [v for m in members for v in m.values()]
        assert set(values) == set(sent)
        counts: dict[tuple[int, int], int] = {}
        for m in members:
            for pair in m.read():
                counts[pair] = counts.get(pair, 0) + 1
        twice = {pair for pair, k in counts.items() if k > 1}
        assert all(p in by["c"] and o >= last[p] for p, o in twice), sorted(twice)[:10]
        for m in members[:2]:
            m.proc.send_signal(signal.SIGTERM)
            assert m.wait() == EXIT_INTERRUPTED, m.stderr()
    finally:
        feed.stop()
        for m in members:
            m.kill()


def test_sigterm_leaves_at_once_without_duplicates(cluster: Cluster) -> None:
    topic, group, n = "cli-term", "g-cli-term", 4
    cluster.create_topic(topic, partitions=n)
    # A session far longer than WAIT_S: the survivor can only take everything within WAIT_S
    # because the stopped member left (LeaveGroup), not because its session expired
    members = [Member(cluster, name, topic, group, session_ms=120_000) for name in ("a", "b")]
    feed = Feed(cluster, topic, n)
    try:
        until("two members share the partitions", lambda: settled(cluster, group, {"a", "b"}, n))
        time.sleep(0.7)
        members[1].proc.send_signal(signal.SIGTERM)
        until("the survivor takes every partition (b left)",
              lambda: settled(cluster, group, {"a"}, n))
        assert members[1].wait() == EXIT_INTERRUPTED, members[1].stderr()
        sent = feed.stop()
        until("every record read", all_read(members, sent))
        read = [pair for m in members for pair in m.read()]
        assert len(read) == len(set(read)) == len(sent), (len(read), len(set(read)), len(sent))
        members[0].proc.send_signal(signal.SIGINT)
        assert members[0].wait() == EXIT_INTERRUPTED, members[0].stderr()
    finally:
        feed.stop()
        for m in members:
            m.kill()


def test_a_stopped_member_is_expelled_and_rejoins(cluster: Cluster) -> None:
    topic, group, n = "cli-stop", "g-cli-stop", 4
    cluster.create_topic(topic, partitions=n)
    members = [Member(cluster, name, topic, group, session_ms=2000) for name in ("a", "b")]
    feed = Feed(cluster, topic, n, per_round=4, pause_s=0.1)
    try:
        until("two members share the partitions", lambda: settled(cluster, group, {"a", "b"}, n))
        stopped = members[1]
        stopped.proc.send_signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        until("the other member takes every partition",
              lambda: settled(cluster, group, {"a"}, n))
        took = time.monotonic() - stopped_at
        assert took >= 2.0 * 0.8, f"expelled after {took:.2f}s, before the session timeout"
        stopped.proc.send_signal(signal.SIGCONT)
        until("it rejoins", lambda: settled(cluster, group, {"a", "b"}, n))
        until("it reports its partitions lost",
              lambda: stopped.log_has(r"partitions lost with the generation"))
        assert stopped.log_has(r"UNKNOWN_MEMBER_ID|ILLEGAL_GENERATION"), stopped.stderr()
        sent = feed.stop()
        until("every record read", all_read(members, sent))
        for m in members:
            m.proc.send_signal(signal.SIGTERM)
            assert m.wait() == EXIT_INTERRUPTED, m.stderr()
    finally:
        feed.stop()
        for m in members:
            m.kill()


def test_static_member_restart_and_fencing(cluster: Cluster) -> None:
    topic, group, n = "cli-static", "g-cli-static", 4
    cluster.create_topic(topic, partitions=n)
    a = Member(cluster, "a", topic, group, "--group-instance-id", "static-a", session_ms=30_000)
    b = Member(cluster, "b", topic, group, "--group-instance-id", "static-b", session_ms=30_000)
    started = [a, b]
    feed = Feed(cluster, topic, n, per_round=4, pause_s=0.1)
    try:
        until("two static members", lambda: settled(cluster, group, {"a", "b"}, n))
        until("both in one generation", lambda: bool(a.generations()) and bool(b.generations())
              and a.generations()[-1] == b.generations()[-1])
        generation = b.generations()[-1]
        b_rounds = len(b.generations())
        _, before = owners(cluster, group)
        time.sleep(0.5)
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait()
        last = committed(cluster, group, topic, n)
        again = Member(cluster, "a", topic, group, "--group-instance-id", "static-a",
                       session_ms=30_000)
        started.append(again)
        until("the restarted member is given its partitions",
              lambda: bool(again.generations()))
        # the same generation: it came back within its session, with no expiry in between
        assert again.generations() == [generation], again.stderr()
        assert owners(cluster, group) == ("Stable", before)
        until("the restarted member reads all its partitions", lambda: all(
            any(q == p for q, _ in again.read()) for p in before["a"]))
        first = {p: min(o for q, o in again.read() if q == p) for p in before["a"]}
        assert all(first[p] == last[p] for p in before["a"]), (first, last)
        time.sleep(0.5)
        assert len(b.generations()) == b_rounds, b.stderr()  # b saw no rebalance

        # The same instance id twice at once: one of the two is fenced and exits 1.
        twin = Member(cluster, "twin", topic, group, "--group-instance-id", "static-a",
                      session_ms=30_000)
        started.append(twin)
        until("one of them exits", lambda: again.proc.poll() is not None
              or twin.proc.poll() is not None)
        fenced = again if again.proc.poll() is not None else twin
        assert fenced.wait() == 1
        assert fenced.log_has(r"^epochlog: .*FENCED_INSTANCE_ID"), fenced.stderr()
        assert not fenced.log_has("Traceback"), fenced.stderr()
        sent = feed.stop()
        until("every record read", all_read(started, sent))
    finally:
        feed.stop()
        for m in started:
            m.kill()


def test_consume_group_as_a_user_types_it(cluster: Cluster) -> None:
    topic, group, n = "cli-user", "g-cli-user", 4
    cluster.create_topic(topic, partitions=n)

    def run(*extra: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "epochlog", "consume", topic, "--group",
                                 group, "--from-beginning", "--bootstrap-server",
                                 cluster.bootstrap, *extra], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)

    # A member that joined alone learns of the second one at its next heartbeat: 0.5 s. The
    # members' idle timeout counts from their latest rebalance, so the wait for the group to
    # settle may be long (two interpreters starting on a busy machine); the records must then
    # come within the idle timeout of the settled rebalance: 10 s leaves room for a slow
    # produce (4 s did not, once, at a load of 10).
    both = [run("--timeout-ms", "10000", "--consumer-property", f"client_id=user-{i}",
                "--consumer-property", "heartbeat_interval_ms=500") for i in (1, 2)]
    until("both processes in the group",
          lambda: settled(cluster, group, {"user-1", "user-2"}, n), timeout_s=WAIT_S)
    first = [b"first %d" % i for i in range(200)]
    produce(cluster, topic, n, first)
    outs = [p.communicate(timeout=WAIT_S) for p in both]
    assert [p.returncode for p in both] == [0, 0], [err for _, err in outs]
    lines = [line for out, _ in outs for line in out.splitlines()]
    assert sorted(lines) == sorted(first), (len(lines), len(set(lines)))
    assert all(out for out, _ in outs), "both members read records"

    second = [b"second %d" % i for i in range(40)]
    produce(cluster, topic, n, second)
    limited = run("--max-messages", "10")
    out, err = limited.communicate(timeout=WAIT_S)
    assert limited.returncode == 0, err
    assert len(out.splitlines()) == 10 and set(out.splitlines()) <= set(second), out
    rest = run("--timeout-ms", "2000")
    out2, err2 = rest.communicate(timeout=WAIT_S)
    assert rest.returncode == 0, err2
    assert sorted(out.splitlines() + out2.splitlines()) == sorted(second)  # nothing old, once
    idle = run("--timeout-ms", "1500")
    out3, _ = idle.communicate(timeout=WAIT_S)
    assert idle.returncode == 0 and out3 == b""
    bad = run("--consumer-property", "no_such_setting=1")
    _, err4 = bad.communicate(timeout=WAIT_S)
    assert bad.returncode == 1 and b"Consumer has no setting no_such_setting" in err4, err4
