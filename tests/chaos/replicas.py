"""What chaos tests read back from a cluster: replica logs through `epochlog dump-log`, quiet waits,
and a full read of a topic with confluent-kafka.

All of it goes through the same doors an operator uses: the `epochlog dump-log` command on each
broker's partition folder, Metadata requests, and a real client.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from protocol.apis.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponsePartition
from tests.broker.cluster import Cluster

QUIET_WAIT_S = 60.0
# dump-log fields that must agree between replicas; `position` may not (segments can roll at
# different offsets on different brokers).
BATCH_FIELDS = ("base_offset", "last_offset", "leader_epoch", "producer_id", "producer_epoch",
                "base_sequence", "record_count", "crc_valid", "size")


def dump_batches(cluster: Cluster, broker_id: int, topic: str, index: int) -> list[tuple]:
    """Every batch of one replica, as `epochlog dump-log` prints it (the fields that must agree)."""
    folder = cluster.broker(broker_id).data_dir / f"{topic}-{index}"
    if not folder.exists():
        return []
    out = subprocess.run([sys.executable, "-m", "epochlog", "dump-log", str(folder)],
                         capture_output=True, text=True, timeout=60, check=True)
    batches = []
    for line in out.stdout.splitlines():
        row = json.loads(line)
        if "base_offset" in row:
            batches.append(tuple(row[f] for f in BATCH_FIELDS))
        else:
            batches.append(("damaged", json.dumps(row, sort_keys=True)))
    return batches


def epoch_entries(cluster: Cluster, broker_id: int, topic: str, index: int = 0
                  ) -> list[tuple[int, int]]:
    """(leader epoch, start offset) of one replica, as `epochlog dump-checkpoint` prints its
    leader-epoch-checkpoint."""
    path = cluster.broker(broker_id).data_dir / f"{topic}-{index}" / "leader-epoch-checkpoint"
    out = subprocess.run([sys.executable, "-m", "epochlog", "dump-checkpoint", str(path)],
                         capture_output=True, text=True, timeout=60, check=True)
    return [(e["epoch"], e["start_offset"]) for e in json.loads(out.stdout)["entries"]]


def epoch_end(entries: list[tuple[int, int]], epoch: int, log_end: int) -> tuple[int, int]:
    """What OffsetForLeaderEpoch(epoch) must answer from a replica with these checkpoint
    entries: (the largest epoch <= `epoch`, the start of the next epoch, or log_end if none)."""
    below = [i for i, (e, _) in enumerate(entries) if e <= epoch]
    assert below, f"no epoch <= {epoch} in {entries}"
    found = below[-1]
    end = entries[found + 1][1] if found + 1 < len(entries) else log_end
    return entries[found][0], end


def partition_state(cluster: Cluster, topic: str) -> dict[int, Any]:
    md = cluster.metadata(topics=[topic])
    return {p.partition_index: p for t in md.topics for p in t.partitions}


def wait_quiet(cluster: Cluster, topic: str, partitions: int, replicas: int) -> None:
    """Until every partition has a leader, a full ISR, and identical replica logs (bounded)."""
    deadline = time.monotonic() + QUIET_WAIT_S
    last = "nothing checked yet"
    while time.monotonic() < deadline:
        try:
            state = partition_state(cluster, topic)
        except Exception as exc:  # a broker still restarting: ask again
            last = f"metadata failed: {exc}"
            time.sleep(0.5)
            continue
        full = (len(state) == partitions
                and all(p.leader_id >= 0 and len(p.isr_nodes) == replicas
                        for p in state.values()))
        if full:
            logs = {i: {b: dump_batches(cluster, b, topic, i) for b in cluster.brokers}
                    for i in range(partitions)}
            differing = [i for i, by_broker in logs.items()
                         if len({tuple(batches) for batches in by_broker.values()}) != 1]
            if not differing:
                return
            last = f"replica logs differ for partitions {differing}"
        else:
            last = "ISR not full: " + ", ".join(
                f"{i}: leader {p.leader_id} isr {list(p.isr_nodes)}" for i, p in state.items())
        time.sleep(0.5)
    raise AssertionError(f"cluster not quiet after {QUIET_WAIT_S} s: {last}")


def read_all(bootstrap: str, topic: str, partitions: int) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, (offset, value), read from the beginning up to the high
    watermark with confluent-kafka (bounded)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "chaos-reader",
                         "enable.auto.commit": False, "enable.partition.eof": True})
    try:
        ends = {i: consumer.get_watermark_offsets(TopicPartition(topic, i), timeout=20)[1]
                for i in range(partitions)}
        consumer.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
        got: dict[int, list[tuple[int, bytes]]] = {i: [] for i in range(partitions)}
        deadline = time.monotonic() + QUIET_WAIT_S

        def done() -> bool:
            return all((got[i][-1][0] + 1 if got[i] else 0) >= ends[i] for i in got)

        while not done():
            assert time.monotonic() < deadline, (
                f"read {[len(v) for v in got.values()]} records, high watermarks {ends}")
            for message in consumer.consume(1000, timeout=1.0):
                if message.error():
                    continue  # partition EOF and transient errors
                got[message.partition()].append((message.offset(), message.value()))
        return got
    finally:
        consumer.close()


def state_from(cluster: Cluster, broker_id: int, topic: str) -> MetadataResponsePartition:
    """Partition 0 as one broker's metadata has it (not any_broker(): one may be frozen)."""
    md = cluster.broker(broker_id).call(3, MetadataRequest(
        topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False))
    return md.topics[0].partitions[0]


def produce(bootstrap: str, topic: str, values: list[bytes], acks: str = "all") -> list[int]:
    """Produce to partition 0 and wait; the offsets acknowledged, in order."""
    offsets: list[int] = []
    errors: list[str] = []
    config = {"bootstrap.servers": bootstrap, "acks": acks, "message.timeout.ms": 30000}
    if acks == "all":
        config["enable.idempotence"] = True
    producer = Producer(config)

    def on_delivery(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            offsets.append(msg.offset())  # type: ignore[attr-defined]

    for value in values:
        producer.produce(topic, value=value, partition=0, on_delivery=on_delivery)
    assert producer.flush(60) == 0 and not errors, errors
    return offsets


def produce_paced(bootstrap: str, topic: str, rate_per_s: int, stop: Any,
                  on_delivery: Callable[[Any, Any], None],
                  placement: Callable[[int], dict[str, Any]]) -> int:
    """Records numbered from 0 (the value is the number) from an idempotent acks=all
    confluent-kafka producer, offered at rate_per_s until stop (a threading.Event) is set;
    placement(n) gives produce()'s key or partition for record n. Then a flush, bounded at 90 s.
    How many were offered."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000,
                         "retry.backoff.ms": 100})
    number, started = 0, time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate_per_s)
        while number < due:
            try:
                producer.produce(topic, value=str(number).encode(), on_delivery=on_delivery,
                                 **placement(number))
            except BufferError:
                break
            number += 1
        producer.poll(0.01)
    left = producer.flush(90)
    assert left == 0, f"{left} records still unacknowledged 90 s after the chaos stopped"
    return number
