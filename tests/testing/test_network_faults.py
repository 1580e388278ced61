"""Network faults happen for real: on namespaces (as root) and on the proxy fallback.

- a partitioned follower falls out of the ISR while its process runs on, and comes back after
  heal; a leader cut off from its followers is left alone in its ISR (both network modes);
- a cut is silent: a connection across it times out, nothing refuses it (namespaces);
- a one-way partition drops one direction only (namespaces, seen with UDP datagrams);
- a slowed broker's round trips grow by most of the delay (both modes; generous bounds);
- listeners advertise the namespaces' addresses; nothing is left behind on close, and what a
  harness killed outright leaves is swept (namespaces).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from epochlog.client.connection import Connection
from epochlog.protocol.apis.metadata import MetadataRequest
from epochlog.protocol.registry import APIS
from epochlog.testing import CLIENTS, Cluster, NetworkFaultUnsupported, until
from epochlog.testing import netns as netns_module
from epochlog.testing.processes import process_state

WAIT_S = 60.0
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0 or netns_module.available() is not None,
                             reason="network namespaces need root (CI runs as root)")
MODES = [pytest.param("netns", marks=AS_ROOT), "proxy"]
FAST = {"replica.lag.time.max.ms": 1500, "min.insync.replicas": 2}


@pytest.mark.parametrize("mode", MODES)
def test_a_partitioned_follower_leaves_the_isr_while_it_runs(
        epochlog_cluster: Callable[..., Cluster], mode: str) -> None:
    c = epochlog_cluster(brokers=3, network=mode, settings=FAST)
    assert c.network.mode == mode
    c.create_topic("t", partitions=1, replication_factor=3)
    leader = c.leader_of("t", 0)
    follower, other = (b for b in c.brokers if b != leader)
    pid = c.pid(follower)
    c.partition({follower}, {leader, other})
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})

    def shrunk() -> bool:
        producer.produce("t", b"x", partition=0)  # a leader shrinks only a follower behind it
        assert producer.flush(WAIT_S) == 0
        return follower not in c.partitions("t")[0].isr_nodes
    until(shrunk, f"broker {follower} out of the ISR", WAIT_S, interval_s=0.2)
    assert c.pid(follower) == pid and process_state(pid) in ("R", "S"), "it must run on"
    others = ",".join(sorted(map(str, (leader, other))))
    assert c.network_faults(follower) == f"cannot reach {others}; unreachable from {others}"

    c.heal()
    state = c.wait_fully_replicated("t", timeout_s=WAIT_S)
    assert follower in state[0].isr_nodes

    # The other way round: the leader cut off from its followers (it still reaches the
    # controller) is left alone in its ISR, and runs on.
    leader_pid = c.pid(leader)
    c.partition({leader}, {follower, other})
    acks_1 = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": 1})

    def alone() -> bool:
        acks_1.produce("t", b"y", partition=0)
        assert acks_1.flush(WAIT_S) == 0
        return c.partitions("t")[0].isr_nodes == [leader]
    until(alone, f"leader {leader} alone in the ISR", WAIT_S, interval_s=0.2)
    assert c.pid(leader) == leader_pid and process_state(leader_pid) in ("R", "S")
    c.heal()
    c.wait_fully_replicated("t", timeout_s=WAIT_S)


@AS_ROOT
def test_a_cut_is_silent_and_isolate_moves_leadership(
        epochlog_cluster: Callable[..., Cluster]) -> None:
    c = epochlog_cluster(brokers=3, network=True, settings={
        **FAST, "broker.session.timeout.ms": 3000, "broker.heartbeat.interval.ms": 500})
    c.create_topic("t", partitions=1, replication_factor=3)
    leader = c.leader_of("t", 0)
    node = c.node(leader)
    c.isolate(leader)
    started = time.monotonic()
    with pytest.raises(TimeoutError):  # dropped, not refused (that would be ConnectionRefused)
        socket.create_connection((node.host, node.port), timeout=1.0)
    assert time.monotonic() - started >= 0.9
    new = until(lambda: (n := c.leader_of("t", 0)) != leader and n, "a new leader", WAIT_S)
    assert new in c.brokers and node.alive
    c.heal()
    socket.create_connection((node.host, node.port), timeout=WAIT_S).close()
    c.wait_fully_replicated("t", timeout_s=WAIT_S)


def _udp_arrives(c: Cluster, into_namespace: bool, count: int = 5) -> bool:
    """Whether a datagram gets from clients into broker 1's namespace (into_namespace) or
    from it to clients: a receiver on one side, a sender on the other (in the namespace as a
    child run through `ip netns exec`)."""
    prefix = c.network.command_prefix("1")
    node_address, clients_address = c.node(1).host, c.network.host(CLIENTS)
    if into_namespace:
        receiver = subprocess.Popen(
            [*prefix, sys.executable, "-c",
             "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
             f"s.bind(({node_address!r}, 7777)); s.settimeout(3); print('ready', flush=True)\n"
             "try: s.recv(100); print('got')\nexcept OSError: print('nothing')"],
            stdout=subprocess.PIPE, text=True)
        assert receiver.stdout is not None and receiver.stdout.readline().strip() == "ready"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _ in range(count):
                s.sendto(b"ping", (node_address, 7777))
        out, _ = receiver.communicate(timeout=10)
        return out.strip() == "got"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((clients_address, 0))
        s.settimeout(3)
        port = s.getsockname()[1]
        subprocess.run([*prefix, sys.executable, "-c",
                        "import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                        f"for _ in range({count}): s.sendto(b'pong', ({clients_address!r}, "
                        f"{port}))"], check=True, timeout=10)
        try:
            s.recv(100)
            return True
        except TimeoutError:
            return False


@AS_ROOT
def test_a_one_way_partition_drops_one_direction_only(
        epochlog_cluster: Callable[..., Cluster]) -> None:
    c = epochlog_cluster(brokers=1, network=True)
    assert _udp_arrives(c, into_namespace=True) and _udp_arrives(c, into_namespace=False)
    c.partition({1}, {CLIENTS}, one_way=True)  # broker 1 cannot send to clients
    assert _udp_arrives(c, into_namespace=True), "the other direction must still flow"
    assert not _udp_arrives(c, into_namespace=False)
    c.heal()
    assert _udp_arrives(c, into_namespace=False)


class Pinger:
    """Round trips of a small request on one open connection (its own loop and thread)."""

    def __init__(self, host: str, port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.conn = self._run(Connection(host, port, request_timeout_ms=30_000).connect())

    def _run(self, coro: object) -> object:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(WAIT_S)  # type: ignore

    def median_rtt_s(self, tries: int = 5) -> float:
        async def one() -> float:
            api = APIS[3]
            started = time.monotonic()
            await self.conn.request(api, self.conn.version_for(api), MetadataRequest(topics=[]))
            return time.monotonic() - started
        return statistics.median(self._run(one()) for _ in range(tries))  # type: ignore

    def close(self) -> None:
        self._run(self.conn.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(WAIT_S)


@pytest.mark.parametrize("mode", MODES)
def test_slow_grows_round_trips_by_most_of_the_delay(
        epochlog_cluster: Callable[..., Cluster], mode: str) -> None:
    c = epochlog_cluster(brokers=1, network=mode)
    node = c.node(1)
    pinger = Pinger(node.host, node.port)
    try:
        before = pinger.median_rtt_s()
        c.slow(1, delay_ms=300, jitter_ms=20)
        slowed = pinger.median_rtt_s()
        assert slowed - before >= 0.2, (before, slowed)  # most of 300 ms, said generously
        c.heal()
        healed = pinger.median_rtt_s()
        assert healed < slowed - 0.15, (slowed, healed)
    finally:
        pinger.close()
    try:  # loss needs netem; without it the refusal must say so
        c.slow(1, delay_ms=10, loss_pct=5)
        assert mode == "netns" and getattr(c.network, "netem", False)
    except NetworkFaultUnsupported as exc:
        assert "loss_pct" in str(exc)
    c.heal()


def test_a_loopback_cluster_refuses_network_faults_naming_the_way(
        epochlog_cluster: Callable[..., Cluster]) -> None:
    c = epochlog_cluster(brokers=1)
    with pytest.raises(NetworkFaultUnsupported, match="network=True"):
        c.partition({1}, {CLIENTS})
    with pytest.raises(NetworkFaultUnsupported, match="network=True"):
        c.slow(1, delay_ms=10)
    assert c.network_faults(1) == ""


@AS_ROOT
def test_every_listener_advertises_its_namespace_address(
        epochlog_cluster: Callable[..., Cluster]) -> None:
    c = epochlog_cluster(brokers=2, network=True, internal_listener=True)
    hosts = {b.node_id: b.host for b in c.metadata([]).brokers}
    assert hosts == {1: c.node(1).host, 2: c.node(2).host}
    addresses = {c.node(1).host, c.node(2).host, c.node(c.controller).host}
    assert len(addresses) == 3 and "127.0.0.1" not in addresses
    for b in c.brokers.values():
        line = b.wait_line(r"internal listener on \S+ \(advertised ([\d.]+):\d+\)")
        assert line.group(1) == b.host
        assert b.wait_line(r"controller ([\d.]+):").group(1) == c.node(c.controller).host


HARNESS = """
import sys, time
from epochlog.testing import Cluster
c = Cluster(1, network=True).start()
print(c.network.ns.tag, c.pid(1), flush=True)
time.sleep(600)
"""


@AS_ROOT
def test_nothing_is_left_behind_even_when_the_harness_is_killed(
        epochlog_cluster: Callable[..., Cluster]) -> None:
    c = epochlog_cluster(brokers=1, network=True)
    tag = c.network.ns.tag  # type: ignore[attr-defined]
    assert netns_module.leftovers(tag)
    c.close()
    assert netns_module.leftovers(tag) == []

    harness = subprocess.Popen([sys.executable, "-c", HARNESS], stdout=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        assert harness.stdout is not None
        tag, broker_pid = harness.stdout.readline().split()
    finally:
        os.killpg(harness.pid, signal.SIGKILL)  # no atexit, no finally: a crash
        harness.wait()
    until(lambda: process_state(int(broker_pid)) in ("", "Z"), "its broker to die with it",
          WAIT_S)  # the parent-death signal
    assert netns_module.leftovers(tag), "the killed harness could not clean up"
    removed = netns_module.sweep_stale()  # what every namespace cluster does first
    assert any(tag in r for r in removed)
    assert netns_module.leftovers(tag) == []
