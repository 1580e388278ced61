"""Replicated ingest and failover time (issue 5), on three local brokers in one run.

    python bench/replicated_ingest.py [--records 200000] [--failovers 3] [--dir PATH]

A controller and three brokers as real children on 127.0.0.1 (`epochlog.testing.Cluster`,
default settings). Two topics of one partition each:
  - `rf3`: replication factor 3, min.insync.replicas 2, produced with acks=all;
  - `rf1`: replication factor 1, produced with acks=1: the yardstick, same run, same machine.
confluent-kafka produces --records records of 1 KiB to each (linger.ms 5, batch.size 1 MiB, no
compression, no idempotence so both runs do the same work); MB/s of acknowledged value bytes, and
p50/p99 of each record's latency from produce() to its delivery report.

Failover: a producer sends one acks=all record to `rf3` every 10 ms; the partition's leader is
SIGKILLed; the time from the kill to the first delivery report of success for a record produced
after the kill (so acknowledged by the new leader). The killed broker is restarted and the ISR
waited back to three before the next round; the median of --failovers rounds. A killed
broker's connections close at once, and the controller fails its generation when it has not
heartbeated again within broker_connection_loss_grace_ms (500 ms); a broker that is cut off
without its connections closing is found only when its session (9 s) expires.
Figures vary from run to run on a shared 2-core machine: compare ratios.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from typing import Any

import confluent_kafka

from epochlog.testing import Cluster

RECORD_BYTES = 1024
WAIT_S = 60.0
FAILOVER_TICK_S = 0.01
FAILOVER_GOAL_S = 1.0


def ingest(bootstrap: str, topic: str, acks: str, records: int) -> tuple[float, float, float]:
    """(MB/s, p50 ms, p99 ms) of `records` acknowledged records of RECORD_BYTES."""
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1 << 20,
        "enable.idempotence": False, "compression.type": "none",
        "queue.buffering.max.messages": 200_000, "message.timeout.ms": int(WAIT_S * 1000)})
    value = b"x" * RECORD_BYTES
    latencies: list[float] = []
    failed: list[Any] = []

    def report(sent: float) -> Any:
        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                failed.append(err)
            else:
                latencies.append(time.perf_counter() - sent)
        return delivered

    start = time.perf_counter()
    for _ in range(records):
        sent = time.perf_counter()
        while True:
            try:
                producer.produce(topic, value, on_delivery=report(sent))
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(WAIT_S):
        raise RuntimeError(f"{topic}: records still unacknowledged after {WAIT_S}s")
    elapsed = time.perf_counter() - start
    if failed:
        raise RuntimeError(f"{topic}: {len(failed)} records failed, first {failed[0]}")
    latencies.sort()
    mb_s = records * RECORD_BYTES / elapsed / 1e6
    return (mb_s, latencies[len(latencies) // 2] * 1000,
            latencies[int(len(latencies) * 0.99)] * 1000)


def isr_size(cluster: Cluster, topic: str) -> int:
    return len(cluster.metadata(topics=[topic]).topics[0].partitions[0].isr_nodes)


def wait_until(check: Any, what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def failover(cluster: Cluster, topic: str) -> float:
    """Seconds from SIGKILL of the leader to the first acks=all success on the new leader."""
    leader = cluster.leader_of(topic, 0)
    producer = confluent_kafka.Producer({
        "bootstrap.servers": cluster.bootstrap_servers, "acks": "all", "linger.ms": 0,
        "message.timeout.ms": int(WAIT_S * 1000), "retry.backoff.ms": 20,
        "enable.idempotence": False, "topic.metadata.refresh.interval.ms": 1000})
    acked: list[tuple[float, float]] = []  # (produced at, acknowledged at)
    stop = threading.Event()

    def report(sent: float) -> Any:
        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                acked.append((sent, time.monotonic()))
        return delivered

    def run() -> None:
        while not stop.is_set():
            producer.produce(topic, b"f", on_delivery=report(time.monotonic()))
            producer.poll(FAILOVER_TICK_S)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(acked) > 10, "acks before the kill")
        killed_at = time.monotonic()
        cluster.kill(leader)
        wait_until(lambda: any(s > killed_at for s, _ in list(acked)), "an ack after the kill")
        first = min(a for s, a in list(acked) if s > killed_at)
    finally:
        stop.set()
        thread.join(WAIT_S)
        producer.flush(WAIT_S)
    cluster.restart(leader)
    wait_until(lambda: isr_size(cluster, topic) == 3, "the ISR back to three")
    return first - killed_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--failovers", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the cluster's data goes (temp dir)")
    parser.add_argument("--session-timeout-ms", type=int, default=None,
                        help="the controller's broker_session_timeout_ms (brokers heartbeat "
                             "every quarter of it); default: the default settings")
    args = parser.parse_args()
    controller_args: list[str] = []
    broker_args: list[str] = []
    if args.session_timeout_ms is not None:
        controller_args = ["--set", f"broker_session_timeout_ms={args.session_timeout_ms}"]
        broker_args = ["--set", f"broker_heartbeat_interval_ms={args.session_timeout_ms // 4}"]
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp, \
            Cluster(3, base_dir=tmp, controller_args=controller_args,
                    broker_args=broker_args) as cluster:
        cluster.create_topic("rf3", 1, 3, {"min.insync.replicas": "2"})
        cluster.create_topic("rf1", 1, 1)
        wait_until(lambda: isr_size(cluster, "rf3") == 3, "rf3's ISR of three")
        rf1 = ingest(cluster.bootstrap_servers, "rf1", "1", args.records)
        rf3 = ingest(cluster.bootstrap_servers, "rf3", "all", args.records)
        print(f"records of {RECORD_BYTES} B: {args.records} per topic")
        print(f"  RF=1 acks=1   : {rf1[0]:7.1f} MB/s, p50 {rf1[1]:7.1f} ms, p99 {rf1[2]:7.1f} ms")
        print(f"  RF=3 acks=all : {rf3[0]:7.1f} MB/s, p50 {rf3[1]:7.1f} ms, p99 {rf3[2]:7.1f} ms")
        print(f"  RF=3 acks=all / RF=1 acks=1 throughput: {rf3[0] / rf1[0]:.2f}")
        times = [failover(cluster, "rf3") for _ in range(args.failovers)]
        median = statistics.median(times)
        session = args.session_timeout_ms or "default"
        print(f"failover, session timeout {session} ms (SIGKILL of the leader -> first acks=all "
              f"success): "
              f"{', '.join(f'{t:.2f}' for t in times)} s; median {median:.2f} s "
              f"(goal <= {FAILOVER_GOAL_S:.0f} s: "
              f"{'met' if median <= FAILOVER_GOAL_S else 'NOT met'})")


if __name__ == "__main__":
    main()
