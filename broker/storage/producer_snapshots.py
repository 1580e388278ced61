"""Producer state snapshots, `<offset>.snapshot` (20 digits), in Kafka's layout (version 1).

A snapshot named N holds the producer state after every batch below offset N, so that opening
the log replays only the batches from N on instead of the whole log. Taken at each segment roll
(at the log end) and at close (a clean shutdown), as Kafka does.

Layout, big-endian: version int16 (1), crc uint32 (CRC-32C of every byte after this field), then
an array: count int32, and per entry producer id int64, producer epoch int16, last sequence int32,
last offset int64, offset delta int32 (last offset - first offset of the batch, which is also
last sequence - first sequence), timestamp int64 (the batch's max timestamp), coordinator epoch
int32, current transaction first offset int64 (-1: none).

Mapping of our ProducerEntry: Kafka writes one entry per producer, its last batch. We write one
entry per batch the producer state keeps (up to 5, oldest first, the last batch last), all with
the producer's epoch, coordinator epoch and open transaction: a Kafka reader keeps the last entry
of a producer id, which is exactly Kafka's entry, and we get back the 5-batch window in which a
retried batch is answered as a duplicate. A producer with no batch kept (only markers) is one
entry with last offset -1 and last sequence -1, as in Kafka. What the format cannot carry: the
transactions ended by markers not yet below the high watermark (Kafka's "unreplicated" ones,
which hold the last stable offset back); they are not restored, as in Kafka: the
aborted ones among them are in the .txnindex files, so read_committed consumers still drop
their records, and a committed one is committed for good (see log.py, "Producer state").

Reading checks everything: size bounded (SNAPSHOT_BYTES_MAX), version, CRC, the count against
the size, each field in range, a producer's entries consecutive, ordered and agreeing.
A snapshot that fails is deleted and the next older one tried (CorruptSnapshot).
Writing: a temporary file renamed into place; at a roll without fsync (the next flush fsyncs
it; a snapshot lost or torn by a power loss fails its CRC and is skipped), at close without one
too, the close's flush of every log then making it durable before the clean-shutdown marker
(log_manager.py). A close writes none when the newest is already at the log end (Kafka's rule)
or the log never held anything (Log.close_snapshot).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
from collections.abc import Iterable

from crc32c import crc32c

from epochlog.protocol.batch import NO_SEQUENCE

from .checkpoints import TMP_SUFFIX, fsync_dir
from .errors import StorageError
from .producer_state import BATCHES_PER_PRODUCER_MAX, BatchMetadata, ProducerEntry

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
SNAPSHOTS_KEPT_MAX = 4  # the newest; older ones (and those below the log start) are deleted
SNAPSHOT_BYTES_MAX = 256 << 20  # ~4.6 million entries; a bigger file is not one of ours
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")
ENTRY_BYTES = _ENTRY.size  # 46
_CRC_FROM = 6  # the CRC covers the bytes from the entry count on
_NAME = re.compile(r"^(\d{20})\.snapshot$")
INT16_MAX, INT32_MAX = 2**15 - 1, 2**31 - 1

log = logging.getLogger("epochlog.storage")


class CorruptSnapshot(StorageError):
    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        super().__init__(f"producer snapshot {path} is corrupt: {reason}")


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


# --- the format ---

def encode(producers: dict[int, ProducerEntry]) -> bytes:
    rows = []
    for pid in sorted(producers):
        entry = producers[pid]
        batches: Iterable[BatchMetadata | None] = entry.batches or (None,)
        for batch in batches:
            if batch is None:
                sequence, offset, delta, timestamp = NO_SEQUENCE, -1, 0, -1
            else:
                sequence, offset = batch.last_sequence, batch.last_offset
                delta, timestamp = batch.last_offset - batch.first_offset, batch.max_timestamp_ms
            rows.append(_ENTRY.pack(pid, entry.producer_epoch, sequence, offset, delta,
                                    timestamp, entry.coordinator_epoch, entry.txn_first_offset))
    body = struct.pack(">i", len(rows)) + b"".join(rows)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(body)) + body


def decode(path: str, data: bytes) -> dict[int, ProducerEntry]:
    """The producer state a snapshot's bytes hold; CorruptSnapshot(path, why) if anything is
    off."""
    if len(data) < _HEAD.size:
        raise CorruptSnapshot(path, f"{len(data)} bytes, shorter than its header")
    version, crc, count = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshot(path, f"unknown version {version}")
    if crc32c(data[_CRC_FROM:]) != crc:
        raise CorruptSnapshot(path, "CRC mismatch")
    if count < 0 or len(data) != _HEAD.size + count * ENTRY_BYTES:
        raise CorruptSnapshot(path, f"{count} entries do not fill {len(data)} bytes")
    producers: dict[int, ProducerEntry] = {}
    last_pid = -1
    for pos in range(_HEAD.size, len(data), ENTRY_BYTES):
        fields = _ENTRY.unpack_from(data, pos)
        try:
            pid, entry = _entry_of(fields)
            if pid in producers and pid != last_pid:
                raise ValueError(f"producer {pid}'s entries are not together")
            producers[pid] = _merge(producers.get(pid), entry)
        except ValueError as exc:
            raise CorruptSnapshot(path, f"entry {(pos - _HEAD.size) // ENTRY_BYTES}: {exc}") \
                from None
        last_pid = pid
    return producers


def _entry_of(fields: tuple[int, ...]) -> tuple[int, ProducerEntry]:
    pid, epoch, sequence, offset, delta, timestamp, coordinator_epoch, txn_first = fields
    if pid < 0 or not 0 <= epoch <= INT16_MAX:
        raise ValueError(f"producer id {pid} epoch {epoch}")
    if coordinator_epoch < -1 or txn_first < -1:
        raise ValueError(f"coordinator epoch {coordinator_epoch}, transaction at {txn_first}")
    if offset == -1:
        if sequence != NO_SEQUENCE or delta != 0:
            raise ValueError(f"no batch, yet sequence {sequence} and delta {delta}")
        return pid, ProducerEntry(epoch, (), txn_first, coordinator_epoch)
    if offset < 0 or not 0 <= delta <= offset or not 0 <= sequence <= INT32_MAX:
        raise ValueError(f"batch ending at offset {offset} (delta {delta}), sequence {sequence}")
    first_sequence = sequence - delta if sequence >= delta else sequence - delta + INT32_MAX + 1
    batch = BatchMetadata(first_sequence, sequence, offset - delta, offset, timestamp)
    return pid, ProducerEntry(epoch, (batch,), txn_first, coordinator_epoch)


def _merge(before: ProducerEntry | None, entry: ProducerEntry) -> ProducerEntry:
    """A producer's next entry (one more of its batches) onto the ones read before."""
    if before is None:
        return entry
    if before._replace(batches=()) != entry._replace(batches=()):
        raise ValueError("a producer's entries disagree on its epoch or transaction")
    if not before.batches or not entry.batches:
        raise ValueError("a producer with no batch has several entries")
    if entry.batches[0].first_offset <= before.batches[-1].last_offset:
        raise ValueError("a producer's batches are out of order")
    if len(before.batches) >= BATCHES_PER_PRODUCER_MAX:
        raise ValueError(f"more than {BATCHES_PER_PRODUCER_MAX} batches for one producer")
    return before._replace(batches=before.batches + entry.batches)


# --- the files of one partition folder ---

class ProducerSnapshots:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._unsynced: list[str] = []  # written without fsync since the last flush

    def path(self, offset: int) -> str:
        return os.path.join(self.directory, snapshot_file_name(offset))

    def offsets(self) -> list[int]:
        return sorted(int(m.group(1)) for m in map(_NAME.match, os.listdir(self.directory))
                      if m)

    def write(self, offset: int, producers: dict[int, ProducerEntry], *, sync: bool) -> None:
        """Snapshot the state after the batches below offset; OSError if the disk refuses it
        (nothing is left behind then). Keeps the newest SNAPSHOTS_KEPT_MAX."""
        path = self.path(offset)
        tmp = path + TMP_SUFFIX
        data = encode(producers)
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        if sync:
            fsync_dir(self.directory)
        else:
            self._unsynced.append(path)
        for old in self.offsets()[:-SNAPSHOTS_KEPT_MAX]:
            self._delete(old)

    def unsynced(self, offset: int) -> bool:
        """Whether the snapshot at offset was written without fsync, not yet flushed."""
        return self.path(offset) in self._unsynced

    def take_unsynced(self) -> list[int]:
        """Descriptors of the snapshots written without fsync, for a flush to fsync and close
        (the folder too: the caller's flush fsyncs it)."""
        fds = []
        for path in self._unsynced:
            with contextlib.suppress(FileNotFoundError):
                fds.append(os.open(path, os.O_RDONLY))
        self._unsynced.clear()
        return fds

    def load_latest(self, low: int, high: int) -> tuple[int, dict[int, ProducerEntry]] | None:
        """(offset, state) of the newest snapshot in [low, high] that reads whole; the damaged
        ones met are deleted. None if there is none."""
        for offset in reversed([o for o in self.offsets() if low <= o <= high]):
            path = self.path(offset)
            try:
                return offset, read(path)
            except CorruptSnapshot as exc:
                log.warning("%s; deleting it and trying an older one", exc)
                self._delete(offset)
            except OSError as exc:
                log.warning("%s: cannot read producer snapshot: %s", path, exc)
        return None

    def delete_outside(self, low: int, high: int) -> bool:
        """Delete the snapshots below low or above high; whether any went (the caller makes the
        folder durable before writing what a deleted one would contradict)."""
        gone = [o for o in self.offsets() if not low <= o <= high]
        for offset in gone:
            self._delete(offset)
        return bool(gone)

    def delete_all(self) -> bool:
        return self.delete_outside(0, -1)

    def _delete(self, offset: int) -> None:
        path = self.path(offset)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        if path in self._unsynced:
            self._unsynced.remove(path)


def read(path: str) -> dict[int, ProducerEntry]:
    with open(path, "rb") as f:
        data = f.read(SNAPSHOT_BYTES_MAX + 1)
    if len(data) > SNAPSHOT_BYTES_MAX:
        raise CorruptSnapshot(path, f"larger than {SNAPSHOT_BYTES_MAX} bytes")
    return decode(path, data)
