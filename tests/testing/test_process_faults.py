"""The harness's process faults happen for real, through the `epochlog_cluster` fixture.

A killed process's pid is gone when kill() returns; a paused one is in the kernel's state T
until resumed; a stopped broker did a controlled shutdown (exit 0, the clean-shutdown marker);
a restarted one comes back on its own data; the controller is a node like the others; every
fault reaches the recorder, in order, as it happened.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from epochlog.testing import Cluster, until
from epochlog.testing.processes import process_state
from epochlog.testing.traffic import read_back as read_all

WAIT_S = 60.0


def produce(bootstrap: str, topic: str, count: int, start: int = 0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": int(WAIT_S * 1000)})
    for i in range(start, start + count):
        producer.produce(topic, value=b"%d" % i, partition=i % 3)
    assert producer.flush(WAIT_S) == 0


def gone(pid: int) -> bool:
    return process_state(pid) == ""


def test_kill_pause_resume_stop_and_restart_really_happen(
        epochlog_cluster: Callable[..., Cluster]) -> None:
    faults: list[tuple[str, tuple[Any, ...], str]] = []
    c = epochlog_cluster(brokers=3, racks="abc", settings={"min.insync.replicas": 2},
                         on_fault=lambda kind, targets, detail: faults.append(
                             (kind, targets, detail)))
    assert [row.rack for row in c.status() if row.role == "broker"] == ["a", "b", "c"]
    c.create_topic("orders", partitions=3, replication_factor=3)
    assert all(b.has_line("orders: settings") and b.has_line("min.insync.replicas=2")
               for b in c.brokers.values()), "the setting did not reach the topic"
    produce(c.bootstrap_servers, "orders", 300)

    leader = c.leader_of("orders", 0)
    pid = c.pid(leader)
    assert pid is not None and not gone(pid)
    c.kill(leader)
    assert gone(pid), "a killed broker's pid is still there"
    assert c.node(leader).state() == "killed"
    assert until(lambda: c.leader_of("orders", 0) != leader, "a new leader", WAIT_S)

    paused = next(b for b in c.brokers if b != leader)
    c.pause(paused)
    paused_pid = c.pid(paused)
    assert paused_pid is not None and process_state(paused_pid) == "T"
    assert c.node(paused).state() == "paused"
    c.resume(paused)
    assert process_state(paused_pid) not in ("T", "")

    stopped = next(b for b in c.brokers if b not in (leader, paused))
    stopped_pid = c.pid(stopped)
    assert c.stop(stopped) == 0
    assert stopped_pid is not None and gone(stopped_pid)
    assert (c.node(stopped).data_dir / ".kafka_cleanshutdown").exists()
    assert c.node(stopped).has_line("controlled shutdown")

    with pytest.raises(KeyError, match="brokers are \\[1, 2, 3\\]"):
        c.kill(7)

    c.restart(leader)  # after a kill
    c.restart(stopped)  # after a stop
    c.restart(paused)  # while running: stopped first, then started
    c.wait_fully_replicated("orders", timeout_s=WAIT_S)
    records = read_all(c.bootstrap_servers, "orders", 3)
    assert sorted(int(v) for p in records.values() for _, v in p) == list(range(300))

    assert [(kind, targets) for kind, targets, _ in faults] == [
        ("kill", (leader,)), ("pause", (paused,)), ("resume", (paused,)),
        ("stop", (stopped,)), ("restart", (leader,)), ("restart", (stopped,)),
        ("restart", (paused,))]
    assert f"SIGKILL to pid {pid}" in faults[0][2]


def test_the_controller_is_a_node_like_the_others(epochlog_cluster: Callable[..., Cluster]
                                                 ) -> None:
    c = epochlog_cluster(brokers=2)
    c.create_topic("before", partitions=1, replication_factor=2)
    epoch = c.node(c.controller).epoch
    pid = c.pid(c.controller)
    assert pid is not None
    c.kill(c.controller)
    assert gone(pid) and c.node("controller").state() == "killed"
    assert c.restart(c.controller) > epoch
    c.create_topic("after", partitions=2, replication_factor=2)
    assert c.leader_of("after", 1) in (1, 2)


def test_the_coordinator_of_a_group_can_be_killed(epochlog_cluster: Callable[..., Cluster]
                                                  ) -> None:
    c = epochlog_cluster(brokers=3, settings={"offsets.topic.num.partitions": 3})
    first = c.coordinator_of("my-group")
    assert first in c.brokers
    c.kill(first)
    second = until(lambda: (n := c.coordinator_of("my-group")) != first and n,
                   "another coordinator", WAIT_S)
    assert second in c.brokers and c.node(second).state() == "running"


def test_several_clusters_in_one_test_each_with_its_own_data(
        epochlog_cluster: Callable[..., Cluster]) -> None:
    one, two = epochlog_cluster(brokers=1), epochlog_cluster(brokers=1)
    assert one.bootstrap_servers != two.bootstrap_servers
    assert one.base_dir != two.base_dir and os.path.isdir(two.base_dir / "broker-1")
    one.create_topic("only-in-one")
    assert "only-in-one" in {t.name for t in one.metadata().topics}
    assert "only-in-one" not in {t.name for t in two.metadata().topics}
