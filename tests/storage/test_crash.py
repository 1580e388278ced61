"""Crash tests on real processes. A child appends and fsyncs, reporting what it fsynced; it is
SIGKILLed at a random moment; the parent reopens the data dir and checks that every fsynced batch
is there, the tail is clean, the indexes and the epoch cache agree with the batches. Then the
damage a power loss or a bad disk would do is added by hand (a tail cut mid-batch, flipped bytes):
it is repaired where it lies past the fsynced part, and refused (never served) where it does not."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from epochlog.broker.storage import CorruptLog, LogManager
from epochlog.protocol.batch import iter_headers
from epochlog.protocol.records import decode_batches

from .crash_child import CONFIG

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUNS = 12
RUNS_SLOW = 200


def run_child_and_kill(data_dir: str, seed: int, rng: random.Random) -> tuple[int, int]:
    """Start the child, kill it at a random moment; (log end, tag) of its last fsync."""
    child = subprocess.Popen([sys.executable, "-m", "tests.storage.crash_child", data_dir,
                              str(seed)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    time.sleep(rng.uniform(0.0, 0.25))
    child.send_signal(signal.SIGKILL)
    child.wait()
    flushed = (0, 0)
    for line in child.stdout.read().splitlines():
        if line.startswith("flushed "):
            _, end, tag = line.split()
            flushed = (int(end), int(tag))
    child.stdout.close()
    return flushed


def reopen(data_dir: str) -> LogManager:
    return LogManager.open(data_dir, CONFIG, lambda: 0, broker_id=1, cluster_id="crash")


def check_log(data_dir: str, flushed_end: int, flushed_tag: int) -> None:
    manager = reopen(data_dir)
    log = manager.get("t", 0)
    assert not manager.had_clean_shutdown
    assert log.log_end_offset >= flushed_end, "an fsynced batch is missing"
    offset, tags, epochs = 0, [], []
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)  # CRC-checked
        for header, records in decode_batches(data):
            assert header.base_offset == offset
            tags.append(int(records[0].value.split(b":")[0]))
            if not epochs or epochs[-1][1] != header.partition_leader_epoch:
                epochs.append((header.base_offset, header.partition_leader_epoch))
            offset = header.next_offset
    assert tags == list(range(1, len(tags) + 1)), "batches missing or out of order"
    assert len(tags) >= flushed_tag
    for segment in log.segments:
        for key, position in segment.offset_index.entries():
            assert segment.header_at(position).last_offset == key
    cache = [(e.start_offset, e.epoch) for e in log.epoch_cache.entries]
    assert cache[:len(epochs)] == epochs
    assert all(start == log.log_end_offset for start, _ in cache[len(epochs):])
    manager.close()


def active_segment_path(data_dir: str) -> str:
    folder = os.path.join(data_dir, "t-0")
    return os.path.join(folder, max(n for n in os.listdir(folder) if n.endswith(".log")))


def flushed_position(path: str, flushed_end: int) -> int:
    """Byte position in the segment at which batches past flushed_end begin."""
    with open(path, "rb") as f:
        data = f.read()
    for pos, header in iter_headers(data):
        if header.base_offset >= flushed_end:
            return pos
    return len(data)


def crash_rounds(tmp_path, runs: int, damage: str) -> None:
    rng = random.Random(f"{damage}-{runs}")
    data_dir = str(tmp_path / "data")
    best_end, best_tag = 0, 0
    for _ in range(runs):
        end, tag = run_child_and_kill(data_dir, rng.randrange(2**32), rng)
        best_end, best_tag = max(best_end, end), max(best_tag, tag)
        if damage != "none":
            path = active_segment_path(data_dir)
            start = flushed_position(path, best_end)
            size = os.path.getsize(path)
            if size > start:
                damage_file(path, outside_epoch_fields(path, rng.randrange(start, size)), damage)
        check_log(data_dir, best_end, best_tag)


def outside_epoch_fields(path: str, position: int) -> int:
    """position, moved past a batch's partition leader epoch (header bytes 12-15) if it falls
    there: Kafka's format leaves that field outside the CRC, so no check can see a flip in it
    (a flipped epoch then disagrees with the epoch cache; Kafka's recovery would even adopt it)."""
    with open(path, "rb") as f:
        data = f.read()
    for pos, _ in iter_headers(data):
        if pos + 12 <= position < pos + 16:
            return pos + 16
    return position


def damage_file(path: str, position: int, damage: str) -> None:
    with open(path, "r+b") as f:
        if damage == "cut":
            f.truncate(position)
        else:
            f.seek(position)
            byte = f.read(1)
            f.seek(position)
            f.write(bytes([byte[0] ^ 0x5A]))


@pytest.mark.parametrize("damage", ["none", "cut", "flip"])
def test_sigkill_at_random_moments(tmp_path, damage):
    crash_rounds(tmp_path, RUNS, damage)


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["none", "cut", "flip"])
def test_sigkill_many_times(tmp_path, damage):
    crash_rounds(tmp_path, RUNS_SLOW, damage)


def test_flipped_byte_below_the_recovery_point_is_refused_never_served(tmp_path):
    data_dir = str(tmp_path / "data")
    run_child_and_kill(data_dir, 7, random.Random(1))
    manager = reopen(data_dir)
    manager.close()  # clean: nothing will be rescanned on open
    path = os.path.join(data_dir, "t-0", f"{0:020d}.log")
    damage_file(path, 200, "flip")
    manager = reopen(data_dir)
    log = manager.get("t", 0)
    with pytest.raises(CorruptLog, match="CRC|corrupt|batch"):
        log.read(0, 1 << 20)
    out = subprocess.run([sys.executable, "-m", "epochlog", "dump-log", path], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    assert out.returncode == 1
    assert json.loads(out.stdout.splitlines()[0])["crc_valid"] is False
