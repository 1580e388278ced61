"""Broker generations (KIP-380) with real processes: restarts, bounces, controller restarts,
expired sessions, and the seed's three stale-request scenarios.

- A restarted broker keeps its data and gets a higher generation; its first LeaderAndIsr is of
  the new generation, and a LeaderAndIsr, StopReplica or UpdateMetadata meant for its previous
  generation is refused with STALE_BROKER_EPOCH and changes nothing (KIP-380's first and third
  motivating cases); a ControlledShutdown retried from the old generation is refused by the
  controller (its second case).
- A broker killed (SIGKILL) and restarted within its session is detected as bounced.
- A restarted controller has a higher epoch; brokers keep their generation (the contract gives
  live generations a fresh session) and refuse requests carrying the old controller epoch.
- A broker paused past its session is told its generation is over, stops leading and registers
  again, with a higher generation.
"""

from __future__ import annotations

import signal
import urllib.request

from protocol.apis.controlled_shutdown import ControlledShutdownRequest
from protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from protocol.apis.leader_and_isr import (LeaderAndIsrPartitionState, LeaderAndIsrRequest,
                                          LeaderAndIsrTopicState)
from protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from protocol.apis.stop_replica import (StopReplicaPartitionState, StopReplicaRequest,
                                        StopReplicaTopicState)
from protocol.apis.update_metadata import UpdateMetadataRequest
from protocol.error_codes import ErrorCode as E
from protocol.records import build_batch, iter_records

from .cluster import WAIT_S, BrokerChild, Cluster, call, free_port

CONTROLLER_ID = 3000


def produce(b: BrokerChild, topic: str, values: list[bytes]) -> int:
    answer = b.call(0, ProduceRequest(acks=-1, timeout_ms=5000, topic_data=[TopicProduceData(
        name=topic, partition_data=[PartitionProduceData(
            index=0, records=build_batch([(None, v, None, None) for v in values]))])]), 9)
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return part.base_offset


def values(b: BrokerChild, topic: str) -> list[bytes | None]:
    answer = b.call(1, FetchRequest(max_wait_ms=0, topics=[FetchTopic(topic=topic, partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]), 12)
    part = answer.responses[0].partitions[0]
    assert part.error_code == 0, part
    return [r.value for r in iter_records(part.records)]


def test_restart_keeps_data_and_refuses_requests_for_the_old_generation(tmp_path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster:
        b = cluster.broker(1)
        cluster.create_topic("kept", partitions=1, replication_factor=1)
        produce(b, "kept", [b"one", b"two"])
        old_generation = b.generation
        controller_epoch = cluster.controller.epoch

        new_generation = cluster.restart_broker(1)
        assert new_generation > old_generation
        assert b.has_line("after a clean shutdown")  # SIGTERM closed every log cleanly
        assert values(b, "kept") == [b"one", b"two"]
        # The first LeaderAndIsr it processed is of the new generation (fencing makes an older
        # one impossible); the partition leads again at a bumped leader epoch (KIP-101).
        first = b.wait_line(r"generation (\d+): first LeaderAndIsr")
        assert int(first.group(1)) == new_generation
        _, epoch = cluster.wait_leaders("kept", 1)[0]
        assert epoch >= 1

        # KIP-380 case 3: a LeaderAndIsr sent before the restart, arriving after it.
        stale_lai = b.call(4, LeaderAndIsrRequest(
            controller_id=CONTROLLER_ID, controller_epoch=controller_epoch,
            broker_epoch=old_generation, topic_states=[LeaderAndIsrTopicState(
                topic_name="kept", partition_states=[LeaderAndIsrPartitionState(
                    partition_index=0, controller_epoch=controller_epoch, leader=-1,
                    leader_epoch=epoch + 5, isr=[1], partition_epoch=99, replicas=[1])])]), 4)
        assert stale_lai.error_code == E.STALE_BROKER_EPOCH
        # KIP-380 case 1: a StopReplica meant for the previous generation.
        stale_stop = b.call(5, StopReplicaRequest(
            controller_id=CONTROLLER_ID, controller_epoch=controller_epoch,
            broker_epoch=old_generation, topic_states=[StopReplicaTopicState(
                topic_name="kept", partition_states=[StopReplicaPartitionState(
                    partition_index=0, leader_epoch=-2, delete_partition=True)])]), 3)
        assert stale_stop.error_code == E.STALE_BROKER_EPOCH
        stale_um = b.call(6, UpdateMetadataRequest(
            controller_id=CONTROLLER_ID, controller_epoch=controller_epoch,
            broker_epoch=old_generation), 6)
        assert stale_um.error_code == E.STALE_BROKER_EPOCH
        # Nothing changed: still leading, data still there, still in its metadata.
        assert values(b, "kept") == [b"one", b"two"]
        assert cluster.leaders("kept")[0] == (1, epoch)
        b.wait_line(f"fenced StopReplica: broker epoch {old_generation} is older than our "
                    f"generation {new_generation}")  # (its log is read by another thread)

        # KIP-380 case 2: a ControlledShutdown retried from the old generation.
        ctl = cluster.controller
        answer = call("127.0.0.1", ctl.port, 7, ControlledShutdownRequest(
            broker_id=1, broker_epoch=old_generation), 3)
        assert answer.error_code == E.STALE_BROKER_EPOCH
        ctl.wait_line(f"fenced ControlledShutdown from broker 1 generation {old_generation}")
        produce(b, "kept", [b"three"])  # the broker was not shut down by it
        assert values(b, "kept") == [b"one", b"two", b"three"]


def test_sigkill_and_quick_restart_is_detected_as_a_bounce(tmp_path) -> None:
    metrics_port = free_port()
    with Cluster(tmp_path, brokers=2, controller_args=(
            "--metrics-listen", f"127.0.0.1:{metrics_port}")) as cluster:
        cluster.create_topic("crash", partitions=1, replication_factor=1, broker_id=2)
        leader, _ = cluster.leaders("crash")[0]
        b = cluster.broker(leader)
        produce(b, "crash", [b"before"])
        old_generation = b.generation
        new_generation = cluster.restart_broker(leader, signal.SIGKILL)
        assert new_generation > old_generation
        found = cluster.controller.wait_line(
            rf"broker {leader} registered: generation {new_generation}, .*: (.*)$")
        assert found.group(1) == f"bounce (generation {old_generation} fails first)"
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                    timeout=WAIT_S) as r:
            assert "epochlog_controller_bounces_total 1.0" in r.read().decode()
        assert b.has_line("after a crash")  # storage recovered; acknowledged data survived
        cluster.wait_leaders("crash", 1)
        assert values(b, "crash") == [b"before"]


def test_controller_restart_raises_its_epoch_and_old_epochs_are_refused(tmp_path) -> None:
    with Cluster(tmp_path, brokers=2, broker_args=(
            "--set", "broker_heartbeat_interval_ms=200")) as cluster:
        cluster.create_topic("steady", partitions=1, replication_factor=1)
        old_epoch = cluster.controller.epoch
        generations = {i: b.generation for i, b in cluster.brokers.items()}
        new_epoch = cluster.restart_controller()
        assert new_epoch > old_epoch
        for i, b in cluster.brokers.items():
            b.wait_line(rf"controller {CONTROLLER_ID} epoch {old_epoch} -> {new_epoch}")
            b.wait_line(rf"generation {generations[i]}: first LeaderAndIsr from controller "
                        rf"epoch {new_epoch}")
            refused = b.call(6, UpdateMetadataRequest(
                controller_id=CONTROLLER_ID, controller_epoch=old_epoch,
                broker_epoch=b.generation), 6)
            assert refused.error_code == E.STALE_CONTROLLER_EPOCH
        # The generations live on (fresh sessions), and heartbeats are accepted again.
        cluster.controller.wait_line(r"listening on")
        assert {i: b.generation for i, b in cluster.brokers.items()} == generations
        leader, _ = cluster.leaders("steady")[0]
        produce(cluster.broker(leader), "steady", [b"after"])


def test_paused_past_its_session_the_broker_registers_again(tmp_path) -> None:
    with Cluster(tmp_path, brokers=1,
                 controller_args=("--broker-session-timeout-ms", "1200"),
                 broker_args=("--set", "broker_heartbeat_interval_ms=200")) as cluster:
        cluster.create_topic("paused", partitions=1, replication_factor=1)
        b = cluster.broker(1)
        old_generation = b.generation
        mark = len(cluster.controller.lines)
        b.send_signal(signal.SIGSTOP)
        try:
            cluster.controller.wait_line(rf"broker 1 generation {old_generation}: session "
                                         "expired", start=mark)
        finally:
            b.send_signal(signal.SIGCONT)
        found = b.wait_line(r"broker 1: generation (\d+) -> (\d+) ")
        assert int(found.group(1)) == old_generation and int(found.group(2)) > old_generation
        assert b.has_line("stopped leading 1 partitions")
        new_generation = int(found.group(2))
        b.wait_line(rf"generation {new_generation}: first LeaderAndIsr")
        cluster.wait_leaders("paused", 1)
        produce(b, "paused", [b"back"])
