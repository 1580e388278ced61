"""Compaction on real processes: three brokers, a topic created with cleanup.policy=compact and
small segments, many updates to a few keys from kafka-python; every replica cleans its own log
(as in Kafka), and consumers nobody here wrote (kafka-python, confluent-kafka) reading from the
beginning see the latest value of every key, across offset gaps. A record without a key is
refused (INVALID_RECORD)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from .cluster import WAIT_S, Cluster

TOPIC = "compacted"
KEYS = 8
UPDATES = 3000
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _records_on_disk(partition_dir: str) -> int:
    """Records in a replica's segments, by `epochlog dump-log`."""
    out = subprocess.run([sys.executable, "-m", "epochlog.cli", "dump-log", partition_dir],
                         cwd=ROOT, capture_output=True, text=True, timeout=WAIT_S, check=True)
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert all(line.get("crc_valid") for line in lines), out.stdout[-500:]
    return sum(line["record_count"] for line in lines)


def _read_kafka_python(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes]]:
    from kafka import KafkaConsumer, TopicPartition
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(TOPIC, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    deadline = time.monotonic() + WAIT_S
    while consumer.position(tp) < end and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [(r.offset, r.key, r.value) for r in records]
    consumer.close()
    return got


def _read_confluent(bootstrap: str, end: int) -> list[tuple[int, bytes, bytes]]:
    confluent = pytest.importorskip("confluent_kafka")
    consumer = confluent.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                                   "enable.auto.commit": False})
    consumer.assign([confluent.TopicPartition(TOPIC, 0, confluent.OFFSET_BEGINNING)])
    got: list[tuple[int, bytes, bytes]] = []
    deadline = time.monotonic() + WAIT_S
    while (not got or got[-1][0] < end - 1) and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append((message.offset(), message.key(), message.value()))
    consumer.close()
    return got


def _latest(records: list[tuple[int, bytes, bytes]]) -> dict[bytes, bytes]:
    return {key: value for _, key, value in records}


def test_every_replica_compacts_and_consumers_see_the_latest_value_per_key(tmp_path) -> None:
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    with Cluster(tmp_path, brokers=3,
                 broker_args=("--set", "log_cleaner_interval_ms=200")) as cluster:
        cluster.create_topic(TOPIC, 1, 3, **{"cleanup.policy": "compact",
                                             "segment.bytes": "4096",
                                             "min.cleanable.dirty.ratio": "0.2"})
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                                 batch_size=1024, linger_ms=5)
        last: dict[bytes, bytes] = {}
        futures = []
        for i in range(UPDATES):
            key, value = b"key-%d" % (i % KEYS), b"value-%d-" % i + b"x" * 40
            futures.append(producer.send(TOPIC, key=key, value=value))
            last[key] = value
        producer.flush(timeout=WAIT_S)
        end = max(f.get(timeout=WAIT_S).offset for f in futures) + 1
        with pytest.raises(KafkaError, match="InvalidRecord"):
            producer.send(TOPIC, key=None, value=b"no key").get(timeout=WAIT_S)
        producer.close()

        for broker in cluster.brokers.values():  # leader and followers each clean their own
            broker.wait_line(rf"{TOPIC}-0: cleaned offsets \[")
        for broker in cluster.brokers.values():
            on_disk = _records_on_disk(str(broker.data_dir / f"{TOPIC}-0"))
            assert on_disk < UPDATES / 2, f"broker {broker.broker_id} kept {on_disk} records"

        for read in (_read_kafka_python, _read_confluent):
            got = read(cluster.bootstrap, end)
            assert _latest(got) == last, read.__name__
            offsets = [offset for offset, _, _ in got]
            assert offsets == sorted(set(offsets)) and offsets[-1] == end - 1
            assert len(got) < UPDATES / 2, f"{read.__name__}: {len(got)} records, no compaction"
