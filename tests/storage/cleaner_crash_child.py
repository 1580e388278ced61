"""Child process for the cleaner's crash tests: appends updates to a few keys of a compacted log
and cleans it over and over (every pass swaps segments), until it is SIGKILLed.

Usage: python -m tests.storage.cleaner_crash_child DATA_DIR SEED
Record n (n = 0, 1, ...) sits at offset n, has key `k<n % KEYS>` and value `<n>:` padded, so the
parent can tell, for any record it reads back, whether it is one that was written.
Lines out: `ready`, then `flushed <n>` after each fsync (records 0..n-1 are durable).
"""

from __future__ import annotations

import random
import sys

from epochlog.broker.storage import LogConfig, LogManager
from epochlog.broker.storage.cleaner import CleanerSettings, LogCleaner
from epochlog.protocol.records import build_batch

KEYS = 7
CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=4096,
                   flush_ms=2**63 - 1, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0)
SETTINGS = CleanerSettings(offset_map_bytes_max=120 * 5)  # 5 keys: several passes per clean


def record(n: int, value_bytes: int) -> bytes:
    return build_batch([(b"k%d" % (n % KEYS), b"%d:" % n + b"x" * value_bytes, None, n)])


def open_manager(data_dir: str) -> LogManager:
    return LogManager.open(data_dir, CONFIG, lambda: 0, broker_id=1, cluster_id="crash",
                           configs={"t": CONFIG})


def main() -> None:
    data_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    manager = open_manager(data_dir)
    log = manager.get_or_create("t", 0, CONFIG)
    log.auto_flush = False
    cleaner = LogCleaner(manager, SETTINGS, lambda: 0)
    n = log.log_end_offset
    print("ready", flush=True)
    while True:
        for _ in range(rng.randint(1, 40)):
            log.append_as_leader(record(n, rng.randint(10, 200)), 0)
            n += 1
        log.update_high_watermark(log.log_end_offset)
        log.flush()
        print(f"flushed {n}", flush=True)
        for _ in range(rng.randint(0, 3)):
            cleaner.clean_once()
        if rng.random() < 0.2:
            manager.write_checkpoints()


if __name__ == "__main__":
    main()
