"""The Consumer against real brokers on 127.0.0.1, with records written by confluent-kafka.

What is checked, and why:
- every record comes back exactly (key, value, headers, offset, partition) whatever the codec,
  and the leader_epoch of each record and of next_offsets() is the partition's leader epoch when
  it was written (KIP-320: what a user stores and seeks back to);
- seek, seek_to_beginning/end and the three auto_offset_reset modes land where they say;
- a seek carrying an epoch is validated with OffsetForLeaderEpoch: a position the epoch never
  reached is a LogTruncationError naming the exact divergence with "none", and an exact move there
  with "earliest";
- a broker restarted (SIGKILL) in the middle of consumption costs no record and repeats none;
- prefetching stays within prefetch_max_bytes (plus the one answer in flight);
- KIP-392: a consumer with client_rack reads from the follower in its rack, and from the leader
  once that follower dies, losing nothing;
- poll_batches() hands out whole checked batches, decompressed, each record once.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from epochlog.client import Consumer, LogTruncationError, TopicPartition
from epochlog.client.consumer import NoOffsetForPartitionError
from epochlog.client.errors import OffsetOutOfRangeError
from epochlog.client.types import ConsumerRecord, FetchedBatch
from epochlog.protocol.batch import BatchHeader
from epochlog.protocol.records import _decode_records
from tests.broker.cluster import WAIT_S, Cluster

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("consumer"), brokers=2) as c:
        yield c


def produce(cluster: Cluster, topic: str, records: list[tuple[int, bytes | None, bytes,
                                                                list[tuple[str, bytes]]]],
            codec: str = "none", **settings: object) -> None:
    """(partition, key, value, headers) each, written by confluent-kafka, acks=all."""
    p = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                  "compression.type": codec, "linger.ms": 5,
                                  "enable.idempotence": False, **settings})
    errors: list[object] = []
    for partition, key, value, headers in records:
        p.produce(topic, value=value, key=key, partition=partition, headers=headers,
                  on_delivery=lambda err, msg: errors.append(err) if err else None)
    assert p.flush(WAIT_S) == 0
    assert not errors, errors


async def consume(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    """Poll until count records came (bounded)."""
    got: list[ConsumerRecord] = []
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while len(got) < count and asyncio.get_running_loop().time() < deadline:
        got += await consumer.poll(timeout_ms=500, max_records=count - len(got))
    assert len(got) == count, f"got {len(got)} of {count} records"
    return got


def epochs(cluster: Cluster, topic: str) -> dict[int, int]:
    return {p: epoch for p, (_, epoch) in cluster.leaders(topic).items()}


@pytest.mark.parametrize("codec", CODECS)
async def test_records_read_back_exactly_across_partitions(cluster: Cluster, codec: str) -> None:
    topic = f"exact-{codec}"
    cluster.create_topic(topic, partitions=3, replication_factor=1)
    sent = [(i % 3, None if i % 7 == 0 else b"k%d" % i, b"v%d-" % i + bytes(i % 50),
             [("n", b"%d" % i), ("codec", codec.encode())] if i % 2 else [])
            for i in range(600)]
    produce(cluster, topic, sent, codec)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest",
                        max_partition_fetch_bytes=4096) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        got = await consume(consumer, len(sent))
        leader_epochs = epochs(cluster, topic)
        by_partition: dict[int, list[ConsumerRecord]] = {0: [], 1: [], 2: []}
        for r in got:
            by_partition[r.partition].append(r)
            assert r.topic == topic and r.leader_epoch == leader_epochs[r.partition]
        for p in range(3):
            expected = [(k, v, h) for part, k, v, h in sent if part == p]
            records = by_partition[p]
            assert [r.offset for r in records] == list(range(len(expected)))
            assert [(r.key, r.value, r.headers) for r in records] == expected
        assert consumer.next_offsets() == {
            TopicPartition(topic, p): (200, leader_epochs[p]) for p in range(3)}
        assert consumer.metrics()["records_received"] == 600


async def test_seek_and_seek_to(cluster: Cluster) -> None:
    topic = "seeks"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    produce(cluster, topic, [(0, None, b"%d" % i, []) for i in range(100)])
    tp = TopicPartition(topic, 0)
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 0
        first = await consumer.poll(timeout_ms=5000, max_records=10)
        assert [r.offset for r in first] == list(range(10))
        consumer.seek(tp, 95)
        assert [r.value for r in await consume(consumer, 5)] == [b"95", b"96", b"97", b"98",
                                                                 b"99"]
        consumer.seek_to_beginning(tp)
        assert (await consumer.poll(timeout_ms=5000, max_records=1))[0].offset == 0
        consumer.seek_to_end(tp)
        assert await consumer.position(tp) == 100
        assert await consumer.poll(timeout_ms=200) == []
        assert consumer.next_offsets()[tp][0] == 100


async def test_auto_offset_reset_modes(cluster: Cluster) -> None:
    topic = "resets"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    tp = TopicPartition(topic, 0)
    produce(cluster, topic, [(0, None, b"old%d" % i, []) for i in range(5)])
    async with Consumer(cluster.bootstrap, auto_offset_reset="latest") as latest, \
            Consumer(cluster.bootstrap, auto_offset_reset="none") as none:
        latest.assign([tp])
        assert await latest.position(tp) == 5
        none.assign([tp])
        with pytest.raises(NoOffsetForPartitionError):
            await none.poll(timeout_ms=100)
        with pytest.raises(NoOffsetForPartitionError):  # again, until seeked
            await none.poll(timeout_ms=100)
        none.seek(tp, 50)  # past the end
        with pytest.raises(OffsetOutOfRangeError):
            await none.poll(timeout_ms=5000)
        none.seek(tp, 3)
        produce(cluster, topic, [(0, None, b"new%d" % i, []) for i in range(3)])
        assert [r.value for r in await consume(latest, 3)] == [b"new0", b"new1", b"new2"]
        assert [r.offset for r in await consume(none, 5)] == [3, 4, 5, 6, 7]
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as earliest:
        earliest.assign([tp])
        earliest.seek(tp, 1000)  # out of range: back to the earliest
        assert [r.offset for r in await consume(earliest, 8)] == list(range(8))


async def test_seek_with_epoch_is_validated(cluster: Cluster) -> None:
    """Offsets 0-9 are written at epoch e0, then the leader restarts (epoch e1 > e0) and 10-19
    are written. A position (15, e0) claims epoch e0 reached offset 15, which it never did: the
    log diverges at 10, the end of e0. (10, e0) and (15, e1) are consistent and read on."""
    topic = "validated"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    tp = TopicPartition(topic, 0)
    leader, e0 = cluster.leaders(topic)[0]
    produce(cluster, topic, [(0, None, b"a%d" % i, []) for i in range(10)])
    cluster.restart_broker(leader)
    _, e1 = cluster.wait_leaders(topic, 1)[0]
    assert e1 > e0
    produce(cluster, topic, [(0, None, b"b%d" % i, []) for i in range(10)])

    async with Consumer(cluster.bootstrap, auto_offset_reset="none") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 15, leader_epoch=e0)
        with pytest.raises(LogTruncationError) as raised:
            await consumer.poll(timeout_ms=5000)
        assert raised.value.divergent_offsets == {tp: (10, e0)}
        consumer.seek(tp, 10, leader_epoch=e0)
        got = await consume(consumer, 10)
        assert [(r.offset, r.leader_epoch) for r in got] == [(10 + i, e1) for i in range(10)]
        consumer.seek(tp, 15, leader_epoch=e1)
        assert [r.offset for r in await consume(consumer, 5)] == [15, 16, 17, 18, 19]
        assert consumer.metrics()["truncations_detected"] == 1

    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 15, leader_epoch=e0)
        got = await consume(consumer, 10)  # exactly from the divergence point, nothing skipped
        assert [r.value for r in got] == [b"b%d" % i for i in range(10)]
        assert consumer.next_offsets() == {tp: (20, e1)}


async def test_broker_killed_mid_consumption_loses_and_repeats_nothing(cluster: Cluster) -> None:
    topic = "killed"
    cluster.create_topic(topic, partitions=2, replication_factor=1)
    leaders = cluster.leaders(topic)
    produce(cluster, topic, [(i % 2, None, b"%d" % i, []) for i in range(2000)])
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest",
                        max_partition_fetch_bytes=2048, retry_backoff_ms=50) as consumer:
        consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
        got = await consume(consumer, 600)
        cluster.restart_broker(leaders[0][0], signal.SIGKILL)
        produce(cluster, topic, [(i % 2, None, b"%d" % i, []) for i in range(2000, 2400)])
        got += await consume(consumer, 1800)
    for p in (0, 1):
        values = [r.value for r in got if r.partition == p]
        assert values == [b"%d" % i for i in range(p, 2400, 2)]
        offsets = [r.offset for r in got if r.partition == p]
        assert offsets == list(range(1200))


async def test_prefetch_stays_within_its_memory_bound(cluster: Cluster) -> None:
    topic = "prefetch"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    # batches of at most 8 kB, so an answer is at most answer_max (KIP-74 lets a bigger first
    # batch through whole)
    produce(cluster, topic, [(0, None, bytes(1000), []) for _ in range(3000)],
            **{"batch.size": 8192})
    bound, answer_max = 64 * 1024, 16 * 1024
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest",
                        prefetch_max_bytes=bound, max_partition_fetch_bytes=answer_max,
                        fetch_max_bytes=answer_max) as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        total = len(await consumer.poll(timeout_ms=5000, max_records=7))
        # Not polling: the driver reads ahead until the bound, then stops.
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while consumer.metrics()["buffered_bytes"] < bound:
            assert asyncio.get_running_loop().time() < deadline, consumer.metrics()
            await asyncio.sleep(0.01)
        requests = consumer.metrics()["fetch_requests"]
        await asyncio.sleep(0.3)
        assert consumer.metrics()["fetch_requests"] <= requests + 1  # at most the one in flight
        seen_max = consumer.metrics()["buffered_bytes"]
        while total < 3000:
            records = await consumer.poll(timeout_ms=5000, max_records=7)
            assert records
            total += len(records)
            await asyncio.sleep(0)
            seen_max = max(seen_max, consumer.metrics()["buffered_bytes"])
        assert seen_max <= bound + answer_max  # the bound, plus the answer that crossed it


async def test_reads_from_the_follower_in_its_rack_then_the_leader_when_it_dies(
        tmp_path: Path) -> None:
    """KIP-392: with the rack-aware selector, a consumer whose client_rack is the follower's
    reads from the follower; the follower killed, it goes back to the leader and loses nothing."""
    topic, tp = "near", TopicPartition("near", 0)
    with Cluster(tmp_path, brokers=2,
                 controller_args=["--set", "broker_session_timeout_ms=3000"],
                 broker_args=["--set", "broker_heartbeat_interval_ms=750",
                              "--set", "replica_selector_class=rack-aware"]) as cluster:
        cluster.create_topic(topic, partitions=1, replication_factor=2)
        leader, _ = cluster.leaders(topic)[0]
        follower = 3 - leader
        produce(cluster, topic, [(0, None, b"%d" % i, []) for i in range(200)])
        async with Consumer(cluster.bootstrap, auto_offset_reset="earliest",
                            client_rack=cluster.broker(follower).rack,
                            retry_backoff_ms=50, metadata_max_age_ms=1000) as consumer:
            consumer.assign([tp])
            got = await consume(consumer, 200)
            assert consumer.metrics()["read_replica"][tp] == follower
            cluster.broker(follower).stop(signal.SIGKILL)
            produce(cluster, topic, [(0, None, b"%d" % i, []) for i in range(200, 400)],
                    acks="1")
            got += await consume(consumer, 200)
            assert consumer.metrics()["read_replica"][tp] == leader
        assert [r.value for r in got] == [b"%d" % i for i in range(400)]
        assert [r.offset for r in got] == list(range(400))


def unpack(batch: FetchedBatch) -> list[tuple[int, int, bytes | None, bytes | None, list[Any]]]:
    """(offset, timestamp, key, value, headers) of the batch's records from first_offset on, by
    the strict decoder of the records section."""
    header = BatchHeader(batch.base_offset, 0, batch.leader_epoch, 2, 0,
                         batch.timestamp_type << 3, batch.next_offset - 1 - batch.base_offset,
                         batch.base_timestamp, batch.max_timestamp, -1, -1, -1,
                         batch.record_count)
    data = bytes(batch.records)
    return [(r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in _decode_records(data, 0, len(data), header)
            if r.offset >= batch.first_offset]


@pytest.mark.parametrize("codec", ("none", "zstd"))
async def test_poll_batches_hands_out_checked_whole_batches(cluster: Cluster, codec: str) -> None:
    """poll_batches() (the bulk decoders' path, epochlog.pipeline's) gives every record once,
    decompressed, with the batch's leader epoch, and moves the position as poll() does; a batch
    poll() started is handed on from where poll() stopped."""
    topic = f"raw-{codec}"
    cluster.create_topic(topic, partitions=1, replication_factor=1)
    sent = [(0, None if i % 5 == 0 else b"k%d" % i, b"v%d" % i, [("h", b"%d" % i)] if i % 3 else [])
            for i in range(300)]
    produce(cluster, topic, sent, codec)
    tp = TopicPartition(topic, 0)
    epoch = epochs(cluster, topic)[0]
    async with Consumer(cluster.bootstrap, auto_offset_reset="earliest",
                        max_partition_fetch_bytes=2048) as consumer:
        consumer.assign([tp])
        first = await consume(consumer, 7)  # poll() decodes the first batch, hands out 7
        got = [(r.offset, r.key, r.value, r.headers) for r in first]
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while len(got) < len(sent) and asyncio.get_running_loop().time() < deadline:
            batches = await consumer.poll_batches(timeout_ms=500, max_bytes=1000)
            for batch in batches:
                assert batch.topic_partition == tp and batch.leader_epoch == epoch
                assert batch.first_offset == max(batch.base_offset, len(got))
                got += [(o, k, v, h) for o, _, k, v, h in unpack(batch)]
            if batches:  # one call may hand out several (small batches under load): the last
                assert consumer.next_offsets()[tp] == (batches[-1].next_offset, epoch)
        assert got == [(i, k, v, h) for i, (_, k, v, h) in enumerate(sent)]
        assert consumer.metrics()["records_received"] == len(sent)
        assert await consumer.poll_batches(timeout_ms=100) == []
        consumer.seek(tp, 250)
        again = await consumer.poll_batches(timeout_ms=5000)
        assert again and again[0].first_offset == 250
        assert unpack(again[0])[0][3] == b"v250"
