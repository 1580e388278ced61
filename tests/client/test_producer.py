"""The producer against real epochlog brokers, read back by clients nobody here wrote.

What each test proves:
- every codec: what we send (keys, values, headers, timestamps) is what confluent-kafka reads;
- keyed records land where confluent-kafka's murmur2 partitioner (Java's) puts them;
- acks 0, 1 and all each deliver every record, once;
- back-pressure: buffer_memory bounds what is buffered; send_nowait refuses past it;
- idempotence: the only broker is killed (SIGKILL) and restarted mid-stream; the producer retries
  what was in flight and the log holds every record exactly once, in the order sent;
- KIP-359: after its leader restarts (a new leader epoch), a producer holding the old epoch is
  fenced (FENCED_LEADER_EPOCH), refreshes its metadata and its retry succeeds, with no duplicate;
- interop: kcat reads back exactly what we produced;
- max_request_size: a record that could never be sent is refused at send (RecordTooLargeError);
  one request carries at most max_request_size bytes of batches, against a broker whose frame
  limit would refuse a bigger one, and the broker counts the requests the producer says it sent;
- MESSAGE_TOO_LARGE: against a broker whose message_max_bytes is below batch_size, batches are
  split until they fit, and every record is written once, in order (idempotent).
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from epochlog.client import BufferFullError, Producer, RecordTooLargeError
from epochlog.client.admin import Admin, NewTopic
from epochlog.client.errors import MessageTooLargeError
from tests.broker.cluster import WAIT_S, Cluster, free_port

confluent_kafka = pytest.importorskip("confluent_kafka")

READ_S_MAX = 60.0
Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...], int]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("producer"), brokers=1) as c:
        yield c


def read_back(bootstrap: str, topic: str, partitions: int, count: int) -> list[Row]:
    """(partition, offset, key, value, headers, timestamp) of count records, read by
    confluent-kafka from the beginning of each partition (bounded wait)."""
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                                         "enable.auto.commit": False})
    consumer.assign([confluent_kafka.TopicPartition(topic, p, 0) for p in range(partitions)])
    rows: list[Row] = []
    deadline = time.monotonic() + READ_S_MAX
    try:
        while len(rows) < count and time.monotonic() < deadline:
            for m in consumer.consume(1000, 0.5):
                assert not m.error(), m.error()
                rows.append((m.partition(), m.offset(), m.key(), m.value(),
                             tuple(m.headers() or ()), m.timestamp()[1]))
        for m in consumer.consume(1000, 0.5):  # nothing more than count may be there
            rows.append((m.partition(), m.offset(), m.key(), m.value(),
                         tuple(m.headers() or ()), m.timestamp()[1]))
    finally:
        consumer.close()
    return rows


async def create(bootstrap: str, topic: str, partitions: int = 1) -> None:
    async with Admin(bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, partitions, 1)])


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
async def test_each_codec_reads_back_exactly(cluster: Cluster, codec: str | None) -> None:
    topic = f"codec-{codec}"
    await create(cluster.bootstrap, topic, partitions=2)
    sent = [(f"k{i % 13}".encode(), f"value {i} ".encode() * (1 + i % 7),
             (("n", str(i).encode()), ("codec", str(codec).encode())), 1_700_000_000_000 + i)
            for i in range(600)]
    async with Producer(cluster.bootstrap, compression_type=codec, batch_size=4096,
                        linger_ms=2) as producer:
        futures = [await producer.send(topic, value=v, key=k, headers=list(h),
                                          timestamp_ms=ts) for k, v, h, ts in sent]
        await producer.flush()
        metas = [await f for f in futures]
    rows = read_back(cluster.bootstrap, topic, 2, len(sent))
    assert sorted((k, v, h, ts) for _, _, k, v, h, ts in rows) == sorted(sent)
    where = {(m.partition, m.offset) for m in metas}
    assert where == {(p, o) for p, o, *_ in rows}, "metadata names where records really are"
    assert all(m.timestamp == ts for m, (_, _, _, ts) in zip(metas, sent, strict=True))


async def test_keyed_records_land_where_java_puts_them(cluster: Cluster) -> None:
    topic = "keyed"
    await create(cluster.bootstrap, topic, partitions=7)
    keys = [f"user-{i}".encode() for i in range(300)] + [b"", b"a", b"ab", b"abc", b"\xff" * 9]
    theirs: dict[bytes, int] = {}
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap,
                                         "partitioner": "murmur2_random", "linger.ms": 5})
    for key in keys:
        producer.produce(topic, value=b"c", key=key,
                         on_delivery=lambda err, m: theirs.__setitem__(m.key(), m.partition()))
    assert producer.flush(WAIT_S) == 0
    async with Producer(cluster.bootstrap) as ours:
        futures = {key: await ours.send(topic, value=b"e", key=key) for key in keys}
        await ours.flush()
        placed = {key: (await f).partition for key, f in futures.items()}
    assert placed == theirs
    assert len(set(placed.values())) == 7


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks_deliver_every_record_once(cluster: Cluster, acks: Any) -> None:
    topic = f"acks-{acks}"
    await create(cluster.bootstrap, topic)
    count = 3000
    async with Producer(cluster.bootstrap, acks=acks) as producer:
        assert producer.idempotent == (acks == "all")
        futures = [await producer.send(topic, value=b"%d" % i) for i in range(count)]
        await producer.flush()
        metas = [await f for f in futures]
    if acks == 0:
        assert {m.offset for m in metas} == {-1}, "acks=0: the broker never says where"
    elif acks == "all":  # idempotent: in order, whatever was retried
        assert [m.offset for m in metas] == list(range(count))
    else:
        # Without idempotence a retried batch may land after a later one that was in flight
        # beside it (Kafka's max.in.flight.requests.per.connection note): seen on a loaded
        # machine when the first Produce reached the new topic's leader before it led. Once
        # each, then, and the order as the offsets say.
        assert sorted(m.offset for m in metas) == list(range(count))
    rows = read_back(cluster.bootstrap, topic, 1, count)
    by_offset = sorted(range(count), key=lambda i: metas[i].offset)
    expected = range(count) if acks == 0 else by_offset
    assert [v for *_, v, _, _ in rows] == [b"%d" % i for i in expected]


async def test_back_pressure_bounds_the_buffer(cluster: Cluster) -> None:
    topic = "pressure"
    await create(cluster.bootstrap, topic)
    memory, batch = 64 * 1024, 16 * 1024
    value = b"v" * 1000
    async with Producer(cluster.bootstrap, buffer_memory=memory, batch_size=batch,
                        linger_ms=50) as producer:
        await producer.partitions_for(topic)
        taken = []
        with pytest.raises(BufferFullError):
            for _ in range(1000):  # never yields: nothing can be sent meanwhile
                taken.append(producer.send_nowait(topic, value=value))
                assert producer.metrics()["buffer_bytes_used"] <= memory
        assert 0 < len(taken) * len(value) <= memory
        peak = 0
        for _ in range(2000):  # send waits for room instead, and the bound holds
            taken.append(await producer.send(topic, value=value))
            peak = max(peak, producer.metrics()["buffer_bytes_used"])
        assert peak <= memory
        await producer.flush()
        assert all(f.done() and f.exception() is None for f in taken)
    assert len(read_back(cluster.bootstrap, topic, 1, len(taken))) == len(taken)


async def test_idempotent_retries_across_a_broker_kill_write_each_record_once(
        tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster:
        topic = "exactly-once"
        await create(cluster.bootstrap, topic)
        count = 20_000
        async with Producer(cluster.bootstrap, acks="all", enable_idempotence=True,
                            batch_size=8192, linger_ms=5, retry_backoff_ms=50,
                            request_timeout_ms=10_000) as producer:
            futures = []

            async def produce() -> None:
                for i in range(count):
                    futures.append(await producer.send(topic, value=b"%08d" % i))
                    if i % 100 == 99:
                        await asyncio.sleep(0.02)  # ~4 s of sending: the kill lands mid-stream

            sending = asyncio.ensure_future(produce())
            while producer.records_sent < count // 4:
                await asyncio.sleep(0.02)
            acked_before_kill = producer.records_sent
            await asyncio.to_thread(cluster.restart_broker, 1, signal.SIGKILL)
            await asyncio.wait_for(sending, WAIT_S * 3)
            await producer.flush()
            metas = [await f for f in futures]
            # Mid-stream: most records went through the broker's second life. (Retries are not
            # a measure of that: a batch waits for a connection to be set up rather than being
            # sent to a broker that has none, so a kill with nothing in flight costs none.)
            assert acked_before_kill < count // 2, "the kill should have landed mid-stream"
        rows = read_back(cluster.bootstrap, topic, 1, count)
        values = [v for *_, v, _, _ in rows]
        assert values == [b"%08d" % i for i in range(count)], "duplicates, gaps or reordering"
        known = [m.offset for m in metas if m.offset >= 0]
        assert len(set(known)) == len(known)


async def test_stale_leader_epoch_is_fenced_then_retried(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster:
        topic = "fenced"
        await create(cluster.bootstrap, topic)
        async with Producer(cluster.bootstrap, acks="all", linger_ms=0,
                            retry_backoff_ms=50) as producer:
            first = await producer.send_and_wait(topic, value=b"before")
            old_epoch = cluster.leaders(topic)[0][1]
            assert first.leader_epoch == old_epoch
            await asyncio.to_thread(cluster.restart_broker, 1)  # returns with a new epoch
            new_epoch = cluster.wait_leaders(topic, 1)[0][1]
            assert new_epoch > old_epoch
            second = await producer.send_and_wait(topic, value=b"after")
            assert producer.fenced_epoch_errors >= 1, "the stale epoch should have been fenced"
            assert second.leader_epoch == new_epoch
            assert (first.offset, second.offset) == (0, 1)
        rows = read_back(cluster.bootstrap, topic, 1, 2)
        assert [v for *_, v, _, _ in rows] == [b"before", b"after"]


def test_kcat_reads_back_exactly(cluster: Cluster) -> None:
    assert shutil.which("kcat"), "kcat is an interop peer: .ci/run installs Debian's kcat"
    topic = "to-kcat"
    sent = [(f"key{i % 5}".encode(), f"value-{i}".encode(), (("h", f"{i}".encode()),))
            for i in range(500)]

    async def produce() -> None:
        await create(cluster.bootstrap, topic, partitions=3)
        async with Producer(cluster.bootstrap, compression_type="lz4") as producer:
            for k, v, h in sent:
                await producer.send(topic, value=v, key=k, headers=list(h))
            await producer.flush()

    asyncio.run(produce())
    out = subprocess.run(["kcat", "-b", cluster.bootstrap, "-C", "-t", topic, "-e", "-q",
                          "-f", "%p\t%o\t%k\t%s\t%h\n"],
                         check=True, timeout=READ_S_MAX, capture_output=True).stdout
    got = []
    for line in out.splitlines():
        _, _, key, value, headers = line.split(b"\t")
        pairs = tuple((k.decode(), v) for k, v in (h.split(b"=", 1) for h in headers.split(b",")))
        got.append((key, value, pairs))
    assert sorted(got) == sorted(sent)
    for key in {k for k, _, _ in sent}:  # one key, one partition: kcat sees our order
        assert [v for k, v, _ in got if k == key] == [v for k, v, _ in sent if k == key]


async def test_a_record_too_large_to_ever_send_is_refused_at_send(cluster: Cluster) -> None:
    topic = "too-large"
    await create(cluster.bootstrap, topic)
    async with Producer(cluster.bootstrap, max_request_size=10_000, batch_size=4096,
                        buffer_memory=20_000) as producer:
        await producer.partitions_for(topic)
        with pytest.raises(RecordTooLargeError, match="max_request_size"):
            await producer.send(topic, value=b"x" * 10_000)
        with pytest.raises(RecordTooLargeError):
            await producer.send_and_wait(topic, value=b"x" * 10_000)
        with pytest.raises(RecordTooLargeError):
            producer.send_nowait(topic, value=b"x" * 10_000)
        assert producer.metrics()["buffer_bytes_used"] == 0, "a refused record holds no memory"
        fits = await producer.send_and_wait(topic, value=b"y" * 9_000)  # one batch of one record
        assert fits.offset == 0
    async with Producer(cluster.bootstrap, buffer_memory=8192, batch_size=4096) as producer:
        with pytest.raises(RecordTooLargeError, match="buffer_memory"):
            await producer.send(topic, value=b"x" * 8192)
    assert RecordTooLargeError is MessageTooLargeError and not RecordTooLargeError.retriable
    rows = read_back(cluster.bootstrap, topic, 1, 1)
    assert [v for *_, v, _, _ in rows] == [b"y" * 9_000]


def produce_requests_answered(metrics_port: int) -> int:
    """Produce requests the broker answered, from its Prometheus metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                  timeout=10).read().decode()
    return int(sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith("epochlog_broker_requests_total{")
                   and 'api="Produce"' in line))


async def test_one_request_carries_at_most_max_request_size(tmp_path: Path) -> None:
    """20 partitions' 4 KiB batches are ready at once (a long linger, then flush): uncapped,
    one request would carry ~80 KiB, which this broker refuses (its frame limit, Kafka's
    socket.request.max.bytes, is 20 KiB). Capped at 16 KiB, every record gets through."""
    metrics_port = free_port()
    with Cluster(tmp_path, brokers=1, broker_args=[
            "--set", "frame_bytes_max=20480",
            "--set", f"metrics_listen=127.0.0.1:{metrics_port}"]) as cluster:
        topic, partitions, cap = "capped", 20, 16 * 1024
        await create(cluster.bootstrap, topic, partitions)
        sent = [(p, b"%03d-%05d " % (p, i) * 40) for i in range(10) for p in range(partitions)]
        before = produce_requests_answered(metrics_port)
        async with Producer(cluster.bootstrap, max_request_size=cap, batch_size=4096,
                            linger_ms=60_000, delivery_timeout_ms=30_000,
                            request_timeout_ms=10_000) as producer:
            futures = [await producer.send(topic, value=v, partition=p) for p, v in sent]
            await producer.flush()
            metas = [await f for f in futures]
            m = producer.metrics()
        assert all(meta.offset >= 0 for meta in metas)
        total = sum(len(v) for _, v in sent)
        assert m["produce_request_bytes_max"] <= cap
        assert m["produce_requests_total"] >= total // cap + 1
        answered = produce_requests_answered(metrics_port) - before
        assert answered == m["produce_requests_total"], "the broker saw what the producer sent"
        rows = read_back(cluster.bootstrap, topic, partitions, len(sent))
        assert sorted((p, v) for p, _, _, v, _, _ in rows) == sorted(sent)


async def test_batches_too_large_for_the_broker_are_split_in_order_once(tmp_path: Path) -> None:
    """The broker takes batches of at most 4 KiB (message_max_bytes; the controller has no
    topic-level max.message.bytes); the producer builds 64 KiB ones. It splits each refused batch
    until its halves fit; with idempotence the records land once and in the order sent."""
    with Cluster(tmp_path, brokers=1,
                 broker_args=["--set", "message_max_bytes=4096"]) as cluster:
        topic, count = "split", 3000
        await create(cluster.bootstrap, topic)
        values = [b"%08d" % i + b"." * 92 for i in range(count)]
        async with Producer(cluster.bootstrap, acks="all", enable_idempotence=True,
                            batch_size=64 * 1024, linger_ms=100) as producer:
            futures = [await producer.send(topic, value=v) for v in values]
            await producer.flush()
            metas = [await f for f in futures]
            m = producer.metrics()
        assert [meta.offset for meta in metas] == list(range(count))
        assert m["batch_splits_total"] >= 4, "each 64 KiB batch splits several times"
        assert m["producer_epoch_bumps_total"] == 0, "no batch failed, no sequence restarted"
        rows = read_back(cluster.bootstrap, topic, 1, count)
        assert [v for *_, v, _, _ in rows] == values, "duplicates, gaps or reordering"
