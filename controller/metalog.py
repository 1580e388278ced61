"""The controller's durable metadata log: an append-only file of framed msgpack records.

Layout of `<data-dir>/metadata.log`: entries of [u32 payload length][u32 CRC-32C of the payload]
[payload], big-endian, the payload being one `controller.records` record.

Rules:
- `append` writes a batch of records and fsyncs before it returns; the caller sends nothing and
  answers nothing about a decision until its records came back from `append` (persist before
  you send). When the file is created, its folder is fsynced too, so the file itself survives.
- `open` replays the file. An entry cut short, with a bad CRC, an impossible length or a payload
  that does not decode ends the log: the file is cut there with a warning. At the tail this is a
  crash mid-write, whose records were never acknowledged; in the middle it is a disk fault, and
  the warning says so (what follows is dropped rather than trusted).
- An fsync or write failure raises: the controller cannot know what is durable and must stop.
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Sequence

import crc32c
import msgspec

from . import records
from .records import Record

log = logging.getLogger("epochlog.controller")

FILE_NAME = "metadata.log"
_HEADER = struct.Struct(">II")


class MetadataLog:
    def __init__(self, path: str, fd: int, size_bytes: int, record_bytes_max: int) -> None:
        self.path = path
        self._fd = fd
        self.size_bytes = size_bytes
        self.record_bytes_max = record_bytes_max
        self.records_appended = 0

    @classmethod
    def open(cls, data_dir: str, record_bytes_max: int = 16 << 20
             ) -> tuple[MetadataLog, list[Record]]:
        """Open (creating if needed) the log in data_dir; return it and the records it holds."""
        os.makedirs(data_dir, exist_ok=True)
        path = os.path.join(data_dir, FILE_NAME)
        created = not os.path.exists(path)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        if created:
            os.fsync(fd)
            _fsync_dir(data_dir)
        with open(path, "rb") as f:
            data = f.read()
        found, good_bytes, problem = _scan(data, record_bytes_max)
        if problem is not None:
            log.warning("metadata log %s: %s at byte %d of %d; cutting the log there "
                        "(%d records kept)", path, problem, good_bytes, len(data), len(found))
            os.ftruncate(fd, good_bytes)
            os.fsync(fd)
        return cls(path, fd, good_bytes, record_bytes_max), found

    def append(self, batch: Sequence[Record]) -> None:
        """Write and fsync; raises OSError (fatal for the caller) if the disk refuses."""
        if not batch:
            return
        parts = []
        for record in batch:
            payload = records.encode(record)
            assert len(payload) <= self.record_bytes_max, f"record of {len(payload)} bytes"
            parts.append(_HEADER.pack(len(payload), crc32c.crc32c(payload)))
            parts.append(payload)
        data = b"".join(parts)
        written = os.write(self._fd, data)
        if written != len(data):  # a short write to a regular file means the disk is full
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")
        os.fsync(self._fd)
        self.size_bytes += written
        self.records_appended += len(batch)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def _scan(data: bytes, record_bytes_max: int) -> tuple[list[Record], int, str | None]:
    """Decode entries until the end or the first bad one: (records, good length, problem)."""
    found: list[Record] = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < _HEADER.size:
            return found, pos, "torn entry header"
        size, crc = _HEADER.unpack_from(data, pos)
        if size > record_bytes_max:
            return found, pos, f"entry length {size} over the limit of {record_bytes_max}"
        end = pos + _HEADER.size + size
        if end > len(data):
            return found, pos, "torn entry (shorter than its length)"
        payload = data[pos + _HEADER.size:end]
        if crc32c.crc32c(payload) != crc:
            where = "tail" if end == len(data) else "middle; later entries are dropped"
            return found, pos, f"CRC mismatch ({where})"
        try:
            found.append(records.decode(payload))
        except msgspec.DecodeError as exc:
            return found, pos, f"undecodable record: {exc}"
        pos = end
    return found, pos, None


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
