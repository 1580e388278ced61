"""What chaos tests read of the replicas themselves: their logs through `epochlog dump-log`, their
leader-epoch checkpoints through `epochlog dump-checkpoint`, a partition as one broker's
metadata has it; and a kill awaited until the controller saw it. Traffic (produce, read back)
is `epochlog.testing.traffic`'s, waits are `epochlog.testing.until`.

All of it goes through the doors an operator uses: the two dump commands on a broker's partition
folder, and Metadata requests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponsePartition,
)
from epochlog.testing import Cluster, until

QUIET_S = 60.0
DUMP_S = 60.0
# dump-log fields that must agree between replicas; `position` may not (segments can roll at
# different offsets on different brokers).
BATCH_FIELDS = ("base_offset", "last_offset", "leader_epoch", "producer_id", "producer_epoch",
                "base_sequence", "record_count", "crc_valid", "size")


def dump_batches(cluster: Cluster, broker: int, topic: str, index: int) -> list[tuple[Any, ...]]:
    """Every batch of one replica, as `epochlog dump-log` prints it (the fields that must agree)."""
    folder = cluster.brokers[broker].data_dir / f"{topic}-{index}"
    if not folder.exists():
        return []
    out = subprocess.run([sys.executable, "-m", "epochlog", "dump-log", str(folder)],
                         capture_output=True, text=True, timeout=DUMP_S, check=True)
    batches: list[tuple[Any, ...]] = []
    for line in out.stdout.splitlines():
        row = json.loads(line)
        if "base_offset" in row:
            batches.append(tuple(row[f] for f in BATCH_FIELDS))
        else:
            batches.append(("damaged", json.dumps(row, sort_keys=True)))
    return batches


def epoch_entries(cluster: Cluster, broker: int, topic: str, index: int = 0
                  ) -> list[tuple[int, int]]:
    """(leader epoch, start offset) of one replica, as `epochlog dump-checkpoint` prints its
    leader-epoch-checkpoint."""
    path = cluster.brokers[broker].data_dir / f"{topic}-{index}" / "leader-epoch-checkpoint"
    out = subprocess.run([sys.executable, "-m", "epochlog", "dump-checkpoint", str(path)],
                         capture_output=True, text=True, timeout=DUMP_S, check=True)
    return [(e["epoch"], e["start_offset"]) for e in json.loads(out.stdout)["entries"]]


def epoch_end(entries: list[tuple[int, int]], epoch: int, log_end: int) -> tuple[int, int]:
    """What OffsetForLeaderEpoch(epoch) must answer from a replica with these checkpoint
    entries: (the largest epoch <= `epoch`, the start of the next epoch, or log_end if none)."""
    below = [i for i, (e, _) in enumerate(entries) if e <= epoch]
    assert below, f"no epoch <= {epoch} in {entries}"
    found = below[-1]
    end = entries[found + 1][1] if found + 1 < len(entries) else log_end
    return entries[found][0], end


def state_from(cluster: Cluster, broker: int, topic: str, index: int = 0
               ) -> MetadataResponsePartition:
    """One partition as one broker's metadata has it (not whichever answers first: one may be
    frozen or cut off). AssertionError (which `until` asks again after) while that broker does
    not know the partition yet, as after a restart."""
    md = cluster.brokers[broker].call(ApiKey.METADATA, MetadataRequest(
        topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False))
    found = [p for t in md.topics for p in t.partitions if p.partition_index == index]
    assert found, f"broker {broker} does not know {topic}-{index} yet"
    return found[0]


def wait_quiet(cluster: Cluster, topic: str, partitions: int, replicas: int,
               timeout_s: float = QUIET_S) -> None:
    """Until every partition has a leader and `replicas` replicas in its ISR, and every
    replica's log holds the same batches (bounded)."""
    def quiet() -> bool:
        state = {i: p for t in cluster.metadata(topics=[topic]).topics for p in t.partitions
                 for i in [p.partition_index]}
        ragged = {i: (p.leader_id, list(p.isr_nodes)) for i, p in state.items()
                  if p.leader_id < 0 or len(p.isr_nodes) != replicas}
        assert len(state) == partitions and not ragged, f"ISR not full: {ragged or state}"
        differing = [i for i in range(partitions)
                     if len({tuple(dump_batches(cluster, b, topic, i))
                             for b in cluster.brokers}) != 1]
        assert not differing, f"replica logs differ for partitions {differing}"
        return True

    until(quiet, f"{topic}: full ISRs and identical replica logs", timeout_s, interval_s=0.5)


def kill_until_dead(cluster: Cluster, broker: int, timeout_s: float = QUIET_S) -> None:
    """SIGKILL a broker, then wait until the controller has ended its generation (its log
    says so): from then on it is out of every ISR and may not be elected cleanly."""
    controller = cluster.node(cluster.controller)
    mark = controller.mark()
    cluster.kill(broker)
    controller.wait_line(rf"broker {broker} generation \d+ is dead", start=mark,
                         timeout_s=timeout_s)
