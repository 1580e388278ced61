"""Transactions across broker restarts, on real processes: a confluent-kafka (librdkafka)
transactional producer commits and aborts; the broker is stopped (SIGTERM: a clean shutdown,
its producer snapshot written at close) or killed (SIGKILL), and started again. Its
read_committed consumers must still see only committed records: the aborted transactions now
come from the partition's .txnindex files, and the producer state from the snapshots. After the
clean shutdown the open replays no batch (the broker's log says so)."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest

from epochlog.testing import Cluster

from ..interop.test_transactions_interop import consume_all

TOPIC = "txr"
SETTINGS = {"transaction_state_log_num_partitions": 1}


def transaction(cluster: Cluster, tid: str, label: str, count: int, *, commit: bool) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "transactional.id": tid, "linger.ms": 5})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(TOPIC, f"{label} {i}".encode())
    producer.flush(30)  # written, so that an abort has something to abort
    if commit:
        producer.commit_transaction(60)
    else:
        producer.abort_transaction(60)


def txn_index_entries(cluster: Cluster) -> list[tuple[int, ...]]:
    folder = cluster.base_dir / "broker-1" / f"{TOPIC}-0"
    out = []
    for path in sorted(folder.glob("*.txnindex")):
        data = path.read_bytes()
        out += [struct.unpack_from(">hqqqq", data, pos) for pos in range(0, len(data), 34)]
    return out


def committed_only(cluster: Cluster, expected: list[bytes]) -> None:
    got = consume_all(cluster, TOPIC, len(expected), "read_committed")
    assert sorted(got) == sorted(expected)


def replayed_at_open(log_text: str) -> list[str]:
    return re.findall(rf"{TOPIC}-0: producer state (.*?), (\d+) batches replayed", log_text)


def test_read_committed_survives_sigterm_and_sigkill(tmp_path: Path) -> None:
    pytest.importorskip("confluent_kafka")
    with Cluster(1, base_dir=tmp_path / "cluster", settings=SETTINGS) as cluster:
        cluster.create_topic(TOPIC, partitions=1, replication_factor=1)
        transaction(cluster, "txr-1", "committed-a", 10, commit=True)
        transaction(cluster, "txr-1", "aborted-a", 5, commit=False)
        transaction(cluster, "txr-2", "committed-b", 10, commit=True)
        committed = [f"committed-{x} {i}".encode() for x in "ab" for i in range(10)]
        committed_only(cluster, committed)

        cluster.stop(1)  # SIGTERM: a clean shutdown
        entries = txn_index_entries(cluster)
        assert len(entries) == 1 and entries[0][0] == 0, entries  # version 0, the one abort
        assert list((cluster.base_dir / "broker-1" / f"{TOPIC}-0").glob("*.snapshot"))
        log_path = cluster.node(1).log_path
        assert log_path is not None
        mark = len(log_path.read_text(errors="replace"))
        cluster.restart(1)
        opened = replayed_at_open(log_path.read_text(errors="replace")[mark:])
        assert opened and opened[0][0].startswith("from the snapshot") \
            and opened[0][1] == "0", opened
        committed_only(cluster, committed)

        transaction(cluster, "txr-2", "aborted-b", 5, commit=False)
        transaction(cluster, "txr-1", "committed-c", 5, commit=True)
        committed += [f"committed-c {i}".encode() for i in range(5)]
        cluster.kill(1)  # SIGKILL: the open recovers, replaying from its recovery point
        cluster.restart(1)
        assert len(txn_index_entries(cluster)) == 2
        committed_only(cluster, committed)
        everything = consume_all(cluster, TOPIC, len(committed) + 10)
        assert sorted(everything) == sorted(
            committed + [f"aborted-{x} {i}".encode() for x in "ab" for i in range(5)])
