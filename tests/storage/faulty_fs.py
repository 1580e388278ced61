"""A real filesystem whose fsync fails on demand: a FUSE passthrough of one folder.

    python -m tests.storage.faulty_fs BACKING MOUNTPOINT CONTROL

mounts BACKING at MOUNTPOINT (foreground, until unmounted or signalled). Every operation is
passed through to BACKING, except that while the file CONTROL exists, fsync and fsyncdir answer
EIO, which is what a failing disk (or a full thin pool, or a lost NFS server) gives a program: the
write went to the page cache and cannot be made durable. Reads and writes keep working, as they
would until the page cache must be written back. Needs /dev/fuse, libfuse3 (Debian's `fuse3`)
and mfusepy (the test extra), and root to mount.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import mfusepy as fuse

from epochlog.testing import until

MOUNT_WAIT_S = 30.0

STAT_FIELDS = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size",
               "st_uid")
STATVFS_FIELDS = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree",
                  "f_files", "f_flag", "f_frsize", "f_namemax")


class FailingFsync(fuse.Operations):  # type: ignore[misc]
    use_ns = True

    def __init__(self, backing: str, control: str) -> None:
        self.backing = backing
        self.control = control

    def _path(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _failing(self) -> bool:
        return os.path.exists(self.control)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        st = os.lstat(self._path(path))
        attrs: dict[str, Any] = {k: getattr(st, k) for k in STAT_FIELDS}
        for k in ("st_atime", "st_ctime", "st_mtime"):
            attrs[k] = getattr(st, k + "_ns")
        return attrs

    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *os.listdir(self._path(path))]

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._path(path), mode)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._path(path))

    def unlink(self, path: str) -> None:
        os.unlink(self._path(path))

    def rename(self, old: str, new: str) -> None:
        os.rename(self._path(old), self._path(new))

    def open(self, path: str, flags: int) -> int:
        return os.open(self._path(path), flags)

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        return os.open(self._path(path), os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        return os.pwrite(fh, data, offset)

    def truncate(self, path: str, length: int, fh: int | None = None) -> None:
        if fh is None:
            os.truncate(self._path(path), length)
        else:
            os.ftruncate(fh, length)

    def flush(self, path: str, fh: int) -> None:
        return None

    def release(self, path: str, fh: int) -> None:
        os.close(fh)

    def fsync(self, path: str, datasync: int, fh: int) -> None:
        if self._failing():
            raise fuse.FuseOSError(errno.EIO)
        os.fsync(fh)

    def opendir(self, path: str) -> int:
        return 0

    def releasedir(self, path: str, fh: int) -> None:
        return None

    def fsyncdir(self, path: str, datasync: int, fh: int) -> None:
        if self._failing():
            raise fuse.FuseOSError(errno.EIO)

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self._path(path))
        return {k: getattr(st, k) for k in STATVFS_FIELDS}

    def chmod(self, path: str, mode: int) -> None:
        os.chmod(self._path(path), mode)

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._path(path), uid, gid)

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> None:
        os.utime(self._path(path), ns=times)


@contextmanager
def mounted(backing: Path, mountpoint: Path, control: Path) -> Iterator[None]:
    """The filesystem mounted (by a child process) for the block, then unmounted, the child
    reaped. allow_other: the Docker Engine (and a container's user) can use it too."""
    assert os.path.exists("/dev/fuse"), "no /dev/fuse: the FUSE filesystem cannot be mounted"
    backing.mkdir(parents=True, exist_ok=True)
    mountpoint.mkdir(parents=True, exist_ok=True)
    fs = subprocess.Popen([sys.executable, "-m", "tests.storage.faulty_fs", str(backing),
                           str(mountpoint), str(control)], stderr=subprocess.PIPE)
    try:
        until(lambda: os.path.ismount(mountpoint) or fs.poll() is not None or None,
              f"the FUSE filesystem mounted on {mountpoint}", MOUNT_WAIT_S)
        assert fs.poll() is None, f"faulty_fs exited: {fs.stderr.read().decode()[-2000:]}" \
            if fs.stderr else "faulty_fs exited"
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


def main(argv: list[str]) -> None:
    backing, mountpoint, control = argv
    fuse.FUSE(FailingFsync(os.path.abspath(backing), os.path.abspath(control)), mountpoint,
              foreground=True, allow_other=True)


if __name__ == "__main__":
    main(sys.argv[1:])
