"""Real clients nobody here wrote, against a three-broker epochlog cluster of real processes.

Each client (kcat, confluent-kafka, kafka-python, aiokafka) produces 10,000 records with keys and
headers, 2,000 under each compression codec (none, gzip, snappy, lz4, zstd), to a topic of three
partitions spread over the three brokers, then consumes the topic with the same client. What comes
back must be the same bytes (key, value, headers), each partition in the order it was written,
nothing missing and nothing twice.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.error_codes import ErrorCode
from tests.broker.cluster import WAIT_S, Cluster

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PER_CODEC = 2_000
TOTAL = PER_CODEC * len(CODECS)
CONSUME_S_MAX = 120.0

Record = tuple[bytes, bytes, tuple[tuple[str, bytes], ...]]


def records_for(client: str) -> dict[str, list[Record]]:
    """The records each codec's producer sends: text only, so kcat's line format can carry them."""
    out = {}
    for codec in CODECS:
        out[codec] = [(f"{client}-{codec}-{i % 97}".encode(),
                       f"value {i} of {codec} from {client} ".encode() * (1 + i % 5),
                       (("codec", codec.encode()), ("client", client.encode())))
                      for i in range(PER_CODEC)]
    return out


def check(sent: dict[str, list[Record]], got: list[tuple[int, int, Record]]) -> None:
    """Same multiset of records, and each key's records in the order sent (keys pin partitions)."""
    assert len(got) == TOTAL, f"got {len(got)} records, sent {TOTAL}"
    by_partition: dict[int, list[int]] = defaultdict(list)
    for partition, offset, _ in got:
        by_partition[partition].append(offset)
    for partition, offsets in by_partition.items():
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets), partition
    assert len(by_partition) == 3, "keys should have spread over the three partitions"
    assert sorted(r for _, _, r in got) == sorted(r for rs in sent.values() for r in rs)
    order: dict[bytes, list[bytes]] = defaultdict(list)
    for _, _, (key, value, _) in sorted(got, key=lambda g: (g[0], g[1])):
        order[key].append(value)
    for records in sent.values():
        expected: dict[bytes, list[bytes]] = defaultdict(list)
        for key, value, _ in records:
            expected[key].append(value)
        for key, values in expected.items():
            assert order[key] == values, f"records of key {key!r} came back out of order"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(tmp_path_factory.mktemp("interop"), brokers=3) as c:
        yield c


def topic(cluster: Cluster, name: str) -> str:
    cluster.create_topic(name, partitions=3, replication_factor=1)
    leaders = cluster.wait_leaders(name, 3)
    assert len({leader for leader, _ in leaders.values()}) == 3, "partitions not spread"
    return name


def test_confluent_kafka(cluster: Cluster) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    name, sent = topic(cluster, "m-confluent"), records_for("confluent")
    for codec, records in sent.items():
        producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                       "compression.type": codec, "linger.ms": 5})
        for key, value, headers in records:
            producer.produce(name, key=key, value=value, headers=list(headers))
            producer.poll(0)
        assert producer.flush(WAIT_S) == 0
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused",
                                   "enable.auto.commit": False})
    consumer.assign([confluent.TopicPartition(name, p, 0) for p in range(3)])
    got: list[tuple[int, int, Record]] = []
    deadline = time.monotonic() + CONSUME_S_MAX
    while len(got) < TOTAL and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.5):
            assert not m.error(), m.error()
            got.append((m.partition(), m.offset(), (m.key(), m.value(), tuple(m.headers()))))
    consumer.close()
    check(sent, got)


def test_kafka_python(cluster: Cluster) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    name, sent = topic(cluster, "m-kafka-python"), records_for("kafka-python")
    for codec, records in sent.items():
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5,
                                 compression_type=None if codec == "none" else codec)
        for key, value, headers in records:
            producer.send(name, key=key, value=value, headers=list(headers))
        producer.flush(timeout=WAIT_S)
        producer.close()
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False)
    consumer.assign([TopicPartition(name, p) for p in range(3)])
    consumer.seek_to_beginning()
    got: list[tuple[int, int, Record]] = []
    deadline = time.monotonic() + CONSUME_S_MAX
    while len(got) < TOTAL and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [(r.partition, r.offset, (r.key, r.value, tuple(r.headers))) for r in records]
    consumer.close()
    check(sent, got)


def test_aiokafka(cluster: Cluster) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    name, sent = topic(cluster, "m-aiokafka"), records_for("aiokafka")

    async def scenario() -> list[tuple[int, int, Record]]:
        for codec, records in sent.items():
            producer = aiokafka.AIOKafkaProducer(
                bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=5,
                compression_type=None if codec == "none" else codec)
            await producer.start()
            try:
                futures = [await producer.send(name, key=k, value=v, headers=list(h))
                           for k, v, h in records]
                await asyncio.gather(*futures)
            finally:
                await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap,
                                             enable_auto_commit=False)
        await consumer.start()
        got: list[tuple[int, int, Record]] = []
        try:
            partitions = [aiokafka.TopicPartition(name, p) for p in range(3)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            async with asyncio.timeout(CONSUME_S_MAX):
                while len(got) < TOTAL:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got += [(r.partition, r.offset, (r.key, r.value, tuple(r.headers)))
                                for r in records]
        finally:
            await consumer.stop()
        return got

    check(sent, asyncio.run(scenario()))


def test_kcat(cluster: Cluster, tmp_path: Path) -> None:
    assert shutil.which("kcat"), "kcat is an interop peer: .ci/run installs Debian's kcat"
    name, sent = topic(cluster, "m-kcat"), records_for("kcat")
    for codec, records in sent.items():
        # kcat takes per-run headers (-H), key and value per line (-K with a tab delimiter).
        lines = b"".join(k + b"\t" + v + b"\n" for k, v, _ in records)
        subprocess.run(["kcat", "-b", cluster.bootstrap, "-P", "-t", name, "-K", "\t",
                        "-z", codec, "-X", "acks=all", "-H", f"codec={codec}", "-H", "client=kcat"],
                       input=lines, check=True, timeout=CONSUME_S_MAX)
    out = subprocess.run(["kcat", "-b", cluster.bootstrap, "-C", "-t", name, "-e", "-q",
                          "-f", "%p\t%o\t%k\t%s\t%h\n"],
                         check=True, timeout=CONSUME_S_MAX, capture_output=True).stdout
    got: list[tuple[int, int, Record]] = []
    for line in out.splitlines():
        partition, offset, key, value, headers = line.split(b"\t")
        pairs = tuple((k.decode(), v) for k, v in (h.split(b"=", 1) for h in headers.split(b",")))
        got.append((int(partition), int(offset), (key, value, pairs)))
    check(sent, got)


def test_confluent_lists_all_topics(cluster: Cluster) -> None:
    """librdkafka's all-topics Metadata v12 request carries three bytes after its last field;
    Kafka's brokers ignore them and so must we (the connection used to be closed)."""
    admin_module = pytest.importorskip("confluent_kafka.admin")
    topic(cluster, "m-listed")
    admin = admin_module.AdminClient({"bootstrap.servers": cluster.bootstrap})
    assert "m-listed" in admin.list_topics(timeout=WAIT_S).topics


def test_unknown_topic_without_auto_create_is_unknown(cluster: Cluster) -> None:
    from epochlog.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic

    answer = cluster.any_broker().call(ApiKey.METADATA, MetadataRequest(
        topics=[MetadataRequestTopic(name="never-made")], allow_auto_topic_creation=False))
    # not "being created"
    assert answer.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
