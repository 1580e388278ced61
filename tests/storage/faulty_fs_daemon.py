"""The FUSE daemon of faulty_fs.py: a passthrough of one folder whose fsync fails on demand.

    python -m tests.storage.faulty_fs_daemon BACKING MOUNTPOINT CONTROL

mounts BACKING at MOUNTPOINT (foreground, until unmounted or signalled). Every operation is
passed through to BACKING, except that while the file CONTROL exists, fsync and fsyncdir answer
EIO. Apart from faulty_fs.py so that importing the tests needs no libfuse: mfusepy loads it when
imported, and only this process imports it.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any

import mfusepy as fuse

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


def main(argv: list[str]) -> None:
    backing, mountpoint, control = argv
    fuse.FUSE(FailingFsync(os.path.abspath(backing), os.path.abspath(control)), mountpoint,
              foreground=True, allow_other=True)


if __name__ == "__main__":
    main(sys.argv[1:])
