"""The leader epoch cache (KIP-101): which leader epoch began at which offset, for one partition.

Entries (epoch, start_offset) have strictly increasing epochs and non-decreasing start offsets.
Kafka's rules, which followers and consumers depend on to find where logs diverge:

- assign(epoch, start_offset) refuses negatives; does nothing when the epoch is the latest one and
  the start offset does not move back; otherwise drops every trailing entry whose epoch or start
  offset is at or above the new one's, then appends it.
- end_offset_for(epoch, log_end_offset): the latest epoch answers the log end offset; otherwise the
  largest epoch at or below the one asked for, with the start offset of the next higher epoch; below
  every epoch, the asked epoch with the first entry's start offset; undefined (-1, -1) for epoch -1,
  an empty cache, or an epoch above the latest.
- truncate_from_end(end_offset) drops entries starting at or after end_offset;
  truncate_from_start(start_offset) drops entries starting at or before it but keeps the last of
  them, moved up to start_offset, so the offsets there keep an epoch.

Every change is written to `leader-epoch-checkpoint` atomically (temp file, fsync, rename, fsync
the folder) before the call returns.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import os
from typing import NamedTuple

from .checkpoints import format_checkpoint, parse_int, read_checkpoint, write_atomically
from .errors import CorruptCheckpoint

LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
EPOCH_MAX = 2**31 - 1

log = logging.getLogger("epochlog.storage")


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


def _parse_entry(fields: list[str]) -> EpochEntry:
    if len(fields) != 2:
        raise ValueError("expected 'epoch start_offset'")
    return EpochEntry(parse_int(fields[0], 0, EPOCH_MAX), parse_int(fields[1], 0))


def read_epoch_checkpoint(path: str) -> list[EpochEntry]:
    """Entries of a leader-epoch-checkpoint; CorruptCheckpoint if malformed or out of order."""
    entries = read_checkpoint(path, _parse_entry)
    for before, after in itertools.pairwise(entries):
        if after.epoch <= before.epoch or after.start_offset < before.start_offset:
            raise CorruptCheckpoint(path, f"entries out of order: {before} then {after}")
    return entries


def format_epoch_checkpoint(entries: list[EpochEntry]) -> bytes:
    return format_checkpoint(f"{e.epoch} {e.start_offset}" for e in entries)


class LeaderEpochCache:
    """The cache of one partition; `path` None keeps it in memory only (simulation, tests)."""

    def __init__(self, path: str | None, entries: list[EpochEntry] | None = None) -> None:
        self.path = path
        self._entries: list[EpochEntry] = list(entries or [])

    @classmethod
    def load(cls, path: str) -> LeaderEpochCache:
        """The cache stored at path (empty if there is none); CorruptCheckpoint if malformed."""
        if not os.path.exists(path):
            return cls(path)
        return cls(path, read_epoch_checkpoint(path))

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that epoch begins at start_offset; True if the cache changed."""
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry: epoch {epoch}, "
                             f"start offset {start_offset}")
        if self._entries:
            latest = self._entries[-1]
            if latest.epoch == epoch and start_offset >= latest.start_offset:
                return False
        entries = list(self._entries)
        removed = []
        while entries and (entries[-1].epoch >= epoch or entries[-1].start_offset >= start_offset):
            removed.append(entries.pop())
        entries.append(EpochEntry(epoch, start_offset))
        self._write(entries)  # first: a write that fails (OSError) leaves the cache as it was
        self._entries = entries
        if removed:
            log.info("epoch cache %s: assign (%d, %d) removed %s", self.path, epoch,
                     start_offset, removed[::-1])
        return True

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) as OffsetForLeaderEpoch answers it; (-1, -1) if undefined."""
        if epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if epoch == self._entries[-1].epoch:
            return epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect.bisect_right(epochs, epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if higher == 0:
            return epoch, self._entries[0].start_offset
        return self._entries[higher - 1].epoch, self._entries[higher].start_offset

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch whose range holds offset; -1 if none does."""
        offsets = [e.start_offset for e in self._entries]
        index = bisect.bisect_right(offsets, offset) - 1
        return self._entries[index].epoch if index >= 0 else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop the entries that start at or after end_offset (the log was cut there)."""
        if end_offset < 0 or not self._entries or self._entries[-1].start_offset < end_offset:
            return
        removed = []
        while self._entries and self._entries[-1].start_offset >= end_offset:
            removed.append(self._entries.pop())
        log.info("epoch cache %s: truncated from end offset %d, removed %s", self.path,
                 end_offset, removed[::-1])
        self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries before start_offset, keeping the last of them moved up to start_offset."""
        if not self._entries or self._entries[0].start_offset >= start_offset:
            return
        last_removed = None
        while self._entries and self._entries[0].start_offset <= start_offset:
            last_removed = self._entries.pop(0)
        assert last_removed is not None
        self._entries.insert(0, EpochEntry(last_removed.epoch, start_offset))
        log.info("epoch cache %s: truncated from start offset %d", self.path, start_offset)
        self._write()

    def clear(self) -> None:
        if self._entries:
            self._entries.clear()
            self._write()

    def _write(self, entries: list[EpochEntry] | None = None) -> None:
        if self.path is not None:
            write_atomically(self.path, format_epoch_checkpoint(
                self._entries if entries is None else entries))
