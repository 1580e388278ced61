"""The sparse indexes beside each segment, in Kafka's layouts (big-endian, no header):

- `.index`: entries of (relative offset int32, position int32), 8 bytes: the last offset of a batch,
  minus the segment's base offset, and the byte position of that batch in the `.log`.
- `.timeindex`: entries of (timestamp int64, relative offset int32), 12 bytes: the largest timestamp
  seen so far in the segment and the last offset of the batch that carried it.

Keys strictly increase in both. An index is full at `segment_index_bytes // entry_bytes` entries.
Entries live in memory; the file gets the new ones when the segment is flushed, rolled or closed, so
an append costs no index syscall. After a crash the indexes past the recovery point are rebuilt
from the log, and the ones before it were written and fsynced with their segment's flush.

Loading checks every entry (sizes, order, positions inside the segment); trailing zero entries are
the unused tail of a Kafka-preallocated file and are ignored. A file that fails the checks is
reported (load returns False) so that the segment rebuilds it.
"""

from __future__ import annotations

import bisect
import os
import struct

from .open_files import OpenFiles


def write_all(fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
    """pwrite all of data at position, going on after a short write (segments use it too)."""
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, position)
        view = view[written:]
        position += written


class _SparseIndex:
    """Sorted (key, value) pairs mirrored to a file; subclasses say what key and value mean."""

    entry: struct.Struct

    def __init__(self, path: str, base_offset: int, index_bytes_max: int,
                 files: OpenFiles | None = None) -> None:
        """files: the cache its descriptor comes from (open_files.py); the file is made here
        if missing, then opened on use. Not pinned there when written: an index is checked at
        every load and rebuilt from its segment when wrong."""
        self.path = path
        self.base_offset = base_offset
        self.entries_max = index_bytes_max // self.entry.size
        self._keys: list[int] = []
        self._values: list[int] = []
        self._written = 0  # entries already in the file
        self._files = files if files is not None else OpenFiles()
        self._files.fd(path, create=True)

    @property
    def _fd(self) -> int:
        return self._files.fd(self.path)

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.entries_max

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._keys, self._values, strict=True))

    def _put(self, key: int, value: int) -> None:
        assert not self._keys or key > self._keys[-1], f"{self.path}: key {key} out of order"
        self._keys.append(key)
        self._values.append(value)

    def _cut(self, count: int) -> None:
        """Keep the first count entries."""
        del self._keys[count:]
        del self._values[count:]
        if self._written > count:
            os.ftruncate(self._fd, count * self.entry.size)
            self._written = count

    def reset(self) -> None:
        """Empty the index and its file (which may hold entries this object never loaded)."""
        self._cut(0)
        os.ftruncate(self._fd, 0)
        self._written = 0

    def write_out(self) -> None:
        """Write the entries not yet in the file (no fsync)."""
        if self._written == len(self._keys):
            return
        data = b"".join(self._pack(k, v) for k, v in zip(self._keys[self._written:],
                                                         self._values[self._written:],
                                                         strict=True))
        write_all(self._fd, data, self._written * self.entry.size)  # OSError: _written as is
        self._written = len(self._keys)

    def dup_fd(self) -> int:
        return self._files.dup(self.path)

    def flush(self) -> None:
        self.write_out()
        self._files.fsync(self.path)

    def close(self) -> None:
        try:
            self.write_out()
        except OSError:  # a full disk: the file keeps fewer entries, a sparser index that
            pass         # still finds every offset (lookups scan on from an entry)
        self._files.close(self.path)

    def delete(self) -> None:
        self._files.close(self.path)
        os.unlink(self.path)

    def load(self, segment_bytes: int) -> bool:
        """Read the file; False (and an empty index) if it fails the checks."""
        size = os.fstat(self._fd).st_size
        data = os.pread(self._fd, size, 0)
        ok = size % self.entry.size == 0
        pairs = [self._unpack(data, pos) for pos in range(0, size - size % self.entry.size,
                                                          self.entry.size)]
        while pairs and pairs[-1] == self._unused_entry():
            pairs.pop()  # the zero-filled tail of a preallocated index: never a real entry
        ok = ok and self._sane(pairs, segment_bytes)
        self._keys, self._values = [], []
        if not ok:
            self._written = 0
            os.ftruncate(self._fd, 0)
            return False
        for key, value in pairs:
            self._put(key, value)
        self._written = len(pairs)
        if len(pairs) * self.entry.size != size:
            os.ftruncate(self._fd, len(pairs) * self.entry.size)
        return True

    def _sane(self, pairs: list[tuple[int, int]], segment_bytes: int) -> bool:
        raise NotImplementedError

    def _unused_entry(self) -> tuple[int, int]:
        raise NotImplementedError

    def _pack(self, key: int, value: int) -> bytes:
        raise NotImplementedError

    def _unpack(self, data: bytes, pos: int) -> tuple[int, int]:
        raise NotImplementedError


class OffsetIndex(_SparseIndex):
    """Offset -> position of the batch ending at that offset, every index_interval_bytes or so."""

    entry = struct.Struct(">ii")

    def append(self, last_offset: int, position: int) -> None:
        relative = last_offset - self.base_offset
        assert 0 <= relative < 2**31, f"{self.path}: offset {last_offset} not relative-sized"
        if not self.is_full:  # sparse: a skipped entry costs a longer scan, never a wrong answer
            self._put(last_offset, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below offset, else (base_offset, 0).
        A batch holding `offset` starts at or after the position returned."""
        index = bisect.bisect_right(self._keys, offset) - 1
        if index < 0:
            return self.base_offset, 0
        return self._keys[index], self._values[index]

    def last_entry(self) -> tuple[int, int]:
        return (self._keys[-1], self._values[-1]) if self._keys else (self.base_offset, 0)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries for offsets at or above offset."""
        self._cut(bisect.bisect_left(self._keys, offset))

    def _pack(self, key: int, value: int) -> bytes:
        return self.entry.pack(key - self.base_offset, value)

    def _unpack(self, data: bytes, pos: int) -> tuple[int, int]:
        relative, position = self.entry.unpack_from(data, pos)
        return relative + self.base_offset, position

    def _unused_entry(self) -> tuple[int, int]:
        return self.base_offset, 0

    def _sane(self, pairs: list[tuple[int, int]], segment_bytes: int) -> bool:
        last_key, last_value = self.base_offset - 1, -1
        for key, value in pairs:
            if key <= last_key or value < last_value or not 0 <= value < segment_bytes:
                return False
            last_key, last_value = key, value
        return len(pairs) <= self.entries_max


class TimeIndex(_SparseIndex):
    """Largest timestamp so far -> the last offset of the batch that carried it."""

    entry = struct.Struct(">qi")

    def maybe_append(self, timestamp_ms: int, offset: int, *, skip_full_check: bool = False
                     ) -> None:
        """Add an entry if timestamp_ms moves past the last one (Kafka's rule)."""
        if self._keys and timestamp_ms <= self._keys[-1]:
            return
        assert not self._values or offset >= self._values[-1], f"{self.path}: offset backwards"
        if skip_full_check or not self.is_full:
            self._put(timestamp_ms, offset)

    def lookup(self, timestamp_ms: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry at or below timestamp_ms, else (-1, base)."""
        index = bisect.bisect_right(self._keys, timestamp_ms) - 1
        if index < 0:
            return -1, self.base_offset
        return self._keys[index], self._values[index]

    def last_entry(self) -> tuple[int, int]:
        return (self._keys[-1], self._values[-1]) if self._keys else (-1, self.base_offset)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose offset is at or above offset."""
        self._cut(bisect.bisect_left(self._values, offset))

    def _pack(self, key: int, value: int) -> bytes:
        return self.entry.pack(key, value - self.base_offset)

    def _unpack(self, data: bytes, pos: int) -> tuple[int, int]:
        timestamp, relative = self.entry.unpack_from(data, pos)
        return timestamp, relative + self.base_offset

    def _unused_entry(self) -> tuple[int, int]:
        return 0, self.base_offset

    def _sane(self, pairs: list[tuple[int, int]], segment_bytes: int) -> bool:
        last_key, last_value = -2**63, self.base_offset
        for key, value in pairs:
            if key <= last_key or value < last_value:
                return False
            last_key, last_value = key, value
        return len(pairs) <= self.entries_max + 1  # one past full: the entry written on roll
