"""`Truncations`: acknowledged records a replica lost, counted, logged and kept in a file.

A replica's high watermark says which of its records were committed: acknowledged to acks=all
producers and visible to consumers. Cutting the log below it loses such records, which happens
when a follower truncates to a leader chosen by an unclean election (KIP-101: the leader's log
ends below what we had committed), or when recovery at start cuts a torn or corrupt batch below
the checkpointed high watermark. Each such cut is one WARNING line naming the partition and the
offset range, one more in the counters (`epochlog_broker_committed_offsets_truncated`), and one
JSON line in `<data dir>/committed-truncations.jsonl` (`epochlog truncations DATA_DIR` lists
them). The file stops growing at FILE_BYTES_MAX; the log line and counters go on.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

log = logging.getLogger("epochlog.storage")

TRUNCATIONS_FILE = "committed-truncations.jsonl"
FILE_BYTES_MAX = 1 << 20


class Truncations:
    def __init__(self, data_dir: str) -> None:
        self.path = os.path.join(data_dir, TRUNCATIONS_FILE)
        self.events_total = 0
        self.offsets_total = 0

    def record(self, partition: str, start: int, end: int, why: str) -> None:
        """Committed offsets [start, end) of `partition` were cut away."""
        if end <= start:
            return
        self.events_total += 1
        self.offsets_total += end - start
        log.warning("%s: cut committed offsets [%d, %d) (%d acknowledged offsets gone from this "
                    "replica): %s",
                    partition, start, end, end - start, why)
        line = json.dumps({"time_ms": int(time.time() * 1000), "partition": partition,
                           "start_offset": start, "end_offset": end, "why": why}) + "\n"
        try:
            if os.path.exists(self.path) and os.path.getsize(self.path) >= FILE_BYTES_MAX:
                return
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(line)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:  # a full disk: the line and counters above still tell it
            log.warning("%s: could not record the truncation in %s: %s", partition, self.path,
                        exc.strerror or exc)


def read_truncations(data_dir: str) -> list[dict[str, Any]]:
    """The recorded truncations of a data dir, oldest first (none if there is no file)."""
    path = os.path.join(data_dir, TRUNCATIONS_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
