"""What a broker spends to host many partitions (issue 33), with an empty cluster as the yardstick.

    python bench/partition_scale.py [--partitions 1000 10000] [--beyond 30000]
                                    [--limit 20000] [--dir PATH]

For each figure of --partitions: a controller and three brokers as real children on 127.0.0.1
(epochlog.testing's Cluster), every process under `prlimit --nofile=LIMIT:LIMIT`. First the
yardstick: the empty cluster's idle CPU, RSS and descriptors per broker and its Metadata (all
topics) round trip. Then topics of at most 10,000 partitions (the controller's per-topic bound),
replication factor 3, are created until the figure is reached; each refusal is printed with its
message. Once every partition has a leader (Metadata), IDLE_SETTLE_S have passed and the brokers
have settled (windows of IDLE_S until each broker's CPU stays within 2 points or 20% of the window
before, at most SETTLE_S_MAX; at scale the brokers still create logs for minutes after "led"): per
broker, the descriptors held (/proc/PID/fd), idle CPU over IDLE_S (utime + stime from
/proc/PID/stat) and RSS; the Metadata (all topics) round trip (median of 5). --beyond, on the last
cluster: topics are asked for up to that many partitions in all; what cannot be hosted must be
refused cleanly (POLICY_VIOLATION and its message), with every broker still up. Then the time from
a SIGKILL of broker 2 until every partition has a leader that is alive (Metadata from broker 1,
polled); broker 2 started again; then a rolling restart (each broker stopped with SIGTERM, waited
for up to STOP_S, started, and waited for until every partition has a leader again), each clean
stop's duration and the whole.
"Led" is what Metadata answers (the controller's decision), not yet each log opened.
Figures vary from run to run on a shared 2-core machine: compare each with its yardstick.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from epochlog.protocol.api_keys import ApiKey  # noqa: E402
from epochlog.protocol.apis.create_topics import (  # noqa: E402
    CreatableTopic,
    CreateTopicsRequest,
)
from epochlog.protocol.apis.metadata import MetadataRequest  # noqa: E402
from epochlog.protocol.error_codes import ErrorCode  # noqa: E402
from epochlog.testing.cluster import Cluster  # noqa: E402

TOPIC_PARTITIONS_MAX = 10_000
IDLE_SETTLE_S, IDLE_S = 40.0, 10.0  # settle: past FILE_IDLE_MS_MAX, so idle files are closed
SETTLE_S_MAX = 900.0  # at 10,000 partitions the brokers work for minutes after "all led"
SETTLED_POINTS, SETTLED_SHARE = 2.0, 0.2  # a window this close to the one before: settled
WAIT_S = 900.0
STOP_S = 600.0  # a clean stop of a broker hosting 10,000 partitions takes far more than 30 s
POLL_S = 0.5
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def limited(cluster: Cluster, limit: int) -> None:
    command = cluster._command  # the harness's launcher, wrapped
    for node in cluster.nodes():
        node.launcher = lambda n, command=command: [  # type: ignore[misc]
            "prlimit", f"--nofile={limit}:{limit}", "--", *command(n)]


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        line = next(x for x in f if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def per_broker(cluster: Cluster) -> dict[int, tuple[int, float, float]]:
    """broker -> (descriptors, idle CPU % of a core over IDLE_S, RSS MB)."""
    pids = {i: b.pid for i, b in cluster.brokers.items()}
    before = {i: cpu_s(p) for i, p in pids.items()}
    time.sleep(IDLE_S)
    return {i: (descriptors(p), 100 * (cpu_s(p) - before[i]) / IDLE_S, rss_mb(p))
            for i, p in pids.items()}


def settled(cluster: Cluster) -> dict[int, tuple[int, float, float]]:
    """per_broker once the brokers are done with what the creation left them (logs still
    being created and made durable, idle files being closed): windows of IDLE_S until every
    broker's CPU is within SETTLED_POINTS or SETTLED_SHARE of its previous window, at most
    SETTLE_S_MAX; each window shown, so a long settle shows progress."""
    began = time.perf_counter()
    last = per_broker(cluster)
    while time.perf_counter() - began < SETTLE_S_MAX:
        now = per_broker(cluster)
        print(f"  settling ({time.perf_counter() - began:.0f} s): CPU "
              f"{', '.join(f'{now[b][1]:.1f}%' for b in sorted(now))}, descriptors "
              f"{', '.join(str(now[b][0]) for b in sorted(now))}", flush=True)
        if all(abs(now[b][1] - last[b][1]) <= max(SETTLED_POINTS, SETTLED_SHARE * last[b][1])
               for b in now):
            return now
        last = now
    print(f"  not settled within {SETTLE_S_MAX:.0f} s: the last window stands", flush=True)
    return last


def metadata(cluster: Cluster, broker: int = 1) -> object:
    return cluster.call_node(broker, ApiKey.METADATA, MetadataRequest(
        topics=None, allow_auto_topic_creation=False), timeout_s=60)


def metadata_ms(cluster: Cluster) -> float:
    times = []
    for _ in range(5):
        began = time.perf_counter()
        metadata(cluster)
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def leaderless(cluster: Cluster, dead: set[int], broker: int = 1) -> int:
    """Partitions without a live leader, as broker `broker` answers Metadata."""
    answer = metadata(cluster, broker)
    return sum(1 for t in answer.topics for p in t.partitions  # type: ignore[attr-defined]
               if p.leader_id < 0 or p.leader_id in dead)


def until_led(cluster: Cluster, dead: set[int] = frozenset(), broker: int = 1) -> float:  # type: ignore[assignment]
    began = time.perf_counter()
    deadline = began + WAIT_S
    while True:
        try:
            if leaderless(cluster, dead, broker) == 0:
                return time.perf_counter() - began
        except (OSError, TimeoutError):
            pass
        if time.perf_counter() > deadline:
            raise TimeoutError("partitions still without a leader")
        time.sleep(POLL_S)


def create_up_to(cluster: Cluster, total: int, first_index: int) -> tuple[int, list[str]]:
    """Topics of at most TOPIC_PARTITIONS_MAX partitions (RF 3) until total; (partitions
    accepted, refusals)."""
    accepted, refusals, index = 0, [], first_index
    while accepted + len(refusals) * 0 < total and index - first_index < 100:
        count = min(TOPIC_PARTITIONS_MAX, total - accepted)
        if count <= 0:
            break
        request = CreateTopicsRequest(topics=[CreatableTopic(
            name=f"scale-{index}", num_partitions=count, replication_factor=3)],
            timeout_ms=60_000)
        began = time.perf_counter()
        result = cluster.call_node(1, ApiKey.CREATE_TOPICS, request, timeout_s=120).topics[0]
        took = time.perf_counter() - began
        index += 1
        if result.error_code:
            refusals.append(f"{ErrorCode(result.error_code).name}: {result.error_message}")
            print(f"  scale-{index - 1} ({count} partitions) refused in {took:.2f} s: "
                  f"{refusals[-1]}", flush=True)
            break
        accepted += count
        print(f"  scale-{index - 1} ({count} partitions) accepted in {took:.2f} s", flush=True)
    return accepted, refusals


def show(title: str, figures: dict[int, tuple[int, float, float]]) -> None:
    for broker, (fds, cpu, rss) in sorted(figures.items()):
        print(f"  {title} broker {broker}: {fds} descriptors, idle CPU {cpu:.1f}% of a core, "
              f"RSS {rss:.0f} MB", flush=True)


def run(partitions: int, limit: int, base: Path, beyond: int | None) -> None:
    print(f"== {partitions} partitions, RF 3, 3 brokers, open-files limit {limit}", flush=True)
    cluster = Cluster(3, base_dir=base / f"p{partitions}", start_timeout_s=120)
    limited(cluster, limit)
    with cluster:
        time.sleep(IDLE_SETTLE_S / 2)
        show("yardstick (empty)", per_broker(cluster))
        print(f"  yardstick Metadata (all topics, empty): {metadata_ms(cluster):.1f} ms")
        began = time.perf_counter()
        accepted, _ = create_up_to(cluster, partitions, 0)
        led_s = until_led(cluster)
        print(f"  {accepted} partitions accepted, all led {time.perf_counter() - began:.1f} s "
              f"after the first request ({led_s:.1f} s after the last answer)", flush=True)
        time.sleep(IDLE_SETTLE_S)
        show("hosting", settled(cluster))
        print(f"  Metadata (all topics): {metadata_ms(cluster):.1f} ms", flush=True)
        if beyond is not None and beyond > accepted:
            more, refusals = create_up_to(cluster, beyond - accepted, 100)
            print(f"  asked for {beyond} in all: {accepted + more} hosted, "
                  f"{len(refusals)} refusal(s); brokers alive: "
                  f"{[b.alive for b in cluster.brokers.values()]}", flush=True)
        victim = cluster.brokers[2]
        os.kill(victim.pid, signal.SIGKILL)
        print(f"  SIGKILL broker 2: every partition led again in "
              f"{until_led(cluster, {2}):.1f} s", flush=True)
        cluster.restart(2)
        until_led(cluster)
        began = time.perf_counter()
        for broker in cluster.broker_ids:
            stopping = time.perf_counter()
            cluster.stop(broker, timeout_s=STOP_S)  # SIGTERM: a controlled shutdown
            print(f"  broker {broker} stopped cleanly in {time.perf_counter() - stopping:.1f} s",
                  flush=True)
            cluster.restart(broker)
            until_led(cluster, broker=broker % 3 + 1)
        print(f"  rolling restart: {time.perf_counter() - began:.1f} s", flush=True)
        for broker in cluster.broker_ids:  # the harness's close waits STOP_S at most each
            cluster.stop(broker, timeout_s=STOP_S)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--beyond", type=int, default=30_000)
    parser.add_argument("--limit", type=int, default=20_000)
    parser.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args()
    base = args.dir or Path(tempfile.mkdtemp(prefix="epochlog-scale-"))
    for i, count in enumerate(args.partitions):
        run(count, args.limit, base, args.beyond if i == len(args.partitions) - 1 else None)


if __name__ == "__main__":
    main()
