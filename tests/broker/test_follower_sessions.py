"""Followers fetch through incremental fetch sessions (KIP-227), on real processes.

Three brokers and a topic of PARTITIONS partitions, RF 3: each broker follows 2/3 of them from
two leaders. Once the cluster is idle, the leaders' counters (epochlog_broker_replica_fetches,
..._partitions_named, ..._partitions_answered) show every follower Fetch naming no partition and
answered with none: a sessionless follower names all it follows in every Fetch, and is answered
all of them, which at 10,000 partitions per broker was most of an idle broker's CPU (issue 33).
The fetches are long polls (replica_fetch_wait_max_ms): a bounded number per second, not a
spin. Records produced afterwards with acks=all are acknowledged, so the followers still
replicate through their sessions, and a restarted leader (whose sessions are gone) is followed
again through new ones.
"""

from __future__ import annotations

import time
import urllib.request

from .cluster import Cluster, free_port

TOPIC = "sessions"
PARTITIONS = 60
WAIT_MS = 300  # replica_fetch_wait_max_ms
WINDOW_S = 3.0
COUNTERS = ("replica_fetches", "replica_fetch_partitions_named",
            "replica_fetch_partitions_answered")


def counters(ports: dict[int, int]) -> dict[str, float]:
    """The cluster's sums of the leaders' replica fetch counters."""
    total = dict.fromkeys(COUNTERS, 0.0)
    for port in ports.values():
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics",
                                      timeout=10).read().decode()
        for line in text.splitlines():
            name = line.split(" ")[0].removeprefix("epochlog_broker_").removesuffix("_total")
            if name in total and not line.startswith("#"):
                total[name] += float(line.split()[-1])
    return total


def idle_window(ports: dict[int, int]) -> dict[str, float]:
    before = counters(ports)
    time.sleep(WINDOW_S)
    after = counters(ports)
    return {k: after[k] - before[k] for k in COUNTERS}


def settled(ports: dict[int, int]) -> dict[str, float]:
    """An idle window with no partition named: the sessions are open (a few seconds after a
    start, a leader change, or while followers catch up, some fetches are still full)."""
    deadline = time.monotonic() + 60
    while True:
        window = idle_window(ports)
        if window["replica_fetch_partitions_named"] == 0 or time.monotonic() > deadline:
            return window


def test_idle_followers_name_no_partition_and_still_replicate(tmp_path) -> None:
    from kafka import KafkaProducer
    c = Cluster(tmp_path, brokers=3,
                broker_args=["--set", f"replica_fetch_wait_max_ms={WAIT_MS}"])
    ports = {i: free_port() for i in c.brokers}
    for i, b in c.brokers.items():
        b.extra += ["--set", f"metrics_listen=127.0.0.1:{ports[i]}"]
    with c:
        c.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        c.wait_fully_replicated(TOPIC)

        window = settled(ports)

        assert window["replica_fetches"] > 0, window
        assert window["replica_fetch_partitions_named"] == 0, window
        assert window["replica_fetch_partitions_answered"] == 0, window
        # six follower-leader pairs, each a long poll of WAIT_MS: about 60 in the window; a
        # fetch answered at once each time would be thousands
        pairs = 6
        assert window["replica_fetches"] <= 3 * pairs * (WINDOW_S * 1000 / WAIT_MS + 1), window

        producer = KafkaProducer(bootstrap_servers=c.bootstrap, acks="all", retries=20)
        futures = [producer.send(TOPIC, b"v%d" % i, partition=i % PARTITIONS)
                   for i in range(2 * PARTITIONS)]
        for f in futures:
            f.get(timeout=30)
        producer.close()

        c.restart_broker(2)  # its followers' sessions on it are gone
        c.wait_fully_replicated(TOPIC)
        window = settled(ports)
        assert window["replica_fetch_partitions_named"] == 0, window
