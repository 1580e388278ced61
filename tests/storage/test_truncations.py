"""Cuts below the high watermark are counted, logged and recorded (issue 19, its accounting part).

Real files in a data dir: a follower truncating below its high watermark (as after an unclean
election), and recovery at start cutting a damaged batch below the checkpointed high watermark,
each land in `committed-truncations.jsonl` with partition and offset range, and
`epochlog truncations DATA_DIR` lists them. A cut at or above the high watermark (the normal
KIP-101 truncation of uncommitted records) is not recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from epochlog.broker.storage import LogManager
from epochlog.broker.storage.truncations import read_truncations

from .helpers import SMALL, FakeClock, make_batch

ROOT = Path(__file__).resolve().parents[2]


def open_manager(data_dir: Path, clock: FakeClock) -> LogManager:
    return LogManager.open(str(data_dir), SMALL, clock, broker_id=1, cluster_id="c")


def fill(manager: LogManager, batches: int) -> None:
    log = manager.get_or_create("t", 0)
    for n in range(batches):
        log.append_as_leader(make_batch(5, tag=n), 0)


def test_follower_cut_below_the_high_watermark_is_recorded(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture
                                                           ) -> None:
    manager = open_manager(tmp_path, FakeClock())
    fill(manager, 4)  # offsets 0-19
    log = manager.get("t", 0)
    assert log is not None
    log.high_watermark = 10
    log.truncate_to(15)  # above the high watermark: uncommitted records, nothing lost
    assert read_truncations(str(tmp_path)) == []
    log.truncate_to(5)
    events = read_truncations(str(tmp_path))
    assert [(e["partition"], e["start_offset"], e["end_offset"]) for e in events] == [
        ("t-0", 5, 10)]
    assert manager.truncations.events_total == 1 and manager.truncations.offsets_total == 5
    assert any("cut committed offsets [5, 10)" in r.getMessage() for r in caplog.records)


def test_recovery_cut_below_the_checkpointed_high_watermark_is_recorded(tmp_path: Path) -> None:
    clock = FakeClock()
    manager = open_manager(tmp_path, clock)
    fill(manager, 4)
    log = manager.get("t", 0)
    assert log is not None
    log.high_watermark = 20
    log.flush()
    manager.write_checkpoints()  # then a crash: no clean-shutdown marker
    segment = log.active_segment.log_path
    size = os.path.getsize(segment)
    with open(segment, "r+b") as f:  # the last batch's records, inside its CRC
        f.seek(size - 20)
        f.write(b"\xee" * 8)
    reopened = open_manager(tmp_path, FakeClock())
    cut_log = reopened.get("t", 0)
    assert cut_log is not None and cut_log.log_end_offset == 15
    events = read_truncations(str(tmp_path))
    assert [(e["partition"], e["start_offset"], e["end_offset"]) for e in events] == [
        ("t-0", 15, 20)]
    assert "recovery" in str(events[0]["why"])

    out = subprocess.run([sys.executable, "-m", "epochlog", "truncations", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["start_offset"] for line in out.stdout.splitlines()] == [15]
    assert "1 truncations of committed records, 5 offsets" in out.stderr
    missing = subprocess.run([sys.executable, "-m", "epochlog", "truncations",
                              str(tmp_path / "nope")], cwd=ROOT, capture_output=True,
                             text=True, check=False, timeout=60)
    assert missing.returncode == 1 and "not a folder" in missing.stderr
