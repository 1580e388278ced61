"""Child process for the crash tests: appends to one partition log and fsyncs, reporting on stdout
what is durable, until it is killed.

Usage: python -m tests.storage.crash_child DATA_DIR SEED
Lines out: `ready`, then after each fsync `flushed <log_end_offset> <tag>` (tag: the last batch's
tag; batch n of a run carries tag n, and runs go on from the tag the log already ends with).
"""

from __future__ import annotations

import random
import sys

from epochlog.broker.storage import LogConfig, LogManager

from .helpers import make_batch

CONFIG = LogConfig(segment_bytes=1 << 20, index_interval_bytes=1024, segment_index_bytes=240,
                   flush_ms=2**63 - 1)


def last_tag(log) -> int:
    from epochlog.protocol.records import decode_batch
    if log.log_end_offset == log.log_start_offset:
        return 0
    data = log.read(log.active_segment.base_offset, 1 << 30) or log.read(
        log.segments[-2].base_offset, 1 << 30)
    from epochlog.protocol.batch import iter_headers
    *_, (pos, _) = iter_headers(data)
    _, records = decode_batch(data, pos)
    return int(records[0].value.split(b":")[0])


def main() -> None:
    data_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    manager = LogManager.open(data_dir, CONFIG, lambda: 0, broker_id=1, cluster_id="crash")
    log = manager.get_or_create("t", 0)
    log.auto_flush = False
    tag = last_tag(log)
    epoch = max(log.epoch_cache.latest_epoch, 0)
    print("ready", flush=True)
    while True:
        if rng.random() < 0.02:
            epoch += 1
            log.begin_leader_epoch(epoch)
        tag += 1
        log.append_as_leader(make_batch(rng.randint(1, 8), value_bytes=rng.randint(10, 2000),
                                        tag=tag), epoch)
        if rng.random() < 0.1:
            log.flush()
            print(f"flushed {log.log_end_offset} {tag}", flush=True)
        if rng.random() < 0.02:
            manager.write_checkpoints()


if __name__ == "__main__":
    main()
