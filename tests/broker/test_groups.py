"""The group coordinator on real broker processes (3 brokers, `__consumer_offsets` of 5 partitions).

- Raw requests: committed leader epochs (OffsetCommit v6+) come back from OffsetFetch v5+, and
  not from older versions; all-partitions OffsetFetch; simple-consumer commits (generation -1);
  errors for a broker that is not the coordinator and for unknown partitions; ListGroups and
  DescribeGroups.
- A member SIGKILLed (a kafka-python consumer in its own process) is expelled after its session
  timeout, and the survivor gets every partition.
- A static member (confluent-kafka, group.instance.id) that restarts rejoins without a rebalance.
- Coordinator failover: the broker leading the group's offsets partition is SIGKILLed while a
  group is stable and committing; the group carries on with the new coordinator and the committed
  offsets are there with their leader epochs; nothing is lost.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_groups import DescribeGroupsRequest
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest
from epochlog.protocol.apis.list_groups import ListGroupsRequest
from epochlog.protocol.apis.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from epochlog.protocol.apis.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from epochlog.protocol.error_codes import ErrorCode as E
from tests.broker.cluster import WAIT_S, BrokerChild, Cluster

confluent = pytest.importorskip("confluent_kafka")

BROKER_ARGS = ("--set", "offsets_topic_num_partitions=5",
               "--set", "group_initial_rebalance_delay_ms=0",
               "--set", "group_min_session_timeout_ms=1000")
SESSION_MS = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(tmp_path_factory.mktemp("groups"), brokers=3, broker_args=BROKER_ARGS) as c:
        yield c


def until(what: str, done: Callable[[], bool], step: Callable[[], Any] = lambda: time.sleep(0.1),
          timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        step()


def coordinator(cluster: Cluster, group: str) -> BrokerChild:
    """The coordinator FindCoordinator names (retrying while it is not available)."""
    found: list[int] = []

    def ask() -> bool:
        answer = cluster.any_broker().call(ApiKey.FIND_COORDINATOR,
                                           FindCoordinatorRequest(coordinator_keys=[group]))
        c = answer.coordinators[0]
        if c.error_code == 0 and cluster.brokers[c.node_id].alive:
            found.append(c.node_id)
            return True
        assert c.error_code in (0, E.COORDINATOR_NOT_AVAILABLE), c
        return False

    until(f"a coordinator for {group}", ask)
    return cluster.brokers[found[-1]]


def commit(broker: BrokerChild, group: str, topic: str, offsets: dict[int, tuple[int, int]],
           version: int | None = None, generation: int = -1, member: str = "") -> dict[int, int]:
    answer = broker.call(ApiKey.OFFSET_COMMIT, OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=generation, member_id=member,
        topics=[OffsetCommitRequestTopic(name=topic, partitions=[
            OffsetCommitRequestPartition(partition_index=p, committed_offset=o,
                                         committed_leader_epoch=e, committed_metadata="m")
            for p, (o, e) in offsets.items()])]), version)
    return {p.partition_index: p.error_code for t in answer.topics for p in t.partitions}


def fetch(broker: BrokerChild, group: str, topic: str | None, partitions: list[int] = (),
          version: int | None = None) -> tuple[int, dict[tuple[str, int], tuple[int, int]]]:
    topics = None if topic is None else [OffsetFetchRequestTopic(name=topic,
                                                                 partition_indexes=partitions)]
    answer = broker.call(ApiKey.OFFSET_FETCH, OffsetFetchRequest(group_id=group, topics=topics),
                         version)
    return answer.error_code, {(t.name, p.partition_index): (p.committed_offset,
                                                             p.committed_leader_epoch)
                               for t in answer.topics for p in t.partitions}


def describe(broker: BrokerChild, group: str) -> Any:
    return broker.call(ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(groups=[group])).groups[0]


def test_committed_leader_epochs_come_back_from_offset_fetch(cluster: Cluster) -> None:
    cluster.create_topic("raw", partitions=2, replication_factor=3)
    coord = coordinator(cluster, "raw-group")
    assert commit(coord, "raw-group", "raw", {0: (5, 3), 1: (9, -1)}) == {0: 0, 1: 0}
    error, got = fetch(coord, "raw-group", "raw", [0, 1])
    assert error == 0 and got == {("raw", 0): (5, 3), ("raw", 1): (9, -1)}
    _, old = fetch(coord, "raw-group", "raw", [0], version=4)  # before KIP-320's field
    assert old == {("raw", 0): (5, -1)}
    assert commit(coord, "raw-group", "raw", {0: (6, 4)}, version=5) == {0: 0}  # no epoch field
    _, all_of_it = fetch(coord, "raw-group", None)
    assert all_of_it == {("raw", 0): (6, -1), ("raw", 1): (9, -1)}
    _, none = fetch(coord, "raw-group", "raw", [7])
    assert none == {("raw", 7): (-1, -1)}
    assert commit(coord, "raw-group", "no-such-topic", {0: (1, 1)}) == \
        {0: E.UNKNOWN_TOPIC_OR_PARTITION}
    other = next(b for b in cluster.brokers.values() if b is not coord)
    assert commit(other, "raw-group", "raw", {0: (1, 1)}) == {0: E.NOT_COORDINATOR}
    assert fetch(other, "raw-group", "raw", [0])[0] == E.NOT_COORDINATOR
    listed = coord.call(ApiKey.LIST_GROUPS, ListGroupsRequest())
    assert ("raw-group", "Empty") in {(g.group_id, g.group_state) for g in listed.groups}
    described = describe(coord, "raw-group")
    assert (described.error_code, described.group_state, described.members) == (0, "Empty", [])
    assert describe(coord, "never-seen").group_state == "Dead"


MEMBER_SCRIPT = textwrap.dedent("""
    import sys
    from kafka import KafkaConsumer
    c = KafkaConsumer(sys.argv[2], bootstrap_servers=sys.argv[1], group_id=sys.argv[3],
                      session_timeout_ms=int(sys.argv[4]), heartbeat_interval_ms=300,
                      auto_offset_reset="earliest")
    while True:
        c.poll(timeout_ms=200)
        if c.assignment():
            print("assigned", sorted(tp.partition for tp in c.assignment()), flush=True)
""")


def test_a_killed_member_is_expelled_after_its_session_timeout(cluster: Cluster,
                                                               tmp_path: Path) -> None:
    topic, group = "expel", "expel-group"
    cluster.create_topic(topic, partitions=4, replication_factor=3)
    script = tmp_path / "member.py"
    script.write_text(MEMBER_SCRIPT)
    other = subprocess.Popen([sys.executable, str(script), cluster.bootstrap, topic, group,
                              str(SESSION_MS)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    survivor = confluent.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                                   "session.timeout.ms": 6000, "heartbeat.interval.ms": 300})
    try:
        survivor.subscribe([topic])
        coord = coordinator(cluster, group)

        def two_stable() -> bool:
            d = describe(coord, group)
            return d.group_state == "Stable" and len(d.members) == 2 and \
                len(survivor.assignment()) == 2

        until("both members in a stable group", two_stable, lambda: survivor.poll(0.1))
        other.send_signal(signal.SIGKILL)
        other.wait(WAIT_S)
        killed_at = time.monotonic()

        def alone() -> bool:
            d = describe(coord, group)
            return d.group_state == "Stable" and len(d.members) == 1 and \
                len(survivor.assignment()) == 4

        until("the killed member to be expelled", alone, lambda: survivor.poll(0.1))
        # Expelled by its session timeout, not before (no LeaveGroup came from a SIGKILL).
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 * 0.9
        assert coord.wait_line(rf"group {group}: member .* session expired: removed")
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
        survivor.close()


def test_a_static_member_rejoins_without_a_rebalance(cluster: Cluster) -> None:
    topic, group = "static", "static-group"
    cluster.create_topic(topic, partitions=2, replication_factor=3)
    config = {"bootstrap.servers": cluster.bootstrap, "group.id": group,
              "group.instance.id": "instance-1", "session.timeout.ms": 6000,
              "heartbeat.interval.ms": 300}

    def joined(consumer: Any) -> None:
        consumer.subscribe([topic])
        until("an assignment", lambda: len(consumer.assignment()) == 2,
              lambda: consumer.poll(0.1))

    first = confluent.Consumer(config)
    joined(first)
    coord = coordinator(cluster, group)
    before = len(coord.lines)
    first.close()  # a static member does not leave on close (KIP-345)
    second = confluent.Consumer(config)
    try:
        joined(second)
        coord.wait_line(rf"group {group}: static member instance-1 rejoined", before)
        assert not coord.has_line(f"group {group}: Stable -> PreparingRebalance", before)
        d = describe(coord, group)
        assert d.group_state == "Stable" and [m.group_instance_id for m in d.members] == \
            ["instance-1"]
    finally:
        second.close()


def test_coordinator_failover_keeps_the_group_and_its_committed_epochs(tmp_path: Path) -> None:
    topic, group, total = "failover", "failover-group", 400
    with Cluster(tmp_path, brokers=3, broker_args=BROKER_ARGS) as c:
        c.create_topic(topic, partitions=3, replication_factor=3)
        producer = confluent.Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(total):
            producer.produce(topic, value=str(i).encode(), key=str(i).encode())
        assert producer.flush(WAIT_S) == 0
        consumer = confluent.Consumer({
            "bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300})
        consumer.subscribe([topic])
        seen: list[bytes] = []
        try:
            def read(n: int) -> None:
                until(f"{n} records", lambda: len(seen) >= n, lambda: seen.extend(
                    m.value() for m in consumer.consume(50, 0.1) if m.error() is None))
                consumer.commit(asynchronous=False)

            read(total // 2)
            old = coordinator(c, group)
            _, before = fetch(old, group, topic, [0, 1, 2])
            epochs = {p: e for p, (_, e) in c.leaders(topic).items()}
            read_from = {p: e for (_, p), (o, e) in before.items() if o > 0}
            assert read_from and read_from == {p: epochs[p] for p in read_from}, \
                "librdkafka commits the leader epoch of what it read"
            old.stop(signal.SIGKILL)
            new = coordinator(c, group)
            assert new is not old
            # Named from some broker's metadata, it may not have loaded the group yet.
            until("the new coordinator to have loaded the group",
                  lambda: fetch(new, group, topic, [0])[0] == 0)
            _, after = fetch(new, group, topic, [0, 1, 2])
            assert after == before  # offsets and epochs replicated before they were answered
            read(total)  # the group goes on with the new coordinator
            assert sorted(int(v) for v in seen) == list(range(total))
            assert describe(new, group).group_state == "Stable"
            _, last = fetch(new, group, topic, [0, 1, 2])
            assert sum(o for o, _ in last.values()) == total
        finally:
            consumer.close()
