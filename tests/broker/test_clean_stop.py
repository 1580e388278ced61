"""A clean stop (SIGTERM) of a broker hosting many partitions is quick and still durable
(issue 33: at 10,000 partitions it took more than 30 s, two fsyncs per partition for a producer
snapshot rewritten at every stop, one log after another).

On a real broker with IDLE partitions that never took a record and BUSY ones that did: a clean
stop leaves no producer snapshot in an idle partition's folder (it holds nothing to snapshot),
and one at the log end in each busy one (the next start replays nothing); a second clean stop
with nothing appended in between writes none (the newest snapshot is already at the log end:
Kafka's rule), which the broker's own line says; and after each stop the broker starts from its
clean-shutdown marker with every acknowledged record readable.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from .cluster import Cluster
from .test_replication import producer, send_all

IDLE, BUSY = "idle", "busy"
IDLE_PARTITIONS = 300
BUSY_PARTITIONS = 3
RECORDS = 30
CLOSED = re.compile(r"data dir \S+: (\d+) logs flushed, (\d+) producer snapshots written")


def snapshots(folder: Path) -> dict[str, int]:
    """snapshot file name -> inode (a rewrite renames a new file into place)."""
    return {n: os.stat(folder / n).st_ino for n in os.listdir(folder) if n.endswith(".snapshot")}


def stop_cleanly(c: Cluster) -> tuple[int, int] | None:
    """SIGTERM; (logs flushed, snapshots written) as the broker says in its last such line."""
    b = c.broker(1)
    assert b.stop() == 0 and b.has_line("closed data dir"), b.tail(20)
    found = CLOSED.findall(b.log_path.read_text())
    return (int(found[-1][0]), int(found[-1][1])) if found else None


def read_values(c: Cluster) -> list[bytes]:
    from kafka import KafkaConsumer
    consumer = KafkaConsumer(BUSY, bootstrap_servers=c.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000, enable_auto_commit=False)
    try:
        return sorted(m.value for m in consumer)
    finally:
        consumer.close()


def test_a_clean_stop_writes_only_the_snapshots_it_needs(tmp_path) -> None:
    values = sorted(b"v%03d" % i for i in range(RECORDS))
    with Cluster(tmp_path, brokers=1) as c:
        c.create_topic(IDLE, partitions=IDLE_PARTITIONS, replication_factor=1)
        c.create_topic(BUSY, partitions=BUSY_PARTITIONS, replication_factor=1)
        p = producer(c)
        send_all(p, BUSY, values)
        p.close()
        data = Path(c.broker(1).data_dir)

        said = stop_cleanly(c)

        assert all(not snapshots(data / f"{IDLE}-{i}") for i in range(IDLE_PARTITIONS))
        busy = {i: snapshots(data / f"{BUSY}-{i}") for i in range(BUSY_PARTITIONS)}
        assert all(len(files) == 1 for files in busy.values()), busy
        # no group: no offsets topic
        assert said == (IDLE_PARTITIONS + BUSY_PARTITIONS, BUSY_PARTITIONS)

        c.broker(1).start()
        c.broker(1).wait_started()
        assert read_values(c) == values
        said = stop_cleanly(c)

        assert busy == {i: snapshots(data / f"{BUSY}-{i}") for i in range(BUSY_PARTITIONS)}
        assert said == (IDLE_PARTITIONS + BUSY_PARTITIONS, 0)
        c.broker(1).start()
        c.broker(1).wait_started()
        assert read_values(c) == values
