"""`epochlog groups` as a user runs it (a real child process, a real 3-broker cluster), beside a
kafka-python consumer group: list, describe with lag, reset-offsets (a dry run unless
--execute; refused while the group has live members), delete-offsets (refused for a topic a
member subscribes to), delete; every bad input is one line on stderr and exit 1, never a
traceback."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, OffsetAndMetadata, TopicPartition
from kafka.errors import RebalanceInProgressError

from tests.kafka_python_quirks import rejoin_if_lost

ROOT = Path(__file__).resolve().parents[2]
RUN_S_MAX = 60.0
SETTINGS = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 1000}


def groups(bootstrap: str, *args: str) -> tuple[int, str, str]:
    done = subprocess.run([sys.executable, "-m", "epochlog", "groups", *args,
                           "--bootstrap-server", bootstrap], capture_output=True, text=True,
                          cwd=ROOT, timeout=RUN_S_MAX)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout, done.stderr


def rows(stdout: str) -> dict[tuple[str, int], list[str]]:
    """describe's / reset's table, by (topic, partition)."""
    out = {}
    for line in stdout.splitlines():
        cells = line.split("\t")
        if len(cells) >= 3 and cells[1].isdigit():
            out[(cells[0], int(cells[1]))] = cells[2:]
    return out


def member(bootstrap: str, group: str) -> tuple[Any, int]:
    """A kafka-python member of group, once it has partitions; and how many records it read
    while joining."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=6000, heartbeat_interval_ms=500)
    deadline = time.monotonic() + RUN_S_MAX
    # kafka-python's leader assigns nothing, and does not rejoin, if its metadata lacks the
    # topic when the group forms: subscribe once it knows the partitions.
    while not consumer.partitions_for_topic("orders"):
        assert time.monotonic() < deadline, "kafka-python never saw the topic's partitions"
        time.sleep(0.2)
    consumer.subscribe(["orders"])
    seen = 0
    while not consumer.assignment():
        assert time.monotonic() < deadline, "the member got no partitions"
        rejoin_if_lost(consumer)
        seen += sum(len(b) for b in consumer.poll(200).values())
    return consumer, seen


@pytest.fixture
def bootstrap(epochlog_cluster: Any) -> str:
    c = epochlog_cluster(brokers=3, settings=SETTINGS)
    c.create_topic("orders", partitions=2, replication_factor=3)
    producer = KafkaProducer(bootstrap_servers=c.bootstrap_servers, acks="all")
    for i in range(20):
        producer.send("orders", value=b"v%d" % i, partition=i % 2)
    producer.flush(30)
    producer.close()
    consumer, seen = member(c.bootstrap_servers, "billing")
    deadline = time.monotonic() + RUN_S_MAX
    while seen < 20:
        assert time.monotonic() < deadline, f"read {seen} of 20"
        rejoin_if_lost(consumer)
        seen += sum(len(b) for b in consumer.poll(500).values())
    # What was read: 10 records on each partition. Committed as explicit offsets, again after a
    # poll if a rebalance is under way: on a loaded machine kafka-python can rejoin just then,
    # and lose the join (tests/kafka_python_quirks.py); it refuses a commit until its poll has
    # finished the rebalance (which also resets its positions).
    offsets = {TopicPartition("orders", p): OffsetAndMetadata(10, "", -1) for p in (0, 1)}
    while True:
        try:
            consumer.commit(offsets)
            break
        except RebalanceInProgressError:
            assert time.monotonic() < deadline, "the commit met a rebalance until the deadline"
            rejoin_if_lost(consumer)
            consumer.poll(200)
    consumer.close()
    return str(c.bootstrap_servers)


def test_list_describe_reset_delete(bootstrap: str) -> None:
    code, out, _ = groups(bootstrap, "list")
    assert code == 0 and "billing\tEmpty\tconsumer" in out, out

    code, out, _ = groups(bootstrap, "describe", "billing")
    assert code == 0 and "group billing: Empty, 0 members" in out, out
    assert rows(out) == {("orders", p): ["10", "10", "0", "-", "-", "-"] for p in (0, 1)}

    code, out, err = groups(bootstrap, "reset-offsets", "billing", "--topic", "orders",
                            "--to-earliest")
    assert code == 0 and rows(out) == {("orders", 0): ["0"], ("orders", 1): ["0"]}
    assert "dry run" in err
    _, out, _ = groups(bootstrap, "describe", "billing")
    assert rows(out)[("orders", 0)][:3] == ["10", "10", "0"], "a dry run changed offsets"

    code, _, _ = groups(bootstrap, "reset-offsets", "billing", "--topic", "orders",
                        "--to-earliest", "--execute")
    assert code == 0
    code, _, _ = groups(bootstrap, "reset-offsets", "billing", "--topic", "orders:1",
                        "--shift-by", "3", "--execute")
    assert code == 0
    _, out, _ = groups(bootstrap, "describe", "billing")
    assert rows(out)[("orders", 0)][:3] == ["0", "10", "10"]
    assert rows(out)[("orders", 1)][:3] == ["3", "10", "7"]

    live, _ = member(bootstrap, "billing")
    try:
        code, _, err = groups(bootstrap, "reset-offsets", "billing", "--all-topics",
                              "--to-latest", "--execute")
        assert code == 1 and "has live members" in err, err
        code, out, _ = groups(bootstrap, "describe", "billing")
        assert "Stable, 1 member," in out and "kafka-python" in out, out
        code, out, _ = groups(bootstrap, "delete-offsets", "billing", "--topic", "orders:0")
        assert code == 1 and "GROUP_SUBSCRIBED_TO_TOPIC" in out, out
        code, _, err = groups(bootstrap, "delete", "billing")
        assert code == 1 and "NON_EMPTY_GROUP" in err and len(err.splitlines()) == 1, err
    finally:
        live.close()

    deadline = time.monotonic() + RUN_S_MAX
    while "billing\tEmpty" not in groups(bootstrap, "list")[1]:
        assert time.monotonic() < deadline, "the group never became Empty again"
        time.sleep(0.5)
    code, out, _ = groups(bootstrap, "delete-offsets", "billing", "--topic", "orders:0")
    assert code == 0 and "orders\t0\tdeleted" in out
    _, out, _ = groups(bootstrap, "describe", "billing")
    assert set(rows(out)) == {("orders", 1)}
    code, out, _ = groups(bootstrap, "delete", "billing")
    assert code == 0 and "deleted group billing" in out
    code, out, _ = groups(bootstrap, "list")
    assert "billing" not in out


BAD_INPUTS = [
    (("delete", "nobody"), "GROUP_ID_NOT_FOUND"),
    (("describe", "nobody"), "no such group nobody"),  # not "Dead, 0 members" and exit 0
    (("reset-offsets", "billing", "--topic", "orders:x", "--to-earliest"), "partitions must be"),
    (("reset-offsets", "billing", "--topic", "orders:7", "--to-earliest"), "no partition 7"),
    (("reset-offsets", "billing", "--topic", "nope", "--to-earliest"), "UNKNOWN_TOPIC"),
    (("reset-offsets", "billing", "--topic", "orders", "--to-datetime", "yesterday"),
     "not an ISO-8601 time"),
    (("reset-offsets", "billing", "--topic", "orders", "--to-datetime", "2026-01-01T00:00"),
     "needs a time zone"),
    (("reset-offsets", "nobody", "--all-topics", "--to-earliest"), "no committed offsets"),
]


def test_bad_input_is_one_line_and_exit_1(bootstrap: str) -> None:
    for args, words in BAD_INPUTS:
        code, _, err = groups(bootstrap, *args)
        assert code == 1 and words in err and len(err.strip().splitlines()) == 1, (args, err)


def test_no_cluster_is_one_line_and_exit_1() -> None:
    code, _, err = groups("127.0.0.1:1", "list")
    assert code == 1 and err.startswith("epochlog: ") and len(err.strip().splitlines()) == 1, err
