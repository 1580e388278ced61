"""Kill test (issue 5; docs/design.md, guarantees 1, 2 and 5), on real processes.

Three brokers, a topic with replication factor 3 and min.insync.replicas 2, unclean election off.
An idempotent acks=all confluent-kafka producer writes a numbered stream while a killer SIGKILLs
one broker at a time and starts it again after a random pause (sometimes within its session, a
bounce; sometimes after the session expired). Every send, acknowledgement and kill is recorded in
a History. Then, once the cluster is quiet, the topic is read back into the same history and:

- `check` finds no anomaly at all: every acknowledged record is read back, once, at the offset
  it was acknowledged at (no lost-write, unseen, duplicate or inconsistent-offsets), and per
  partition the producer's records got offsets in the order it sent them (no
  nonmonotonic-send: order kept across retries and failovers);
- every record offered was acknowledged, none failed;
- `epochlog dump-log` of every replica shows the same batches (offsets, epochs, producer
  fields, sizes, CRC valid).

CI runs it for KILL_S_CI seconds; `--run-slow` runs the full minute.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest

from epochlog.testing import Cluster, History, check
from epochlog.testing.history import Fault
from epochlog.testing.traffic import produce_paced, read_back
from tests.chaos.replicas import wait_quiet

TOPIC = "chaos"
PARTITIONS = 3
KILL_S_CI = 20
KILL_S_FULL = 60
RATE_PER_S = 1500  # records offered per second (bounded so two cores keep up)
SESSION_MS = 3000
PRODUCER_JOIN_S = 120.0  # the producer's final flush is bounded at 90 s

SETTINGS = {"broker_session_timeout_ms": SESSION_MS,
            "broker_heartbeat_interval_ms": SESSION_MS // 4,
            "replica_lag_time_max_ms": 3000}


def kill_loop(cluster: Cluster, seconds: float, rng: random.Random) -> None:
    """SIGKILL a random broker every 1.5-3.5 s and start it again after a random downtime;
    the faults go to the history through the cluster's on_fault."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(rng.uniform(1.5, 3.5))
        victim = rng.choice(sorted(cluster.brokers))
        cluster.kill(victim)
        time.sleep(rng.choice([0.2, 1.0, 2.0, SESSION_MS / 1000 + 1.5]))  # the downtime
        cluster.restart(victim)


def run(make: Callable[..., Cluster], seconds: float, seed: int) -> None:
    rng = random.Random(seed)
    history = History()
    cluster = make(brokers=3, settings=SETTINGS, on_fault=history.record_fault)
    cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                         configs={"min.insync.replicas": 2})
    stop = threading.Event()
    result: dict[str, int] = {}
    producer = threading.Thread(target=lambda: result.setdefault("sent", produce_paced(
        cluster.bootstrap_servers, TOPIC, RATE_PER_S, stop, history=history,
        placement=lambda n: {"key": str(n % 97).encode()})))
    producer.start()
    try:
        kill_loop(cluster, seconds, rng)
    finally:
        stop.set()
        producer.join(PRODUCER_JOIN_S)
    assert not producer.is_alive(), "the producer did not finish"
    assert "sent" in result, "the producer failed (see its traceback above)"
    wait_quiet(cluster, TOPIC, PARTITIONS, replicas=3)
    read_back(cluster.bootstrap_servers, TOPIC, PARTITIONS, history=history)

    verdict = check(history)
    done = [op for op in history.ops if isinstance(op, Fault)]
    faults = "\n".join(f"{op.t_ms:9.0f} ms {op.kind} {op.targets} {op.detail}" for op in done)
    kills = sum(op.kind == "kill" for op in done)
    assert kills >= seconds // 6, f"only {kills} kills happened\n{faults}"
    stats = verdict.stats
    assert stats["sends_acked"] > 0, f"nothing was acknowledged\n{verdict}"
    assert stats["sends_failed"] == stats["sends_unknown"] == 0, f"{stats}\n{verdict}"
    assert stats["sends"] == result["sent"], f"{result['sent']} offered, {stats}"
    assert verdict.ok and not verdict.counts, f"{verdict}\n{faults}"
    assert stats["values_read"] == stats["sends_acked"], stats


def test_kill_brokers_while_producing(epochlog_cluster: Callable[..., Cluster]) -> None:
    run(epochlog_cluster, KILL_S_CI, seed=101)


@pytest.mark.slow
def test_kill_brokers_while_producing_full_minute(epochlog_cluster: Callable[..., Cluster]
                                                  ) -> None:
    run(epochlog_cluster, KILL_S_FULL, seed=202)
