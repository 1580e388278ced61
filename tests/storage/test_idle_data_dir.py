"""An idle data dir costs nothing per partition per tick (issue 33): the periodic flush looks
only at logs with something to flush, and a checkpoint whose offsets did not change is not
written again (at 10,000 partitions, three files of 10,000 lines formatted, fsynced and renamed
every 5 s on the event loop, and 10,000 logs asked "flush due?" ten times a second)."""

from __future__ import annotations

import os

from epochlog.broker.storage import LogManager
from epochlog.broker.storage.checkpoints import HIGH_WATERMARK_FILE, LOG_START_OFFSET_FILE
from epochlog.broker.storage.config import LogConfig

from .helpers import FakeClock, make_batch


def manager(tmp_path, clock: FakeClock) -> LogManager:
    return LogManager.open(str(tmp_path / "data"), LogConfig(), clock, broker_id=1,
                           cluster_id="idle")


def test_only_logs_with_something_to_flush_are_looked_at(tmp_path) -> None:
    clock = FakeClock()
    logs = manager(tmp_path, clock)
    made = [logs.get_or_create("t", i) for i in range(12)]
    for each in made:  # their folders are new: one flush each, then nothing
        each.auto_flush = False
    assert set(logs.unflushed()) <= set(made)
    for each in logs.unflushed():
        each.flush()
    assert logs.unflushed() == []

    made[7].append_as_leader(make_batch(3), 0)
    assert logs.unflushed() == [made[7]]
    made[7].flush()
    assert logs.unflushed() == []
    made[9].truncate_to(0)  # nothing to cut: no change either
    logs.delete_log("t", 3)
    assert logs.unflushed() == []


def test_an_unchanged_checkpoint_is_not_written_again(tmp_path) -> None:
    clock = FakeClock()
    logs = manager(tmp_path, clock)
    first = logs.get_or_create("t", 0)
    first.append_as_leader(make_batch(2), 0)
    assert logs.write_checkpoints()
    path = os.path.join(logs.data_dir, HIGH_WATERMARK_FILE)
    inode = os.stat(path).st_ino  # each write renames a new file over the old one

    assert logs.write_checkpoints()
    assert os.stat(path).st_ino == inode

    first.update_high_watermark(2)
    assert logs.write_checkpoints()
    assert os.stat(path).st_ino != inode
    assert "t 0 2" in open(path).read()
    start = os.path.join(logs.data_dir, LOG_START_OFFSET_FILE)
    inode = os.stat(start).st_ino
    logs.get_or_create("t", 1)  # a new partition is a change of every checkpoint
    assert logs.write_checkpoints()
    assert os.stat(start).st_ino != inode


def test_logs_created_together_share_one_fsync_of_the_data_dir(tmp_path, monkeypatch) -> None:
    """A LeaderAndIsr slice creating many logs fsyncs the data dir once, not once per log (each
    log's own folder is still made durable by its first flush)."""
    from epochlog.broker.storage import log as log_module
    from epochlog.broker.storage import log_manager
    logs = manager(tmp_path, FakeClock())
    synced: list[str] = []
    real = log_manager.fsync_dir

    def counting(path: str) -> None:
        synced.append(os.path.basename(path))
        real(path)

    monkeypatch.setattr(log_manager, "fsync_dir", counting)
    monkeypatch.setattr(log_module, "fsync_dir", counting)
    with logs.creating_logs():
        made = [logs.get_or_create("t", i) for i in range(10)]
        assert synced == []
    assert synced == ["data"]
    logs.get_or_create("u", 0)  # alone: its own fsync of the data dir, as before
    assert synced == ["data", "data"]
    assert all(each.has_unflushed for each in made)  # their folders: the next flush's
