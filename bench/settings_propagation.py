"""How soon an altered topic setting is in force on every broker, beside the AlterConfigs round trip
that altered it, in one run; optionally the same on a cluster of another build (e.g. main's).

    python bench/settings_propagation.py [--rounds 20] [--baseline-python PATH] [--dir PATH]

A controller and three brokers as real children on 127.0.0.1 (epochlog.testing's Cluster,
default settings). One topic of three partitions, replication factor 3, each partition led by
another broker. Each round sends IncrementalAlterConfigs to a broker (which relays it to the
controller) setting the topic's max.message.bytes alternately below and above the size of a
probe batch of PROBE_BYTES; the yardstick is that request's round trip. From its answer on, each
partition's leader is sent the probe (Produce, acks=1) every PROBE_GAP_MS until it answers the
way the new limit says (accepted, or MESSAGE_TOO_LARGE): that answer's arrival is when the
broker had the change in force (an upper bound: it may have had it up to a probe earlier). A
round's figure is the latest of the three brokers; p50 and max over --rounds rounds, and each
broker's p50 alone. Each round starts after a random pause of up to PAUSE_MS_MAX (seeded), so
that a build whose brokers poll is not met at the same phase of their polling every round (back
to back, each round would start just after the poll that ended the previous one).

--baseline-python runs the same rounds on a second cluster whose processes run that interpreter
(the python of a venv with another checkout installed, e.g. main's), after the first, so both
builds are measured on the same machine in the same run. Figures vary from run to run on a
shared 2-core machine: compare each build's figure with its own yardstick.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from epochlog.client.connection import Connection  # noqa: E402
from epochlog.protocol.api_keys import ApiKey  # noqa: E402
from epochlog.protocol.apis.incremental_alter_configs import (  # noqa: E402
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from epochlog.protocol.apis.produce import (  # noqa: E402
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from epochlog.protocol.error_codes import ErrorCode  # noqa: E402
from epochlog.protocol.records import build_batch  # noqa: E402
from epochlog.protocol.registry import APIS  # noqa: E402
from epochlog.testing.cluster import Cluster  # noqa: E402
from epochlog.testing.nodes import Node  # noqa: E402

TOPIC = "bench-settings"
PROBE_BYTES = 2000  # the probe batch is a little larger (its header)
LIMIT_LOW, LIMIT_HIGH = 1000, 100_000  # max.message.bytes: the probe refused, accepted
PROBE_GAP_MS = 2
PAUSE_MS_MAX = 2000
WAIT_S = 30.0  # a broker that never applies the change: the round fails
SET = 0  # IncrementalAlterConfigs' SET


def alter_request(limit: int) -> IncrementalAlterConfigsRequest:
    return IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
        resource_type=2, resource_name=TOPIC, configs=[AlterableConfig(
            name="max.message.bytes", config_operation=SET, value=str(limit))])])


def probe_request(partition: int) -> ProduceRequest:
    batch = build_batch([(None, b"p" * PROBE_BYTES, None, int(time.time() * 1000))])
    return ProduceRequest(acks=1, timeout_ms=10_000, topic_data=[TopicProduceData(
        name=TOPIC, partition_data=[PartitionProduceData(index=partition, records=batch)])])


async def probe_until(conn: Connection, partition: int, accepted: bool) -> float:
    """perf_counter when the leader first answers the probe as the new limit says."""
    api = APIS[ApiKey.PRODUCE]
    deadline = time.perf_counter() + WAIT_S
    while True:
        answer = await conn.request(api, 9, probe_request(partition))
        now = time.perf_counter()
        error = answer.responses[0].partition_responses[0].error_code
        if error not in (ErrorCode.NONE, ErrorCode.MESSAGE_TOO_LARGE):
            raise RuntimeError(f"partition {partition}: probe answered {ErrorCode(error).name}")
        if (error == ErrorCode.NONE) == accepted:
            return now
        if now > deadline:
            raise RuntimeError(f"partition {partition}: the change not in force after {WAIT_S}s")
        await asyncio.sleep(PROBE_GAP_MS / 1000)


async def rounds(cluster: Cluster, count: int) -> tuple[list[float], dict[int, list[float]],
                                                         list[float]]:
    """(latest broker per round, each broker's own, AlterConfigs round trips), in ms."""
    rng = random.Random(count)
    leaders = {p: lead for p, (lead, _) in cluster_leaders(cluster).items()}
    conns = {b: await Connection(*endpoint(cluster, b)).connect() for b in cluster.brokers}
    admin = await Connection(*endpoint(cluster, 1)).connect()
    latest: list[float] = []
    per_broker: dict[int, list[float]] = {b: [] for b in leaders.values()}
    trips: list[float] = []
    try:
        for i in range(count):
            limit = LIMIT_HIGH if i % 2 == 0 else LIMIT_LOW  # the topic starts at LIMIT_LOW
            await asyncio.sleep(rng.uniform(0, PAUSE_MS_MAX) / 1000)
            sent = time.perf_counter()
            answer = await admin.request(APIS[ApiKey.INCREMENTAL_ALTER_CONFIGS], 1,
                                         alter_request(limit))
            answered = time.perf_counter()
            if answer.responses[0].error_code:
                raise RuntimeError(f"IncrementalAlterConfigs: {answer.responses[0]}")
            trips.append((answered - sent) * 1000)
            order = sorted(leaders.items())
            applied = await asyncio.gather(*(probe_until(conns[leader], p, limit == LIMIT_HIGH)
                                             for p, leader in order))
            for (_, leader), at in zip(order, applied, strict=True):
                per_broker[leader].append((at - answered) * 1000)
            latest.append((max(applied) - answered) * 1000)
    finally:
        for conn in [admin, *conns.values()]:
            await conn.close()
    return latest, per_broker, trips


def cluster_leaders(cluster: Cluster) -> dict[int, tuple[int, int]]:
    leaders = cluster.wait_leaders(TOPIC, 3)
    if len({lead for lead, _ in leaders.values()}) != 3:
        raise RuntimeError(f"each broker should lead one partition: {leaders}")
    return leaders


def endpoint(cluster: Cluster, broker: int) -> tuple[str, int]:
    node = cluster.brokers[broker]
    return node.host, node.port


def with_interpreter(cluster: Cluster, python: str) -> None:
    """Every process of the cluster runs `python` instead of this interpreter."""
    for node in cluster.nodes():
        launcher = node.launcher
        assert launcher is not None

        def launch(n: Node, launcher: Callable[[Node], list[str]] = launcher) -> list[str]:
            return [python if arg == sys.executable else arg for arg in launcher(n)]
        node.launcher = launch


def measure(python: str | None, count: int, base_dir: str) -> tuple[list[float],
                                                                      dict[int, list[float]],
                                                                      list[float]]:
    cluster = Cluster(3, base_dir=base_dir)
    if python is not None:
        with_interpreter(cluster, python)
    with cluster:
        cluster.create_topic(TOPIC, 3, 3, {"max.message.bytes": str(LIMIT_LOW)})
        return asyncio.run(rounds(cluster, count))


def ms(values: list[float]) -> str:
    return f"p50 {statistics.median(values):7.1f} ms, max {max(values):7.1f} ms"


def report(name: str, figures: tuple[list[float], dict[int, list[float]], list[float]]) -> None:
    latest, per_broker, trips = figures
    print(f"{name}:")
    print(f"  AlterConfigs round trip (yardstick)  : {ms(trips)}")
    print(f"  in force on every broker, from answer: {ms(latest)}"
          f"  ({statistics.median(latest) / statistics.median(trips):.1f} round trips)")
    print("  each broker alone, p50               : " + ", ".join(
        f"broker {b} {statistics.median(v):.1f} ms" for b, v in sorted(per_broker.items())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--baseline-python", default=None,
                        help="also measure a cluster run by this interpreter (another build)")
    parser.add_argument("--dir", default=None, help="where the clusters' data goes (temp dir)")
    args = parser.parse_args()
    print(f"{args.rounds} rounds, max.message.bytes {LIMIT_LOW} <-> {LIMIT_HIGH}, probe of "
          f"{PROBE_BYTES} B every {PROBE_GAP_MS} ms on each partition's leader")
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        report(f"this build ({sys.executable})",
               measure(None, args.rounds, str(Path(tmp) / "this")))
        if args.baseline_python:
            report(f"baseline ({args.baseline_python})",
                   measure(args.baseline_python, args.rounds, str(Path(tmp) / "baseline")))


if __name__ == "__main__":
    main()
