"""A real filesystem whose fsync fails on demand: a FUSE passthrough of one folder.

    with mounted(backing, mountpoint, control):    # mountpoint passes through to backing
        control.touch()                            # from now on fsync and fsyncdir answer EIO
        control.unlink()                           # and now they work again

The filesystem runs in a child process (faulty_fs_daemon.py). EIO from fsync is what a failing
disk (or a full thin pool, or a lost NFS server) gives a program: the write went to the page
cache and cannot be made durable. Reads and writes keep working, as they would until the page
cache must be written back. Needs /dev/fuse, libfuse3 (Debian's `fuse3`) and mfusepy (the test
extra), and root to mount.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from epochlog.testing import until

MOUNT_WAIT_S = 30.0


@contextmanager
def mounted(backing: Path, mountpoint: Path, control: Path) -> Iterator[None]:
    """The filesystem mounted (by a child process) for the block, then unmounted, the child
    reaped. allow_other: the Docker Engine (and a container's user) can use it too."""
    assert os.path.exists("/dev/fuse"), "no /dev/fuse: the FUSE filesystem cannot be mounted"
    backing.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    said = backing.parent / f"{backing.name}.faulty_fs.log"  # a file: a pipe could fill up
    with open(said, "wb") as out:
        fs = subprocess.Popen([sys.executable, "-m", "tests.storage.faulty_fs_daemon",
                               str(backing), str(mountpoint), str(control)],
                              stdout=out, stderr=subprocess.STDOUT)
    try:
        until(lambda: os.path.ismount(mountpoint) or fs.poll() is not None or None,
              f"the FUSE filesystem mounted on {mountpoint}", MOUNT_WAIT_S)
        assert fs.poll() is None, \
            f"faulty_fs exited: {said.read_text(errors='replace')[-2000:]}"
        yield
    finally:
        if os.path.ismount(mountpoint):
            umount = shutil.which("fusermount3") or shutil.which("fusermount")
            command = [umount, "-u", "-z", str(mountpoint)] if umount else \
                ["umount", "-l", str(mountpoint)]
            subprocess.run(command, check=False, timeout=60)
        fs.terminate()
        try:
            fs.wait(timeout=30)
        except subprocess.TimeoutExpired:
            fs.kill()
            fs.wait()
