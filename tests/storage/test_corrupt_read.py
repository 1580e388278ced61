"""Corruption found on read (issue 19), on real broker processes.

8 bytes are overwritten in the records of the middle batch of a stopped broker's segment, after a
clean shutdown (so the broker opens the file as clean and finds the damage only when it reads).
A fetch at the damaged batch is answered KAFKA_STORAGE_ERROR (retriable), never with a corrupt
byte; the broker logs one error naming the partition, the file and the offset, and stays up. It
cuts its log before the damage and takes the replica offline (BrokerHeartbeat's
offline_log_dirs); the controller elects another in-sync replica, the damaged one fetches what
it cut from the new leader and is back in the ISR. With three replicas nothing acknowledged is
lost; with one, the records after the damage are lost, and the cut is recorded as such.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from epochlog import Admin, Consumer, Producer, TopicPartition
from epochlog.broker.storage.truncations import read_truncations
from epochlog.protocol.batch import read_header
from epochlog.testing import Cluster, until

RECORDS = 200


async def produce(bootstrap: str) -> None:
    """RECORDS records, value n at offset n, flushed in tens: several batches."""
    async with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0) as producer:
        for start in range(0, RECORDS, 10):
            futures = [await producer.send("t", str(n).encode(), partition=0)
                       for n in range(start, start + 10)]
            await producer.flush()
            await asyncio.gather(*futures)


async def consume(bootstrap: str, seconds: float, enough: int | None = None
                  ) -> list[tuple[int, bytes]]:
    """What a consumer from offset 0 gets in `seconds`, or until it has `enough` records (it
    retries the storage error)."""
    got: list[tuple[int, bytes]] = []
    async with Consumer(bootstrap_servers=bootstrap) as consumer:
        tp = TopicPartition("t", 0)
        consumer.assign([tp])
        consumer.seek(tp, 0)
        deadline = asyncio.get_running_loop().time() + seconds
        while asyncio.get_running_loop().time() < deadline and (
                enough is None or len(got) < enough):
            for record in await consumer.poll(timeout_ms=200):
                got.append((record.offset, record.value or b""))
    return got


def batch_positions(path: Path) -> list[tuple[int, int]]:
    """(position, base offset) of each batch in a segment file."""
    data = path.read_bytes()
    out, pos = [], 0
    while pos < len(data):
        header = read_header(data, pos)
        out.append((pos, header.base_offset))
        pos += header.size
    return out


def damage_middle_batch(segment: Path) -> int:
    """Overwrite 8 bytes of the middle batch's first record (its CRC fails); its base offset."""
    positions = batch_positions(segment)
    assert len(positions) >= 6, positions
    position, damaged_offset = positions[len(positions) // 2]
    with open(segment, "r+b") as f:
        f.seek(position + 61)  # its first record, past the 61-byte header
        f.write(b"\xee" * 8)
        f.flush()
        os.fsync(f.fileno())
    return damaged_offset


def error_lines(cluster_dir: Path, broker: int) -> list[str]:
    text = (cluster_dir / "logs" / f"broker-{broker}.log").read_text()
    return [line for line in text.splitlines()
            if " ERROR " in line and "corrupt data on disk" in line]


def test_the_only_replica_serves_what_is_intact_and_records_the_loss(tmp_path: Path) -> None:
    """Replication factor 1: nothing to repair from. The intact batches before the damage are
    served, the damage never; the log is cut there (the records after it are lost, recorded in
    committed-truncations.jsonl) and the partition leads again in a new leader epoch and takes
    writes."""
    with Cluster(1, base_dir=tmp_path / "cluster") as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=1)
        asyncio.run(produce(cluster.bootstrap_servers))
        epoch_before = cluster.partitions("t")[0].leader_epoch
        cluster.stop(1)  # clean: the next start trusts the file
        segment = tmp_path / "cluster" / "broker-1" / "t-0" / f"{0:020d}.log"
        damaged_offset = damage_middle_batch(segment)
        cluster.restart(1)

        got = asyncio.run(consume(cluster.bootstrap_servers, 6.0))
        assert got == [(n, str(n).encode()) for n in range(damaged_offset)]
        assert cluster.pid(1) is not None
        lines = error_lines(tmp_path / "cluster", 1)
        assert len(lines) == 1, lines
        assert "t-0" in lines[0] and str(segment) in lines[0]
        assert f"offset {damaged_offset}" in lines[0], lines[0]
        cuts = read_truncations(str(tmp_path / "cluster" / "broker-1"))
        assert [(c["partition"], c["start_offset"], c["end_offset"]) for c in cuts] == \
            [("t-0", damaged_offset, RECORDS)], cuts
        assert "damaged data cut off" in cuts[0]["why"]
        until(lambda: cluster.partitions("t")[0].leader_id == 1 or None,
              "broker 1 leading t-0 again", 30)
        assert cluster.partitions("t")[0].leader_epoch > epoch_before
        asyncio.run(produce_one(cluster.bootstrap_servers, b"after"))
        got = asyncio.run(consume(cluster.bootstrap_servers, 3.0))
        assert got[-1] == (damaged_offset, b"after"), got[-3:]


async def produce_one(bootstrap: str, value: bytes) -> None:
    async with Producer(bootstrap_servers=bootstrap, acks="all") as producer:
        await producer.send_and_wait("t", value, partition=0)


def test_a_damaged_leader_hands_over_and_is_repaired_from_a_healthy_replica(tmp_path: Path
                                                                            ) -> None:
    """Replication factor 3, acks=all: the damaged leader goes offline, the controller elects
    another in-sync replica, a consumer from offset 0 reads every acknowledged record (0 lost),
    and the damaged replica is cut, fetches again and is back in the ISR, byte for byte the
    same log as a healthy replica."""
    base = tmp_path / "cluster"
    with Cluster(3, base_dir=base, settings={"min.insync.replicas": 2}) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        asyncio.run(produce(cluster.bootstrap_servers))
        damaged = cluster.partitions("t")[0].replica_nodes[0]  # the preferred leader
        cluster.stop(damaged)
        segment = base / f"broker-{damaged}" / "t-0" / f"{0:020d}.log"
        damaged_offset = damage_middle_batch(segment)
        cluster.restart(damaged)
        cluster.wait_fully_replicated("t")
        asyncio.run(elect_preferred(cluster.bootstrap_servers))
        until(lambda: cluster.partitions("t")[0].leader_id == damaged or None,
              f"broker {damaged} leading t-0 again", 30)

        started = time.monotonic()
        got = asyncio.run(consume(cluster.bootstrap_servers, 60.0, enough=RECORDS))
        assert got == [(n, str(n).encode()) for n in range(RECORDS)], \
            f"{RECORDS - len(got)} acknowledged records not read back"
        read_s = time.monotonic() - started
        new_leader = cluster.leader_of("t", 0)
        assert new_leader != damaged
        state = cluster.wait_fully_replicated("t", timeout_s=60)[0]
        repaired_s = time.monotonic() - started
        assert damaged in state.isr_nodes
        healthy = base / f"broker-{new_leader}" / "t-0" / f"{0:020d}.log"
        assert segment.read_bytes() == healthy.read_bytes()
        assert len(error_lines(base, damaged)) == 1
        assert f"offset {damaged_offset}" in error_lines(base, damaged)[0]
        controller_log = (base / "logs" / "controller.log").read_text()
        assert f"the replica on broker {damaged} is offline" in controller_log
        assert f"the replica on broker {damaged} is online again" in controller_log
        print(f"damaged leader {damaged} -> {new_leader}: every record read {read_s:.1f} s "
              f"and the damaged replica back in the ISR {repaired_s:.1f} s after the consumer "
              "started")


async def elect_preferred(bootstrap: str) -> None:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        await admin.elect_leaders("preferred", [TopicPartition("t", 0)])
