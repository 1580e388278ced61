"""Whether the data dir can make a write durable: the check a broker makes before it opens logs.

A failed fsync of log data stops the broker (broker/replicas.py, FsyncFailed), as Kafka halts on
a failed log dir that is its only one: what was written may have left the page cache without
reaching the disk, and only recovery at the next start can tell. But a supervisor that restarts
the process (compose's `restart: unless-stopped`, systemd's `Restart=always`) would start it on
the same failing disk, where the next flush fails again: a restart loop. So before anything is
opened, `durable_write_error` writes a small file, fsyncs it and the folder, and removes it; the
broker (app.py) waits while that fails, staying up without serving, and starts once it succeeds.
"""

from __future__ import annotations

import contextlib
import os

from .checkpoints import fsync_dir

PROBE_FILE = ".durability-probe"


def durable_write_error(data_dir: str) -> OSError | None:
    """None if a write in data_dir was made durable (file and folder fsynced), else why not.
    The probe file is removed either way where it can be."""
    path = os.path.join(data_dir, PROBE_FILE)
    try:
        os.makedirs(data_dir, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, b"epochlog durability probe\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        fsync_dir(data_dir)
    except OSError as exc:
        return exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return None
