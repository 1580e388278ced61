"""Append and read throughput of the storage engine, beside the raw limit measured in the same run.

For 16 KiB and 1 MiB batches, with an fsync every second:
- raw: plain os.write of the same bytes to one file (the yardstick);
- log: Log.append_as_leader (validate, CRC, stamp, index, write) with flush_ms=1000;
- the ways the broker's asyncio loop could drive appends, to pick one: direct calls on the loop
  with the fsync on the loop too; direct calls with the fsync in an executor (begin_flush /
  FlushJob.run / end_flush); every append through an executor; and aiofiles writing the raw bytes.
Then read throughput: Log.read (index lookup, CRC check of every batch) against raw os.pread.

Usage: python bench/log_append.py [--seconds 2] [--dir PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time

import aiofiles
import uvloop

from epochlog.broker.storage import Log, LogConfig
from epochlog.protocol.records import build_batch

FSYNC_INTERVAL_S = 1.0
RECORD_VALUE_BYTES = 1000


def make_batch(batch_bytes: int) -> bytes:
    count = max(1, batch_bytes // (RECORD_VALUE_BYTES + 20))
    return build_batch([(None, os.urandom(RECORD_VALUE_BYTES), None, 1_700_000_000_000)] * count)


def config() -> LogConfig:
    return LogConfig(flush_ms=int(FSYNC_INTERVAL_S * 1000), max_message_bytes=4 << 20,
                     retention_ms=-1)


def clock() -> int:
    return time.monotonic_ns() // 1_000_000


def report(name: str, total_bytes: int, count: int, seconds: float, raw_mb_s: float | None = None
           ) -> float:
    mb_s = total_bytes / seconds / 1e6
    ratio = f"  {100 * mb_s / raw_mb_s:5.1f}% of raw" if raw_mb_s else ""
    print(f"  {name:<38} {mb_s:9.1f} MB/s {count / seconds:10.0f} batches/s{ratio}")
    return mb_s


def raw_append(path: str, batch: bytes, seconds: float) -> tuple[int, int, float]:
    os.sync()  # each measurement starts with no dirty pages from the one before
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = last_sync = time.perf_counter()
    count = 0
    while (now := time.perf_counter()) - start < seconds:
        os.write(fd, batch)
        count += 1
        if now - last_sync >= FSYNC_INTERVAL_S:
            os.fsync(fd)
            last_sync = now
    os.fsync(fd)
    elapsed = time.perf_counter() - start
    os.close(fd)
    return count * len(batch), count, elapsed


def log_append(path: str, batch: bytes, seconds: float) -> tuple[int, int, float]:
    os.sync()
    log = Log.open(path, config(), clock)
    start = time.perf_counter()
    count = 0
    while time.perf_counter() - start < seconds:
        log.append_as_leader(batch, 0)
        count += 1
    log.flush()
    elapsed = time.perf_counter() - start
    log.close()
    return count * len(batch), count, elapsed


async def loop_direct(path: str, batch: bytes, seconds: float, fsync_in_executor: bool
                      ) -> tuple[int, int, float]:
    os.sync()
    loop = asyncio.get_running_loop()
    log = Log.open(path, config(), clock)
    log.auto_flush = not fsync_in_executor
    flushing: asyncio.Future | None = None

    async def flush() -> None:
        job = log.begin_flush()
        await loop.run_in_executor(None, job.run)
        log.end_flush(job)

    start = time.perf_counter()
    count = 0
    while time.perf_counter() - start < seconds:
        log.append_as_leader(batch, 0)
        count += 1
        if fsync_in_executor and (flushing is None or flushing.done()) and log.flush_due():
            flushing = asyncio.ensure_future(flush())
        if count % 64 == 0:
            await asyncio.sleep(0)  # let other tasks (the flush) run, as a broker loop would
    if flushing is not None:
        await flushing
    log.flush()
    elapsed = time.perf_counter() - start
    log.close()
    return count * len(batch), count, elapsed


async def loop_executor(path: str, batch: bytes, seconds: float) -> tuple[int, int, float]:
    os.sync()
    loop = asyncio.get_running_loop()
    log = Log.open(path, config(), clock)
    start = time.perf_counter()
    count = 0
    while time.perf_counter() - start < seconds:
        await loop.run_in_executor(None, log.append_as_leader, batch, 0)
        count += 1
    log.flush()
    elapsed = time.perf_counter() - start
    log.close()
    return count * len(batch), count, elapsed


async def loop_aiofiles(path: str, batch: bytes, seconds: float) -> tuple[int, int, float]:
    os.sync()
    start = last_sync = time.perf_counter()
    count = 0
    async with aiofiles.open(path, "wb", buffering=0) as f:
        while (now := time.perf_counter()) - start < seconds:
            await f.write(batch)
            count += 1
            if now - last_sync >= FSYNC_INTERVAL_S:
                await asyncio.get_running_loop().run_in_executor(None, os.fsync, f.fileno())
                last_sync = now
    elapsed = time.perf_counter() - start
    return count * len(batch), count, elapsed


def read_back(path: str, bytes_max: int) -> tuple[int, int, float, int, float]:
    """(bytes, batches, seconds) through Log.read, then (bytes, seconds) of raw preads."""
    log = Log.open(path, config(), clock, clean_shutdown=True)
    start = time.perf_counter()
    offset, total, batches = 0, 0, 0
    while offset < log.log_end_offset:
        data = log.read(offset, bytes_max)
        total += len(data)
        from epochlog.protocol.batch import iter_headers
        for _, header in iter_headers(data):
            batches += 1
            offset = header.next_offset
    elapsed = time.perf_counter() - start
    raw_total, raw_start = 0, time.perf_counter()
    for segment in log.segments:
        fd = os.open(segment.log_path, os.O_RDONLY)
        position = 0
        while chunk := os.pread(fd, bytes_max, position):
            position += len(chunk)
            raw_total += len(chunk)
        os.close(fd)
    raw_elapsed = time.perf_counter() - raw_start
    log.close()
    return total, batches, elapsed, raw_total, raw_elapsed


def measure_variants(root: str, batch: bytes, seconds: float
                     ) -> dict[str, tuple[int, int, float]]:
    """One run of every append variant, raw first; their files removed afterwards."""
    runs = {
        "raw os.write (yardstick)": lambda: raw_append(f"{root}/raw", batch, seconds),
        "Log.append_as_leader": lambda: log_append(f"{root}/log-0", batch, seconds),
        "loop: direct, fsync on loop": lambda: asyncio.run(
            loop_direct(f"{root}/a-0", batch, seconds, False)),
        "loop: direct, fsync in executor": lambda: asyncio.run(
            loop_direct(f"{root}/b-0", batch, seconds, True)),
        "loop: every append in executor": lambda: asyncio.run(
            loop_executor(f"{root}/c-0", batch, seconds)),
        "loop: aiofiles raw write": lambda: asyncio.run(
            loop_aiofiles(f"{root}/d", batch, seconds)),
    }
    results = {}
    for name, run in runs.items():
        results[name] = run()
        for leftover in os.listdir(root):
            if leftover != "log-0":
                path = os.path.join(root, leftover)
                shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)
    return results


def median_run(runs: list[tuple[int, int, float]]) -> tuple[int, int, float]:
    return sorted(runs, key=lambda r: r[0] / r[2])[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per measurement")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds of every variant, interleaved; the median is printed "
                             "(this machine's disk throughput varies a lot from run to run)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="log_append_", dir=args.dir)
    uvloop.install()
    try:
        for label, batch_bytes in (("16 KiB", 16 << 10), ("1 MiB", 1 << 20)):
            batch = make_batch(batch_bytes)
            print(f"{label} batches ({len(batch)} bytes), fsync every {FSYNC_INTERVAL_S:g} s, "
                  f"median of {args.repeat}:")
            rounds: dict[str, list[tuple[int, int, float]]] = {}
            for _ in range(args.repeat):
                if os.path.exists(f"{root}/log-0"):
                    shutil.rmtree(f"{root}/log-0")
                for name, result in measure_variants(root, batch, args.seconds).items():
                    rounds.setdefault(name, []).append(result)
            raw = None
            for name, runs in rounds.items():
                mb_s = report(name, *median_run(runs), raw_mb_s=raw)
                raw = raw or mb_s
            total, batches, elapsed, raw_total, raw_elapsed = read_back(f"{root}/log-0", 1 << 20)
            raw_read = report("raw os.pread 1 MiB chunks (yardstick)", raw_total, batches,
                              raw_elapsed)
            report("Log.read 1 MiB (CRC-checked)", total, batches, elapsed, raw_mb_s=raw_read)
            shutil.rmtree(f"{root}/log-0")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
