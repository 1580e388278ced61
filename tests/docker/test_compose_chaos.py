"""A compose cluster broken the engine's way (epochlog.testing's ComposeCluster) under an
idempotent acks=all producer on the host (issue 15; guarantees 1, 2 and 5 of docs/design.md).
Each test ends with the cluster quiet (every partition led, every ISR holding all three brokers,
every replica's `epochlog dump-log` equal) and every acknowledged record read back
(tests/docker/workload.py).

- `kill` (docker kill) of the leader of a partition: the others elect, the producer goes on;
  `restart` (docker start) brings the broker back and it rejoins the ISR. Then `crash` (the
  container's process SIGKILLed from the host): `restart: unless-stopped` brings it back itself.
- `partition` of one broker (a leader) from the controller and the other brokers, while clients
  on the host still reach it: the controller ends its generation when its session expires and
  the others elect; a record sent to it alone during the cut is never acknowledged; after `heal`
  it is told its generation is over, stops leading, registers again, truncates that record
  away by leader epoch and catches up.
- A rolling restart, one broker at a time (`restart`: docker stop, a controlled shutdown, then
  docker start): not one error reaches the application.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Producer

from epochlog.testing.compose_cluster import ComposeCluster
from epochlog.testing.requests import until
from epochlog.testing.traffic import read_back as read_all

from .compose import BROKER_IDS, compose_cluster, wait_log, wait_quiet
from .workload import Workload

PARTITIONS = 3
ELECTED_S_MAX = 90.0


def setup(cluster: ComposeCluster, topic: str) -> None:
    cluster.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": 2})


def partitions_via(cluster: ComposeCluster, topic: str, broker: int) -> dict[int, Any]:
    """partition -> its Metadata entry, as one broker has it."""
    return {p.partition_index: p for t in cluster.metadata([topic], broker=broker).topics
            for p in t.partitions}


def wait_without(cluster: ComposeCluster, topic: str, gone: int, via: int) -> dict[int, Any]:
    """Until every partition is led by another broker and `gone` is out of every ISR, as
    broker `via` says."""
    def elected() -> dict[int, Any] | None:
        found = partitions_via(cluster, topic, via)
        ok = len(found) == PARTITIONS and all(
            p.leader_id not in (-1, gone) and gone not in p.isr_nodes for p in found.values())
        return found if ok else None
    return until(elected, f"{topic} led without broker {gone}", ELECTED_S_MAX, interval_s=0.5)


def other_than(broker: int) -> int:
    return next(b for b in BROKER_IDS if b != broker)


def test_docker_kill_and_crash_of_leaders_lose_nothing(images: dict[str, str]) -> None:
    topic = "killed"
    with compose_cluster(images, "kill") as cluster:
        setup(cluster, topic)
        with Workload(cluster.bootstrap_servers, topic, PARTITIONS) as work:
            work.wait_acked(300)
            victim = cluster.leader_of(topic, 0)
            cluster.kill(victim)
            wait_without(cluster, topic, victim, other_than(victim))
            work.wait_acked(300)  # the application goes on without it
            assert cluster.engine_state(victim) == "exited"  # docker kill: not restarted
            cluster.restart(victim)
            cluster.wait_fully_replicated(topic)  # it rejoined the ISR

            cluster.crash(cluster.leader_of(topic, 1))  # the engine restarts it
            work.wait_acked(300)
        wait_quiet(cluster, topic, PARTITIONS)
        work.check(read_all(cluster.bootstrap_servers, topic, PARTITIONS))


def test_network_cut_broker_is_fenced_then_truncates_and_catches_up(
        images: dict[str, str]) -> None:
    topic = "cut"
    with compose_cluster(images, "cut") as cluster:
        setup(cluster, topic)
        with Workload(cluster.bootstrap_servers, topic, PARTITIONS) as work:
            work.wait_acked(300)
            victim = cluster.leader_of(topic, 0)
            survivor = other_than(victim)
            epoch_before = cluster.partitions(topic)[0].leader_epoch
            mark = len(cluster.logs(victim).splitlines())
            cluster.partition({victim}, {"controller", *(set(BROKER_IDS) - {victim})})

            # A record only the cut-off leader gets: it appends it and can never commit it.
            probe = Producer({"bootstrap.servers": f"localhost:{cluster.ports[victim]}",
                              "acks": "all", "message.timeout.ms": 5000})
            outcome: list[object] = []
            probe.produce(topic, value=b"probe", partition=0,
                          on_delivery=lambda err, _msg: outcome.append(err))
            probe.flush(30)
            del probe  # it would go on reconnecting to the port after the cluster is gone
            assert outcome and outcome[0] is not None, f"the probe was acknowledged: {outcome}"

            # Fenced: the controller ends its generation when its session expires and the
            # others elect, with a higher leader epoch, ISRs without it.
            wait_log(cluster, "controller", rf"broker {victim} generation \d+: session expired")
            after = wait_without(cluster, topic, victim, survivor)
            assert after[0].leader_epoch > epoch_before, after[0]
            work.wait_acked(300)  # the application goes on with the other two
            cluster.heal()
            # Like a Kafka broker, it learns only from the controller, once healed, that its
            # generation is over: then it stops leading and registers again.
            wait_log(cluster, victim, r"\(session expired\); stop leading", start=mark)
            cluster.wait_fully_replicated(topic, timeout_s=90)
            work.wait_acked(300)
        wait_quiet(cluster, topic, PARTITIONS)
        truncated = wait_log(cluster, victim, rf"{topic}-0: truncated from offset", start=mark)
        print(f"\nbroker {victim}: {truncated}")
        got = read_all(cluster.bootstrap_servers, topic, PARTITIONS)
        work.check(got)
        assert all(value != b"probe" for _, value in got[0])


def test_rolling_restart_surfaces_no_error_to_an_acks_all_producer(
        images: dict[str, str]) -> None:
    topic = "rolling"
    with compose_cluster(images, "rolling") as cluster:
        setup(cluster, topic)
        with Workload(cluster.bootstrap_servers, topic, PARTITIONS) as work:
            work.wait_acked(300)
            for broker in BROKER_IDS:
                cluster.restart(broker)  # docker stop (a controlled shutdown), docker start
                cluster.wait_fully_replicated(topic, timeout_s=90)
                work.wait_acked(200)
        wait_quiet(cluster, topic, PARTITIONS)
        work.check(read_all(cluster.bootstrap_servers, topic, PARTITIONS))
