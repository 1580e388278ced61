"""A broker whose disk fills up (issue 19), on real processes and a real full filesystem.

Broker 1's data dir is a small tmpfs of its own (mounted as root), so its writes fail with ENOSPC
while brokers 2 and 3 have room. 3 brokers, min.insync.replicas 2, topic `t` of 3 partitions with
3 replicas each: broker 1 leads one of them and follows the two others. Checked:
- producing to the partition broker 1 leads fills the disk; the producer is answered
  KAFKA_STORAGE_ERROR (not a closed connection); the broker stays up and says so in one line;
- its partition is still read in full, and replicated: every acknowledged record is on the
  followers too;
- a partition broker 1 follows goes on taking acks=all writes (broker 1 leaves its ISR);
- space comes back (the tmpfs grows): writes to broker 1's partition succeed again, the broker
  says so, it catches up on what it follows and is back in every ISR;
- every acknowledged record is read back once, at its offset; after a clean restart of broker 1
  too.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochlog import Producer
from epochlog.broker.storage import DiskHealth, DiskWriteFailed, LogConfig
from epochlog.client.errors import KafkaStorageError
from epochlog.testing import Cluster, until
from epochlog.testing.network import free_port
from epochlog.testing.traffic import read_back

from .helpers import FakeClock, make_batch, open_log, read_all

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs: needs root")

DISK_BYTES = 4 << 20
VALUE_BYTES = 1000
SENDS_MAX = 20_000  # 20 MB: well past the 4 MB disk
CHUNK = 50
TOPIC = "t"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """tmp_path/"cluster": the cluster's folder, where broker-1 is a 4 MB filesystem of its own."""
    base = tmp_path / "cluster"
    disk = base / "broker-1"
    disk.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(disk)],
                   check=True)
    try:
        yield base
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_refused_append_leaves_the_log_as_it_was(tiny_disk: Path) -> None:
    """Storage alone: appends until the disk refuses one; the refused batch leaves no byte in
    the segment, the log end and epoch cache are unchanged, the failure is counted once per
    state, and once the disk grows the next append lands where the refused one would have;
    reopened (recovery), the log holds exactly the accepted batches."""
    clock = FakeClock()
    config = LogConfig(segment_bytes=1 << 20, flush_ms=2**63 - 1)
    log = open_log(str(tiny_disk / "t-0"), config, clock)
    log.disk = health = DiskHealth(str(tiny_disk), clock)
    accepted: list[bytes] = []
    refused = None
    for n in range(1000):
        batch = make_batch(20, value_bytes=500, tag=n, epoch=n // 100)
        try:
            log.append_as_leader(batch, n // 100)
        except DiskWriteFailed as exc:
            refused = exc
            break
        accepted.append(batch)
    assert refused is not None and accepted, "the 256 KB disk never filled"
    assert refused.error_code == 56 and "No space left on device" in str(refused)
    end, epochs = log.log_end_offset, log.epoch_cache.entries
    segment = log.active_segment
    assert os.path.getsize(segment.log_path) == segment.size_bytes
    with pytest.raises(DiskWriteFailed):
        log.append_as_leader(make_batch(20, value_bytes=500), epochs[-1].epoch)
    assert (log.log_end_offset, log.epoch_cache.entries) == (end, epochs)
    assert health.failing and health.failures_total == 2

    grow(tiny_disk, 4 << 20)
    clock.advance(60_000)
    log.append_as_leader(make_batch(20, value_bytes=500, tag=9999), epochs[-1].epoch)
    assert not health.failing and log.log_end_offset == end + 20
    log.flush()
    log.close()
    reopened = open_log(str(tiny_disk / "t-0"), config, FakeClock())
    batches = [b for _, b in read_all(reopened)]
    assert len(batches) == len(accepted) + 1
    assert reopened.log_end_offset == end + 20


def grow(disk: Path, size_bytes: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_bytes}", str(disk)], check=True)


def value(n: int) -> bytes:
    return f"{n:08d}".encode() + os.urandom(VALUE_BYTES // 2).hex().encode()[:VALUE_BYTES - 8]


async def fill(bootstrap: str, partition: int) -> tuple[dict[int, bytes], list[BaseException]]:
    """Send to `partition` (acks=all, no retries) until sends fail: (offset -> value acked,
    the errors of the chunk where they began and of 20 more single sends)."""
    acked: dict[int, bytes] = {}
    errors: list[BaseException] = []
    producer = Producer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False,
                        retries=0, linger_ms=0, request_timeout_ms=20_000)
    await producer.start()
    try:
        for start in range(0, SENDS_MAX, CHUNK):
            values = [value(n) for n in range(start, start + CHUNK)]
            futures = [await producer.send(TOPIC, v, partition=partition) for v in values]
            for v, outcome in zip(values, await asyncio.gather(*futures, return_exceptions=True),
                                  strict=True):
                if isinstance(outcome, BaseException):
                    errors.append(outcome)
                else:
                    acked[outcome.offset] = v
            if errors:
                break
        for n in range(20):  # the disk is still full: refused (some small ones may fit)
            v = value(SENDS_MAX + n)
            try:
                meta = await producer.send_and_wait(TOPIC, v, partition=partition)
                acked[meta.offset] = v
            except KafkaStorageError as exc:
                errors.append(exc)
    finally:
        await producer.close()
    return acked, errors


async def send_all(bootstrap: str, partition: int, values: list[bytes]) -> dict[int, bytes]:
    producer = Producer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=60_000)
    await producer.start()
    try:
        futures = [await producer.send(TOPIC, v, partition=partition) for v in values]
        metas = await asyncio.gather(*futures)
    finally:
        await producer.close()
    return {m.offset: v for m, v in zip(metas, values, strict=True)}


def broker_log(cluster: Cluster, broker: int) -> str:
    return (cluster.base_dir / "logs" / f"broker-{broker}.log").read_text(errors="replace")


def isr(cluster: Cluster, partition: int) -> list[int]:
    return list(cluster.partitions(TOPIC)[partition].isr_nodes)


def test_a_full_disk_refuses_writes_loses_nothing_and_recovers(small_disk: Path) -> None:
    cluster = Cluster(3, base_dir=small_disk, settings={
        "min.insync.replicas": 2, "replica_lag_time_max_ms": 4000})
    metrics_port = free_port()
    cluster.brokers[1].settings += ["--set", f"metrics_listen=127.0.0.1:{metrics_port}"]
    with cluster:
        cluster.create_topic(TOPIC, partitions=3, replication_factor=3)
        led = next(p for p in range(3) if cluster.leader_of(TOPIC, p) == 1)
        followed = next(p for p in range(3) if p != led)
        bootstrap = cluster.bootstrap_servers

        acked, errors = asyncio.run(fill(bootstrap, led))
        assert acked and errors, "the 4 MB disk never filled"
        assert all(isinstance(e, KafkaStorageError) for e in errors), errors[:3]
        assert len(errors) > 10
        assert cluster.pid(1) is not None, "broker 1 stopped on a full disk"
        text = broker_log(cluster, 1)
        assert text.count("writes are refused with KAFKA_STORAGE_ERROR") == 1, text[-3000:]
        assert "No space left on device" in text
        assert "Traceback" not in text, text[-3000:]
        metrics = subprocess.run(["curl", "-s", f"http://127.0.0.1:{metrics_port}/metrics"],
                                 capture_output=True, text=True, timeout=30).stdout
        assert "epochlog_broker_disk_writes_failing 1.0" in metrics

        # the full broker still serves its partition, and its followers have every record
        cluster.wait_fully_replicated(TOPIC, timeout_s=60)
        assert dict(read_back(bootstrap, TOPIC, 3)[led]) == acked

        # a partition it follows takes acks=all writes: broker 1 leaves its ISR
        more = asyncio.run(send_all(bootstrap, followed, [value(n) for n in range(200)]))
        until(lambda: 1 not in isr(cluster, followed), "broker 1 out of the ISR", 60,
              detail=lambda: f"ISR of {TOPIC}-{followed}: {isr(cluster, followed)}")

        grow(small_disk / "broker-1", 64 << 20)
        again = asyncio.run(send_all(bootstrap, led, [value(n) for n in range(100)]))
        acked.update(again)
        until(lambda: "writes succeed again" in broker_log(cluster, 1),
              "broker 1 saying writes succeed again", 60)
        until(lambda: 1 in isr(cluster, followed), "broker 1 back in the ISR", 90,
              detail=lambda: f"ISR of {TOPIC}-{followed}: {isr(cluster, followed)}")
        cluster.wait_fully_replicated(TOPIC, timeout_s=90)

        records = read_back(bootstrap, TOPIC, 3)
        assert dict(records[led]) == acked
        assert [o for o, _ in records[led]] == sorted(acked)
        assert dict(records[followed]) == more

        cluster.stop(1)
        cluster.restart(1)
        cluster.wait_fully_replicated(TOPIC, timeout_s=90)
        assert dict(read_back(bootstrap, TOPIC, 3)[led]) == acked
