"""DeleteRecords (21), DescribeLogDirs (35) and DescribeProducers (61) on a real 3-broker
cluster, through confluent-kafka's and kafka-python's admin clients and ours:

- records below an offset become unreadable on the leader at once and on every in-sync replica
  before the answer (the low watermark), the move survives the leader's SIGKILL (a follower
  that takes over starts at the same offset) and its restart (the checkpoint), and a consumer
  reading from the start begins there;
- an offset past the high watermark is OFFSET_OUT_OF_RANGE, a compacted topic POLICY_VIOLATION;
- DescribeLogDirs names each broker's data dir with the partitions' sizes, DescribeProducers the
  idempotent producer that wrote them.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

import pytest

from epochlog import Admin, TopicPartition

confluent = pytest.importorskip("confluent_kafka")
kafka_admin = pytest.importorskip("kafka.admin")
from confluent_kafka import TopicPartition as CTP  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from kafka import TopicPartition as KTP  # noqa: E402

RECORDS = 100


def fill(bootstrap: str, topic: str) -> None:
    producer = confluent.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                   "enable.idempotence": True, "linger.ms": 0})
    for i in range(RECORDS):
        producer.produce(topic, value=b"r%d" % i, partition=0)
        producer.poll(0)
    assert producer.flush(30) == 0


def first_value(bootstrap: str, topic: str) -> tuple[int, bytes]:
    consumer = confluent.Consumer({"bootstrap.servers": bootstrap, "group.id": "reader",
                                   "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False})
    try:
        consumer.assign([CTP(topic, 0, -2)])  # OFFSET_BEGINNING
        for _ in range(300):
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                return msg.offset(), msg.value()
        raise AssertionError("nothing read")
    finally:
        consumer.close()


def earliest(bootstrap: str, topic: str) -> int:
    async def ask() -> int:
        async with Admin(bootstrap) as admin:
            tp = TopicPartition(topic, 0)
            return (await admin.list_offsets({tp: "earliest"}))[tp].offset
    return asyncio.run(ask())


def test_records_deleted_on_every_replica_for_good(epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=3, settings={"min.insync.replicas": 2})
    c.create_topic("old", partitions=1, replication_factor=3)
    c.create_topic("kept", partitions=1, replication_factor=3,
                   configs={"cleanup.policy": "compact"})
    fill(c.bootstrap_servers, "old")
    c.wait_fully_replicated("old")

    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    done = admin.delete_records([CTP("old", 0, 30)], request_timeout=30)
    [(tp, future)] = done.items()
    assert future.result(30).low_watermark == 30  # every in-sync replica moved
    assert first_value(c.bootstrap_servers, "old") == (30, b"r30")

    kp = kafka_admin.KafkaAdminClient(bootstrap_servers=c.bootstrap_servers)
    try:
        kp.delete_records({KTP("old", 0): 40})
        with pytest.raises(Exception, match="OffsetOutOfRange"):
            kp.delete_records({KTP("old", 0): RECORDS + 5})
        with pytest.raises(Exception, match="PolicyViolation"):
            kp.delete_records({KTP("kept", 0): 0})

        dirs = kp.describe_log_dirs()  # per broker: {"broker", "log_dirs": [{"topics": ...}]}
        assert sorted(b["broker"] for b in dirs) == [1, 2, 3], dirs
        sizes = [p["partition_size"] for b in dirs for d in b["log_dirs"] for t in d["topics"]
                 if t["name"] == "old" for p in t["partitions"]]
        assert len(sizes) == 3 and all(size > 0 for size in sizes), dirs
        assert all(d["log_dir"].endswith(f"broker-{b['broker']}") and d["total_bytes"] > 0
                   for b in dirs for d in b["log_dirs"]), dirs
        producers = kp.describe_producers([KTP("old", 0)])
        [state] = producers.values()
        active = list(getattr(state, "active_producers", state))
        assert len(active) == 1 and _field(active[0], "last_sequence") == RECORDS - 1, state
    finally:
        kp.close()

    # The move was replicated and checkpointed: whoever leads next starts at 40.
    old_leader = c.leader_of("old", 0)
    c.kill(old_leader)
    deadline = time.monotonic() + 60
    while c.leader_of("old", 0) in (old_leader, -1):
        assert time.monotonic() < deadline, "no new leader after the old one was killed"
        time.sleep(0.2)
    assert earliest(c.bootstrap_servers, "old") == 40
    c.restart(old_leader)
    c.wait_fully_replicated("old")
    assert earliest(c.bootstrap_servers, "old") == 40

    async def ours() -> tuple[dict[TopicPartition, int], dict[int, Any]]:
        async with Admin(c.bootstrap_servers) as a:
            return (await a.delete_records({TopicPartition("old", 0): 50}),
                    await a.describe_log_dirs())
    low, dirs = asyncio.run(ours())
    assert low == {TopicPartition("old", 0): 50}
    assert sorted(dirs) == [1, 2, 3]
    assert all(d.partition_bytes[TopicPartition("old", 0)] > 0 for d in dirs.values())

    cli = [sys.executable, "-m", "epochlog", "delete-records", "old", "--bootstrap-server",
           c.bootstrap_servers]
    done = subprocess.run([*cli, "--offset", "-1"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == f"old\t0\tlow watermark {RECORDS}\n", done
    bad = subprocess.run([*cli, "--partition", "3", "--offset", "1"], capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 1 and bad.stderr == "epochlog: old has no partition 3 (it has 1)\n"


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, dict) else getattr(item, name)


def test_a_producer_whose_records_were_deleted_goes_on_as_in_kafka(epochlog_cluster: Any) -> None:
    """librdkafka's test 0103: DeleteRecords took every batch of a transaction still open, then
    the producer sent its next batch, sequence 10. Kafka no longer knows the producer and takes
    the batch; epochlog answered OUT_OF_ORDER_SEQUENCE_NUMBER, fatal to a transactional
    producer. Now the transaction goes on and commits, and read_committed readers get it."""
    c = epochlog_cluster(brokers=1)
    c.create_topic("txn", partitions=1, replication_factor=1)
    failed: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    producer = confluent.Producer({"bootstrap.servers": c.bootstrap_servers,
                                   "transactional.id": "deleted-under-it", "linger.ms": 0})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):  # ten batches, sequences 0..9
        producer.produce("txn", value=b"early%d" % i, partition=0, on_delivery=report)
        assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    [(_, done)] = admin.delete_records([CTP("txn", 0, -1)], request_timeout=30).items()
    assert done.result(30).low_watermark == 10
    for i in range(5):
        producer.produce("txn", value=b"late%d" % i, partition=0, on_delivery=report)
    assert producer.flush(30) == 0
    assert failed == []
    producer.commit_transaction(30)

    consumer = confluent.Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "r",
                                   "isolation.level": "read_committed",
                                   "enable.auto.commit": False})
    try:
        consumer.assign([CTP("txn", 0, -2)])  # OFFSET_BEGINNING: the log start, 10
        values: list[bytes] = []
        deadline = time.monotonic() + 60
        while len(values) < 5 and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                values.append(msg.value())
        assert values == [b"late%d" % i for i in range(5)]
    finally:
        consumer.close()
