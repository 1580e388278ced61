"""Three real brokers and a controller: topics created through a broker, records produced and
consumed with replication factor 1, by our own requests and by real clients nobody here wrote
(kafka-python 3, confluent-kafka, aiokafka, kcat), with acks=1 and acks=all, keys, headers and
compression. Also: bad input to a broker gets the right error code or closes only its own
connection, and the broker's metrics count what it answered.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import struct
import subprocess
import time
import urllib.request

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from epochlog.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.frames import frame
from epochlog.protocol.headers import RequestHeader
from epochlog.protocol.records import build_batch, iter_records, now_ms

from .cluster import WAIT_S, Cluster, free_port


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(tmp_path_factory.mktemp("clients"), brokers=3,
                 broker_args=("--set", "fetch_wait_ms_max=2000")) as c:
        yield c


def _produce(cluster: Cluster, topic: str, index: int, records: list, acks: int,
             version: int = 9, **batch: object):
    leader, _ = cluster.leaders(topic)[index]
    answer = cluster.broker(leader).call(ApiKey.PRODUCE, ProduceRequest(
        acks=acks, timeout_ms=5000, topic_data=[TopicProduceData(
            name=topic, partition_data=[PartitionProduceData(
                index=index, records=build_batch(records, **batch))])]), version)
    return answer.responses[0].partition_responses[0]


def _fetch(cluster: Cluster, topic: str, index: int, offset: int, version: int = 12):
    leader, _ = cluster.leaders(topic)[index]
    answer = cluster.broker(leader).call(ApiKey.FETCH, FetchRequest(
        max_wait_ms=0, min_bytes=1, topics=[FetchTopic(topic=topic, partitions=[
            FetchPartition(partition=index, fetch_offset=offset, partition_max_bytes=1 << 20)])]),
        version)
    return answer.responses[0].partitions[0]


def test_protocol_requests_create_produce_fetch_list_offsets(cluster: Cluster) -> None:
    created = cluster.create_topic("plain", partitions=3, replication_factor=1)
    assert created.num_partitions == 3 and created.replication_factor == 1
    md = cluster.metadata(topics=["plain"])
    assert {(b.node_id, b.rack) for b in md.brokers} == {(1, "a"), (2, "b"), (3, "c")}
    assert md.controller_id in cluster.brokers  # admin goes to any broker, as in KRaft
    parts = md.topics[0].partitions
    assert sorted(p.partition_index for p in parts) == [0, 1, 2]
    assert all(p.replica_nodes == [p.leader_id] == p.isr_nodes for p in parts)

    now = now_ms()  # (timestamps far in the past would roll a segment per batch: segment.ms)
    one = _produce(cluster, "plain", 0, [(b"k1", b"v1", [("h", b"1")], now)], acks=1)
    every = _produce(cluster, "plain", 0, [(b"k2", b"v2", None, now + 3000),
                                           (b"k3", None, None, now + 2000)], acks=-1)
    assert (one.error_code, one.base_offset) == (0, 0)
    assert (every.error_code, every.base_offset) == (0, 1)
    data = _fetch(cluster, "plain", 0, 0)
    assert data.error_code == 0 and data.high_watermark == 3
    got = [(r.offset, r.key, r.value, r.headers) for r in iter_records(data.records)]
    assert got == [(0, b"k1", b"v1", [("h", b"1")]), (1, b"k2", b"v2", []), (2, b"k3", None, [])]
    # a fetch past the end is OFFSET_OUT_OF_RANGE; at the end it is empty
    assert _fetch(cluster, "plain", 0, 4).error_code == E.OFFSET_OUT_OF_RANGE
    assert _fetch(cluster, "plain", 0, 3).records == b""
    leader, _ = cluster.leaders("plain")[0]
    offsets = cluster.broker(leader).call(ApiKey.LIST_OFFSETS, ListOffsetsRequest(
        replica_id=-1, topics=[ListOffsetsTopic(name="plain", partitions=[
            ListOffsetsPartition(partition_index=0, timestamp=t)
            for t in (-2, -1, -3, now + 1500, now + 9999)])]), 7)
    # earliest, latest, the largest timestamp (v7), the first at or after now+1.5s, none after
    assert [(p.error_code, p.offset) for p in offsets.topics[0].partitions] == \
        [(0, 0), (0, 3), (0, 1), (0, 1), (0, -1)]


def test_produce_to_a_follower_or_unknown_partition_is_refused(cluster: Cluster) -> None:
    cluster.create_topic("refused", partitions=1, replication_factor=1)
    leader, _ = cluster.leaders("refused")[0]
    other = next(i for i in cluster.brokers if i != leader)
    for topic, expected in (("refused", E.NOT_LEADER_OR_FOLLOWER),
                            ("no-such-topic-x", E.UNKNOWN_TOPIC_OR_PARTITION)):
        answer = cluster.broker(other).call(ApiKey.PRODUCE, ProduceRequest(
            acks=1, timeout_ms=1000, topic_data=[TopicProduceData(
                name=topic, partition_data=[PartitionProduceData(
                    index=0, records=build_batch([(None, b"x", None, None)]))])]), 9)
        assert answer.responses[0].partition_responses[0].error_code == expected


def test_corrupt_and_old_format_batches_are_refused(cluster: Cluster) -> None:
    cluster.create_topic("corrupt", partitions=1, replication_factor=1)
    good = bytearray(build_batch([(None, b"value", None, None)]))
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 0xFF
    old_magic = bytearray(good)
    old_magic[16] = 1
    leader, _ = cluster.leaders("corrupt")[0]
    for records, expected in ((bytes(bad_crc), E.CORRUPT_MESSAGE),
                              (bytes(old_magic), E.UNSUPPORTED_FOR_MESSAGE_FORMAT)):
        answer = cluster.broker(leader).call(ApiKey.PRODUCE, ProduceRequest(
            acks=1, timeout_ms=1000, topic_data=[TopicProduceData(name="corrupt", partition_data=[
                PartitionProduceData(index=0, records=records)])]), 9)
        assert answer.responses[0].partition_responses[0].error_code == expected
    assert _fetch(cluster, "corrupt", 0, 0).high_watermark == 0  # nothing was stored


def test_long_poll_fetch_is_woken_by_an_append(cluster: Cluster) -> None:
    """A Fetch parked for 30 s (max_wait_ms, the broker's cap) is answered when a record
    arrives: well within the wait (woken_s_max is two thirds of it), not a tight figure."""
    cluster.create_topic("longpoll", partitions=1, replication_factor=1)
    leader, _ = cluster.leaders("longpoll")[0]
    port = cluster.broker(leader).port
    parked_ms, woken_s_max = 30_000, 20.0

    async def scenario() -> object:
        from epochlog.client.connection import Connection
        from epochlog.protocol.registry import APIS
        conn = await Connection("127.0.0.1", port, request_timeout_ms=parked_ms + 10_000).connect()
        waiting = asyncio.ensure_future(conn.request(APIS[ApiKey.FETCH], 12, FetchRequest(
            max_wait_ms=parked_ms, min_bytes=1, topics=[FetchTopic(topic="longpoll", partitions=[
                FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])])))
        producer = await Connection("127.0.0.1", port).connect()
        await producer.request(APIS[ApiKey.PRODUCE], 9, ProduceRequest(
            acks=1, timeout_ms=1000, topic_data=[TopicProduceData(
                name="longpoll", partition_data=[PartitionProduceData(
                    index=0, records=build_batch([(None, b"wake", None, None)]))])]))
        try:
            async with asyncio.timeout(woken_s_max):
                return await waiting
        except TimeoutError:
            raise AssertionError("the fetch was not woken by the append") from None
        finally:
            await conn.close()
            await producer.close()

    answer = asyncio.run(scenario())
    assert list(iter_records(answer.responses[0].partitions[0].records))[0].value == b"wake"


def test_kafka_python(cluster: Cluster) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    admin.create_topics([NewTopic("kp", num_partitions=2, replication_factor=1)])
    admin.close()
    cluster.wait_leaders("kp", 2)
    sent = []
    for acks, codec in ((1, "gzip"), ("all", "lz4"), ("all", "snappy")):
        producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks=acks,
                                 compression_type=codec)
        for i in range(5):
            key, value = f"{codec}-{i}".encode(), f"value {i}".encode()
            producer.send("kp", key=key, value=value, headers=[("codec", codec.encode())]
                          ).get(timeout=WAIT_S)
            sent.append((key, value, codec.encode()))
        producer.close()
    consumer = KafkaConsumer("kp", bootstrap_servers=cluster.bootstrap,
                             auto_offset_reset="earliest", consumer_timeout_ms=5000)
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < len(sent) and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [(r.key, r.value, dict(r.headers)["codec"]) for r in records]
    consumer.close()
    assert sorted(got) == sorted(sent)


def test_confluent_kafka_idempotent(cluster: Cluster) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                   "enable.idempotence": True, "compression.type": "zstd"})
    for i in range(20):
        producer.produce("ck", key=b"k%d" % (i % 3), value=b"v%d" % i, headers=[("i", b"%d" % i)])
    assert producer.flush(WAIT_S) == 0
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused",
                                   "enable.auto.commit": False})
    tp = confluent.TopicPartition("ck", 0, 0)
    consumer.assign([tp])
    got = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < 20 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append((message.offset(), message.value(), message.headers()))
    low, high = consumer.get_watermark_offsets(tp, timeout=WAIT_S)
    consumer.close()
    assert [g[0] for g in got] == list(range(20)) and (low, high) == (0, 20)
    assert got[7][1:] == (b"v7", [("i", b"7")])


def test_aiokafka(cluster: Cluster) -> None:
    aiokafka = pytest.importorskip("aiokafka")

    async def scenario() -> list:
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all",
                                             enable_idempotence=True)
        await producer.start()
        for i in range(5):
            await producer.send_and_wait("aio", key=b"k", value=b"v%d" % i, headers=[("h", b"")])
        await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer("aio", bootstrap_servers=cluster.bootstrap,
                                             auto_offset_reset="earliest")
        await consumer.start()
        got: list = []
        try:
            async with asyncio.timeout(WAIT_S):
                while len(got) < 5:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got += [r.value for r in records]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(scenario()) == [b"v%d" % i for i in range(5)]


@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat(cluster: Cluster) -> None:
    subprocess.run(["kcat", "-b", cluster.bootstrap, "-P", "-t", "kc", "-K:", "-z", "snappy"],
                   input=b"a:one\nb:two\n", check=True, timeout=WAIT_S)
    out = subprocess.run(["kcat", "-b", cluster.bootstrap, "-C", "-t", "kc", "-e", "-f",
                          "%k=%s@%o\n"], check=True, timeout=WAIT_S, capture_output=True)
    assert out.stdout.decode().split() == ["a=one@0", "b=two@1"]


def test_create_topics_refuses_bad_names_and_settings(cluster: Cluster) -> None:
    answer = cluster.any_broker().call(ApiKey.CREATE_TOPICS, CreateTopicsRequest(topics=[
        CreatableTopic(name="bad name!", num_partitions=1, replication_factor=1),
        CreatableTopic(name="x" * 250, num_partitions=1, replication_factor=1),
        CreatableTopic(name="ok-but-bad-config", num_partitions=1, replication_factor=1,
                       configs=[CreatableTopicConfig(name="retention.ms", value="soon")]),
        CreatableTopic(name="ok-but-unknown-config", num_partitions=1, replication_factor=1,
                       configs=[CreatableTopicConfig(name="no.such.setting", value="1")]),
        CreatableTopic(name="too-many-replicas", num_partitions=1, replication_factor=9)]))
    assert [t.error_code for t in answer.topics] == [
        E.INVALID_TOPIC_EXCEPTION, E.INVALID_TOPIC_EXCEPTION, E.INVALID_CONFIG, E.INVALID_CONFIG,
        E.INVALID_REPLICATION_FACTOR]
    md = cluster.metadata(topics=["bad name!"])
    assert md.topics[0].error_code == E.INVALID_TOPIC_EXCEPTION


def _closed_after(port: int, payload: bytes) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as s:
        s.sendall(payload)
        return s.recv(100) == b""


@pytest.mark.parametrize("payload", [
    b"\x00\x00\x00\x05garba",                                       # not a request header
    struct.pack(">i", 1 << 30) + b"x" * 64,                         # over the frame limit
    frame(RequestHeader(0, 9, 1, "x").encode(2) + b"\x07" * 40),    # Produce body of garbage
])
def test_garbage_closes_only_that_connection(cluster: Cluster, payload: bytes) -> None:
    b = cluster.broker(1)
    with socket.create_connection(("127.0.0.1", b.port), timeout=WAIT_S) as healthy:
        assert _closed_after(b.port, payload)
        healthy.sendall(frame(RequestHeader(18, 0, 5, "x").encode(1)))
        size, = struct.unpack(">i", healthy.recv(4))
        assert size > 0  # still answered on the other connection
    assert b.alive and cluster.metadata(1, []).brokers


def test_metrics_count_requests_by_api_and_error(tmp_path) -> None:
    port = free_port()
    with Cluster(tmp_path, brokers=1, broker_args=("--metrics-listen",
                                                   f"127.0.0.1:{port}")) as c:
        c.create_topic("m", partitions=1, replication_factor=1)
        c.broker(1).call(ApiKey.PRODUCE, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
            TopicProduceData(name="m", partition_data=[PartitionProduceData(
                index=5, records=build_batch([(None, b"x", None, None)]))])]), 9)  # no such
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as r:
            text = r.read().decode()
    assert ('epochlog_broker_requests_total{api="CreateTopics",error="NONE",listener="EXTERNAL",'
            'version="7"} 1.0') in text
    assert 'api="Produce",error="UNKNOWN_TOPIC_OR_PARTITION",listener="EXTERNAL",version="9"' \
        in text
    assert "epochlog_broker_partitions_led 1.0" in text
    assert "epochlog_broker_generation 1.0" in text
    assert 'epochlog_broker_purgatory_size{purgatory="fetch"} 0.0' in text
    assert "epochlog_broker_bytes_in_total" in text

