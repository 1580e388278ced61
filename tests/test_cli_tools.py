"""`epochlog topics|produce|consume` as a user runs them, against real processes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from client.partitioner import partition_for_key
from tests.broker.cluster import Cluster

WAIT_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(tmp_path_factory.mktemp("cli"), brokers=3) as c:
        yield c


def epochlog(cluster: Cluster, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "epochlog", *args,
                           "--bootstrap-server", cluster.bootstrap],
                          input=stdin, capture_output=True, timeout=WAIT_S)


def test_topic_lifecycle_produce_and_consume(cluster: Cluster) -> None:
    made = epochlog(cluster, "topics", "create", "cli-orders", "--partitions", "3",
                    "--replication-factor", "1", "--config", "retention.ms=600000")
    assert made.returncode == 0, made.stderr
    assert b"cli-orders" in epochlog(cluster, "topics", "list").stdout
    described = epochlog(cluster, "topics", "describe", "cli-orders").stdout.decode().splitlines()
    assert [line.split("\t")[1] for line in described] == [f"partition {p}" for p in range(3)]

    lines = [f"key{i % 7}:value {i}" for i in range(300)]
    sent = epochlog(cluster, "produce", "cli-orders", "--key-delimiter", ":", "--compression",
                    "lz4", stdin="\n".join(lines).encode() + b"\n")
    assert sent.returncode == 0 and b"produced 300 records" in sent.stderr, sent.stderr
    got = epochlog(cluster, "consume", "cli-orders", "--from-beginning", "--print-key")
    assert sorted(got.stdout.decode().splitlines()) == sorted(lines)
    # Keys went where Java's partitioner sends them, in the order written.
    p = partition_for_key(b"key3", 3)
    one = epochlog(cluster, "consume", "cli-orders", "--partition", str(p), "--offset", "0",
                   "--print-key").stdout.decode().splitlines()
    assert [x for x in one if x.startswith("key3:")] == [x for x in lines if x.startswith("key3:")]
    limited = epochlog(cluster, "consume", "cli-orders", "--from-beginning", "--max-messages", "5")
    assert len(limited.stdout.splitlines()) == 5

    assert epochlog(cluster, "topics", "delete", "cli-orders").returncode == 0


def test_errors_are_named_and_exit_1(cluster: Cluster) -> None:
    bad = epochlog(cluster, "topics", "create", "bad name!")
    assert bad.returncode == 1 and b"INVALID_TOPIC_EXCEPTION (17)" in bad.stderr
    assert epochlog(cluster, "topics", "create", "twice", "--replication-factor", "1").returncode == 0
    again = epochlog(cluster, "topics", "create", "twice")
    assert again.returncode == 1 and b"TOPIC_ALREADY_EXISTS (36)" in again.stderr
    setting = epochlog(cluster, "topics", "create", "cfg", "--config", "retention.ms")
    assert setting.returncode == 1 and b"is not NAME=VALUE" in setting.stderr
