"""The bounded cache of log file descriptors (open_files.py) and running out of descriptors
(descriptors.py): the descriptors held grow with the files in use, not with the logs hosted; a
file written since its last fsync is never closed by eviction; and EMFILE is an operating
limit (a retriable error, no disk failure), never a broken log.

The EMFILE test lowers this process's soft open-files limit for a moment (and puts it back): the
real errno from the real kernel, not a mock."""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochlog.broker.storage import DescriptorsExhausted, DiskHealth, LogConfig
from epochlog.broker.storage.descriptors import budget
from epochlog.broker.storage.open_files import OpenFiles

from .helpers import FakeClock, make_batch, open_log, read_all

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256, flush_ms=2**63 - 1)


def _held() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_the_cache_keeps_at_most_files_max_and_closes_the_least_recently_used(tmp_path) -> None:
    files = OpenFiles(3)
    paths = [str(tmp_path / f"f{i}") for i in range(5)]
    for path in paths[:3]:
        files.fd(path, create=True)
    files.fd(paths[0])  # used again: now the most recent
    files.fd(paths[3], create=True)
    files.fd(paths[4], create=True)
    assert len(files) == 3
    assert paths[0] in files and paths[1] not in files and paths[2] not in files
    assert files.evictions_total == 2
    files.close_all()
    assert len(files) == 0


def test_a_written_file_is_pinned_until_a_flush_takes_it(tmp_path) -> None:
    """Closing a file written since its last fsync could lose a write-back error nobody saw:
    such a file stays open (the cache may go past its bound) until fsync or dup."""
    files = OpenFiles(2)
    written = str(tmp_path / "written")
    os.pwrite(files.fd(written, create=True), b"data", 0)
    files.mark_dirty(written)
    for i in range(4):
        files.fd(str(tmp_path / f"other{i}"), create=True)
    assert written in files and files.pinned == 1
    duplicate = files.dup(written)  # a flush took it over: its fsync runs on the duplicate
    os.fsync(duplicate)
    os.close(duplicate)
    assert files.pinned == 0
    files.fd(str(tmp_path / "more"), create=True)
    files.fd(str(tmp_path / "more2"), create=True)
    assert written not in files
    files.close_all()


def test_many_logs_share_a_small_cache_and_stay_whole(tmp_path) -> None:
    """Forty logs of several segments each (three files a segment) through a cache of 12:
    appends, flushes, reads and a reopen all work, and the process never holds more than the
    cache's bound beyond what it held before."""
    files = OpenFiles(12)
    before = _held()
    logs = [open_log(tmp_path / f"t-{i}", CONFIG, files=files) for i in range(40)]
    for round_ in range(6):
        for i, each in enumerate(logs):
            each.append_as_leader(make_batch(5, value_bytes=200, tag=round_ * 100 + i), 0)
        for each in logs:
            each.flush()
        assert _held() - before <= 12
    assert all(len(each.segments) > 1 for each in logs)
    contents = [read_all(each) for each in logs]
    assert _held() - before <= 12
    for each in logs:
        each.close()
    files.close_all()
    again = OpenFiles(12)
    reopened = [open_log(tmp_path / f"t-{i}", CONFIG, files=again, clean_shutdown=True)
                for i in range(40)]
    assert [read_all(each) for each in reopened] == contents
    assert _held() - before <= 12
    again.close_all()


@contextlib.contextmanager
def _at_the_limit() -> Iterator[None]:
    """The soft limit lowered to the lowest free descriptor number, so the next open fails
    with EMFILE (the kernel refuses a descriptor numbered at or above the limit)."""
    lowest_free = os.open(os.devnull, os.O_RDONLY)
    os.close(lowest_free)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_out_of_descriptors_is_a_retriable_error_not_a_disk_failure(tmp_path: Path) -> None:
    """A read and an append that need a file opened while the process is at its limit fail
    with DescriptorsExhausted (retriable, KAFKA_STORAGE_ERROR); the data dir's health does not
    turn to failing, nothing is lost, and both work again once descriptors are free."""
    files = OpenFiles(64)
    log = open_log(tmp_path / "t-0", CONFIG, files=files)
    log.disk = DiskHealth(str(tmp_path), FakeClock())
    log.append_as_leader(make_batch(3, tag=1), 0)
    log.flush()
    expected = read_all(log)
    files.close_all()  # every file closed: the next use must open one
    with _at_the_limit():
        with pytest.raises(DescriptorsExhausted) as read_error:
            log.read(0, 1 << 20)
        with pytest.raises(DescriptorsExhausted) as append_error:
            log.append_as_leader(make_batch(1, tag=2), 0)
    assert read_error.value.retriable and read_error.value.error_code == 56
    assert "out of file descriptors" in str(append_error.value)
    assert "open-files limit" in str(append_error.value)
    assert not log.disk.failing and log.disk.failures_total == 0
    assert read_all(log) == expected
    log.append_as_leader(make_batch(1, tag=2), 0)
    log.flush()
    assert len(read_all(log)) == len(expected) + 1
    log.close()
    files.close_all()


def test_the_budget_leaves_room_for_sockets_and_reports_a_capacity() -> None:
    at_20k = budget(20_000, connections_max=4096)
    assert at_20k.files_max == at_20k.replica_capacity == 20_000 - 4096 - at_20k.reserved
    assert 10_000 < at_20k.replica_capacity < 30_000
    low = budget(1024, connections_max=4096)
    assert low.sockets == 256 and low.files_max == 1024 - 256 - low.reserved
    assert budget(10, connections_max=4096).files_max >= 16


def test_files_unused_for_a_while_are_closed_but_never_a_pinned_one(tmp_path) -> None:
    """An idle partition holds no descriptor: close_idle closes the clean files not asked for
    in the idle time, oldest first, and leaves the recent and the written-unflushed ones."""
    clock = FakeClock()
    files = OpenFiles(100, clock)
    old, written, recent = (str(tmp_path / name) for name in ("old", "written", "recent"))
    files.fd(old, create=True)
    os.pwrite(files.fd(written, create=True), b"x", 0)
    files.mark_dirty(written)
    clock.advance(20_000)
    files.fd(recent, create=True)
    clock.advance(15_000)
    assert files.close_idle(30_000) == 1
    assert old not in files and written in files and recent in files
    os.close(files.dup(written))
    clock.advance(30_000)
    assert files.close_idle(30_000) == 2 and len(files) == 0
