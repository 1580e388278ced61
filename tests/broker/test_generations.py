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

import concurrent.futures
import signal
import urllib.request

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.controlled_shutdown import ControlledShutdownRequest
from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from epochlog.protocol.apis.leader_and_isr import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicState,
)
from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.apis.stop_replica import (
    StopReplicaPartitionState,
    StopReplicaRequest,
    StopReplicaTopicState,
)
from epochlog.protocol.apis.update_metadata import UpdateMetadataRequest
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import build_batch, iter_records

from .cluster import WAIT_S, BrokerChild, Cluster, call, free_port

CONTROLLER_ID = 3000


def produce(b: BrokerChild, topic: str, values: list[bytes]) -> int:
    answer = b.call(ApiKey.PRODUCE, ProduceRequest(
        acks=-1, timeout_ms=5000, topic_data=[TopicProduceData(
            name=topic, partition_data=[PartitionProduceData(
                index=0, records=build_batch([(None, v, None, None) for v in values]))])]), 9)
    part = answer.responses[0].partition_responses[0]
    assert part.error_code == 0, part
    return part.base_offset


def values(b: BrokerChild, topic: str) -> list[bytes | None]:
    answer = b.call(ApiKey.FETCH, FetchRequest(
        max_wait_ms=0, topics=[FetchTopic(topic=topic, partitions=[
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
        stale_lai = b.call(ApiKey.LEADER_AND_ISR, LeaderAndIsrRequest(
            controller_id=CONTROLLER_ID, controller_epoch=controller_epoch,
            broker_epoch=old_generation, topic_states=[LeaderAndIsrTopicState(
                topic_name="kept", partition_states=[LeaderAndIsrPartitionState(
                    partition_index=0, controller_epoch=controller_epoch, leader=-1,
                    leader_epoch=epoch + 5, isr=[1], partition_epoch=99, replicas=[1])])]), 4)
        assert stale_lai.error_code == E.STALE_BROKER_EPOCH
        # KIP-380 case 1: a StopReplica meant for the previous generation.
        stale_stop = b.call(ApiKey.STOP_REPLICA, StopReplicaRequest(
            controller_id=CONTROLLER_ID, controller_epoch=controller_epoch,
            broker_epoch=old_generation, topic_states=[StopReplicaTopicState(
                topic_name="kept", partition_states=[StopReplicaPartitionState(
                    partition_index=0, leader_epoch=-2, delete_partition=True)])]), 3)
        assert stale_stop.error_code == E.STALE_BROKER_EPOCH
        stale_um = b.call(ApiKey.UPDATE_METADATA, UpdateMetadataRequest(
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
        answer = call("127.0.0.1", ctl.port, ApiKey.CONTROLLED_SHUTDOWN, ControlledShutdownRequest(
            broker_id=1, broker_epoch=old_generation), 3)
        assert answer.error_code == E.STALE_BROKER_EPOCH
        ctl.wait_line(f"fenced ControlledShutdown from broker 1 generation {old_generation}")
        produce(b, "kept", [b"three"])  # the broker was not shut down by it
        assert values(b, "kept") == [b"one", b"two", b"three"]


def test_sigkill_and_quick_restart_is_detected_as_a_bounce(tmp_path) -> None:
    metrics_port = free_port()
    # A long connection-loss grace: otherwise the killed process's closed connection fails the
    # old generation within ~0.5 s, before the new process registers (a start-up, not a bounce).
    with Cluster(tmp_path, brokers=2, controller_args=(
            "--metrics-listen", f"127.0.0.1:{metrics_port}",
            "--set", "broker_connection_loss_grace_ms=60000")) as cluster:
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
            refused = b.call(ApiKey.UPDATE_METADATA, UpdateMetadataRequest(
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


# ------------------------------------------------------------------ before the registration answer
def test_rule_control_requests_wait_until_the_controller_confirms_our_generation() -> None:
    """The rule (fencing.ControlEpochs): unconfirmed -> wait; then judged against the confirmed
    generation (older: STALE_BROKER_EPOCH); a generation declared over -> wait again."""
    from epochlog.broker.fencing import ControlEpochs

    epochs = ControlEpochs(1)
    assert epochs.must_wait()  # a new process: generation -1, no registration answer yet
    epochs.registration_answered(9)
    assert not epochs.must_wait()
    # The previous process's generation 8 named by a delayed LeaderAndIsr: refused, not adopted.
    assert epochs.admit("LeaderAndIsr", CONTROLLER_ID, 1, 8) == E.STALE_BROKER_EPOCH
    assert epochs.generation == 9
    epochs.generation_over()  # a heartbeat was answered STALE_BROKER_EPOCH
    assert epochs.must_wait() and epochs.generation == 9
    epochs.registration_answered(12)
    assert epochs.admit("UpdateMetadata", CONTROLLER_ID, 1, 9) == E.STALE_BROKER_EPOCH
    # Confirmed, a newer epoch still means an answer of ours is on its way (adopted).
    assert epochs.admit("UpdateMetadata", CONTROLLER_ID, 1, 13) == 0 and epochs.generation == 13


async def test_a_held_control_request_goes_on_once_registered_and_is_bounded(tmp_path) -> None:
    """Broker.control_request_ready, the asyncio side of the rule, without a controller."""
    import asyncio

    from epochlog.broker.app import Broker
    from epochlog.broker.config import BrokerConfig

    broker = Broker(BrokerConfig(broker_id=1, data_dir=str(tmp_path),
                                 controller_request_timeout_ms=200))
    assert await broker.control_request_ready("LeaderAndIsr") is False  # bound: no answer
    assert broker.epochs.unanswered_total == 1
    held = asyncio.ensure_future(broker.control_request_ready("LeaderAndIsr"))
    await asyncio.sleep(0.05)  # let it start waiting (there is no event to await here)
    assert not held.done()
    broker.epochs.registration_answered(4)  # what ControllerLink.register does, then
    broker._registered(4)  # its on_registered hook
    assert await asyncio.wait_for(held, WAIT_S) is True
    assert await broker.control_request_ready("UpdateMetadata") is True  # no wait now


def test_a_request_for_the_previous_process_before_registration_is_refused(tmp_path) -> None:
    """Simulation seeds 3/847/923 on real processes: a restarted broker whose registration
    cannot be answered (controller paused) receives a LeaderAndIsr meant for its previous
    process's generation, listing none of its partitions. It must wait for its own generation
    and then refuse it (STALE_BROKER_EPOCH), deleting nothing; before the fix it adopted that
    generation and deleted both partitions as "not in the first LeaderAndIsr"."""
    import re

    with Cluster(tmp_path, brokers=1) as cluster:
        b = cluster.broker(1)
        cluster.create_topic("kept", partitions=1, replication_factor=1)
        cluster.create_topic("other", partitions=1, replication_factor=1)
        produce(b, "kept", [b"acked"])
        old_generation = b.generation
        controller_epoch = cluster.controller.epoch
        b.stop(signal.SIGKILL)
        ctl = cluster.controller
        ctl.send_signal(signal.SIGSTOP)  # no registration can be answered now
        try:
            b.start()
            _wait_serving(b)  # it listens before it registers
            # Listing none of its partitions (as a delta about other partitions, or the whole
            # state of a broker hosting nothing, would): no topic settings to fetch first.
            stale = LeaderAndIsrRequest(controller_id=CONTROLLER_ID,
                                        controller_epoch=controller_epoch,
                                        broker_epoch=old_generation, topic_states=[])
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                answer = pool.submit(b.call, 4, stale, 4)
                b.wait_line(r"LeaderAndIsr arrived before our registration answer: held")
                assert not answer.done(), "answered before the registration"
                ctl.send_signal(signal.SIGCONT)
                result = answer.result(WAIT_S)
        finally:
            ctl.send_signal(signal.SIGCONT)
        assert result.error_code == E.STALE_BROKER_EPOCH
        new_generation = b.wait_started()
        assert new_generation > old_generation
        assert b.has_line(f"LeaderAndIsr held until our registration was answered, judged "
                          f"against generation {new_generation}")
        assert not any(re.search(rf"generation -1 -> {old_generation}\b", line)
                       for line in b.lines)
        cluster.wait_leaders("kept", 1)
        assert values(b, "kept") == [b"acked"]  # nothing deleted
        first = b.wait_line(rf"generation {new_generation}: first LeaderAndIsr .*: (\d+) "
                            r"partitions, leading (\d+), (\d+) deleted")
        assert first.group(3) == "0"


def _wait_serving(b: BrokerChild) -> None:
    """Until the broker answers ApiVersions (it does before it has registered). Polled: a
    broker prints no line between opening its listener and its registration answer."""
    import time

    from epochlog.protocol.apis.api_versions import ApiVersionsRequest

    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            call("127.0.0.1", b.port, ApiKey.API_VERSIONS, ApiVersionsRequest(), 0, timeout_s=2.0)
            return
        except (OSError, TimeoutError, concurrent.futures.TimeoutError):
            assert time.monotonic() < deadline, "broker not serving:\n" + "\n".join(b.lines)
            time.sleep(0.05)


# ------------------------------------------------------------------ connection loss (failover)
def test_a_killed_broker_is_failed_on_its_closed_connection_not_its_session(tmp_path) -> None:
    """SIGKILL closes the broker's connections at once; with default settings (9 s session)
    the controller fails its generation as a connection loss after a short grace, and the
    partition it led moves, rather than waiting out the session."""
    with Cluster(tmp_path, brokers=2) as cluster:
        cluster.create_topic("moves", partitions=1, replication_factor=2)
        leader, epoch = cluster.leaders("moves")[0]
        generation = cluster.broker(leader).generation
        mark = len(cluster.controller.lines)
        cluster.broker(leader).stop(signal.SIGKILL)
        ctl = cluster.controller
        ctl.wait_line(rf"broker {leader} generation {generation}: its heartbeat connection "
                      r"closed", start=mark)
        ctl.wait_line(rf"broker {leader} generation {generation}: connection lost, no heartbeat "
                      r"on a new connection within 500 ms", start=mark)
        ctl.wait_line(rf"moves-0: leader {leader} -> \d+ \(epoch {epoch} -> {epoch + 1}\).*: "
                      rf"leader {leader} connection lost", start=mark)
        assert not ctl.has_line("session expired", start=mark)


class CuttableProxy:
    """A TCP forwarder from a local port to the controller whose connections a test can cut, one
    side at a time (as a network failure may reset the connection towards one peer first)."""

    def __init__(self, target_port: int) -> None:
        import socket
        import threading

        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []  # (broker side, controller)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while True:
            try:
                inside, _ = self.listener.accept()
                outside = socket.create_connection(("127.0.0.1", self.target_port), WAIT_S)
            except OSError:
                return  # closed
            with self._lock:
                self._pairs.append((inside, outside))
            for a, b in ((inside, outside), (outside, inside)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src, dst) -> None:
        """Copy until either side fails; closing is left to cut(), one side at a time."""
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass

    def cut(self, side: int) -> int:
        """Close the broker side (0) or the controller side (1) of every connection made so far;
        how many were cut."""
        import socket

        with self._lock:
            socks = [pair[side] for pair in self._pairs]
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        return len(socks)

    def close(self) -> None:
        self.listener.close()
        self.cut(0)
        self.cut(1)


def test_a_broker_whose_controller_connection_is_cut_keeps_its_generation(tmp_path) -> None:
    """The broker reaches the controller through a proxy that cuts its connections: first on
    the controller's side (the controller gives the generation a grace, 1.5 s here), then on the
    broker's. The broker notices the close, reconnects and heartbeats at once, so it keeps its
    generation, although its next heartbeat would only be due 10 s later (a broker that merely
    waited for it would be failed)."""
    port = free_port()  # the controller's, known before the cluster starts
    proxy = CuttableProxy(port)
    try:
        cluster = Cluster(tmp_path, brokers=1, controller_args=(
            "--broker-session-timeout-ms", "40000",
            "--set", "broker_connection_loss_grace_ms=1500"),
            broker_args=("--set", "broker_heartbeat_interval_ms=10000"))
        cluster.controller.port = port  # the controller listens on the port the proxy targets
        cluster.brokers[1].controller = f"127.0.0.1:{proxy.port}"
        with cluster:
            b = cluster.broker(1)
            generation = b.generation
            cluster.create_topic("steady", partitions=1, replication_factor=1)
            ctl = cluster.controller
            mark, broker_mark = len(ctl.lines), len(b.lines)
            assert proxy.cut(1) >= 2  # the registration/heartbeat and admin connections
            ctl.wait_line(rf"broker 1 generation {generation}: its heartbeat connection closed",
                          start=mark)
            proxy.cut(0)
            b.wait_line(r"the connection to the controller closed; reconnecting", broker_mark)
            found = ctl.wait_line(rf"broker 1 generation {generation} (heartbeats again|is dead)",
                                  start=mark)
            assert found.group(1) == "heartbeats again", "\n".join(ctl.lines[mark:])
            assert not b.has_line(f"generation {generation} ->", start=broker_mark)
            produce(b, "steady", [b"still leading"])
            assert values(b, "steady") == [b"still leading"]
    finally:
        proxy.close()
