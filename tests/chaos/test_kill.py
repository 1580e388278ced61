"""Kill test (issue 5; DESIGN.md guarantees 1, 2 and 5), on real processes.

Three brokers, a topic with replication factor 3 and min.insync.replicas 2, unclean election off.
An idempotent acks=all confluent-kafka producer writes a numbered stream while a killer SIGKILLs
one broker at a time and starts it again after a random pause (sometimes within its session, a
bounce; sometimes after the session expired). Then, once the cluster is quiet:

- every acknowledged record is read back exactly once, at the offset it was acknowledged at;
- per partition the numbers only grow (order kept across retries and failovers);
- no number appears twice (idempotence: retries never duplicate);
- `epochlog dump-log` of every replica shows the same batches (offsets, epochs, producer
  fields, sizes, CRC valid).

CI runs it for KILL_S_CI seconds; `--run-slow` runs the full minute.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.broker.cluster import Cluster
from tests.chaos.replicas import produce_paced, read_all, wait_quiet

TOPIC = "chaos"
PARTITIONS = 3
KILL_S_CI = 20
KILL_S_FULL = 60
RATE_PER_S = 1500  # records offered per second (bounded so two cores keep up)
SESSION_MS = 3000

CONTROLLER_ARGS = ["--set", f"broker_session_timeout_ms={SESSION_MS}"]
BROKER_ARGS = ["--set", f"broker_heartbeat_interval_ms={SESSION_MS // 4}",
               "--set", "replica_lag_time_max_ms=3000"]


class Acks:
    """What the producer was told: partition -> [(offset, number)], and failures."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.acked: dict[int, list[tuple[int, int]]] = {i: [] for i in range(PARTITIONS)}
        self.failed: list[str] = []

    def on_delivery(self, err: object, msg: object) -> None:
        with self.lock:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.acked[msg.partition()].append((msg.offset(), int(msg.value())))  # type: ignore[attr-defined]


def produce(bootstrap: str, acks: Acks, stop: threading.Event) -> int:
    return produce_paced(bootstrap, TOPIC, RATE_PER_S, stop, acks.on_delivery,
                         lambda n: {"key": str(n % 97).encode()})


def kill_loop(cluster: Cluster, seconds: float, rng: random.Random, events: list[str]) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(1.5, 3.5))
        victim = rng.choice(sorted(cluster.brokers))
        broker = cluster.broker(victim)
        broker.stop(signal.SIGKILL)
        down_s = rng.choice([0.2, 1.0, 2.0, SESSION_MS / 1000 + 1.5])
        events.append(f"{time.monotonic():.1f} SIGKILL broker {victim}, down {down_s} s")
        time.sleep(down_s)
        broker.start()
        generation = broker.wait_started()
        events.append(f"{time.monotonic():.1f} broker {victim} back, generation {generation}")


def run(tmp_path: Path, seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    events: list[str] = []
    with Cluster(tmp_path, brokers=3, controller_args=CONTROLLER_ARGS,
                 broker_args=BROKER_ARGS) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                             **{"min.insync.replicas": "2"})
        acks, stop = Acks(), threading.Event()
        result: dict[str, int] = {}
        producer = threading.Thread(
            target=lambda: result.setdefault("sent", produce(cluster.bootstrap, acks, stop)))
        producer.start()
        try:
            kill_loop(cluster, seconds, rng, events)
        finally:
            stop.set()
            producer.join(120)
        assert not producer.is_alive(), "the producer did not finish"
        assert "sent" in result, "the producer failed (see its traceback above)"
        wait_quiet(cluster, TOPIC, PARTITIONS, replicas=3)
        got = read_all(cluster.bootstrap, TOPIC, PARTITIONS)

    story = "\n".join(events)
    kills = sum("SIGKILL" in e for e in events)
    assert kills >= seconds // 6, f"only {kills} kills happened\n{story}"
    total_acked = sum(len(v) for v in acks.acked.values())
    assert total_acked > 0, f"nothing was acknowledged; failures: {acks.failed[:5]}\n{story}"
    assert not acks.failed, f"{len(acks.failed)} deliveries failed: {acks.failed[:5]}\n{story}"
    for index in range(PARTITIONS):
        numbers = [int(value) for _, value in got[index]]
        assert len(numbers) == len(set(numbers)), f"partition {index}: duplicates\n{story}"
        assert numbers == sorted(numbers), f"partition {index}: order broken\n{story}"
        at = dict(got[index])
        lost = [(off, n) for off, n in acks.acked[index] if at.get(off) != str(n).encode()]
        assert not lost, (f"partition {index}: {len(lost)} acknowledged records missing or "
                          f"moved, first {lost[:5]}\n{story}")
    assert total_acked == result["sent"], f"{result['sent']} sent, {total_acked} acknowledged"


def test_kill_brokers_while_producing(tmp_path: Path) -> None:
    run(tmp_path, KILL_S_CI, seed=101)


@pytest.mark.slow
def test_kill_brokers_while_producing_full_minute(tmp_path: Path) -> None:
    run(tmp_path, KILL_S_FULL, seed=202)
