"""`TxnIndex`: a segment's aborted transactions, `<base>.txnindex`, in Kafka's layout.

Layout: entries of 34 bytes end to end, no header, big-endian: version int16 (0), producer id
int64, first offset int64 (where the transaction starts, maybe in an earlier segment), last offset
int64 (its ABORT marker's offset, in this segment), last stable offset int64 (the log's first
unstable offset once the abort was done: the earliest other transaction still open, else the
marker's offset + 1). Entries are in marker order, so their last offsets strictly increase.

Rules:
- An entry belongs to the segment holding its marker, and is added when the marker is appended,
  on the leader and on a follower alike (the log's producer state says what the marker ended).
  The file is created with the first entry (Kafka's are created lazily too).
- An append never fails: the entry is kept in memory until the file takes it (written at once,
  and again at every flush, roll or close after a failed write: a full disk). So the file plus
  the pending entries are always the segment's whole list, and a flush fsyncs it with the segment.
- In memory: only the pending entries and four numbers (count, last offset, smallest first
  offset, largest last stable offset), so that the log can skip a segment without reading it.
  Reads (`collect`) find their first entry by bisection in the file and read on in chunks.
- `load` checks every entry: size a multiple of 34 and below a bound the segment's size sets,
  version 0, producer id and offsets in range (the last inside the segment), last offsets
  increasing. A file that fails is reset and reported (the log rebuilds the entries from its
  batches). Kafka's format has no checksum: a flipped bit that leaves an entry in range cannot
  be seen, by Kafka or by us.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

from epochlog.protocol.batch import BATCH_HEADER_BYTES

from .indexes import write_all
from .open_files import OpenFiles

TXN_INDEX_SUFFIX = ".txnindex"
TXN_INDEX_VERSION = 0
ENTRY = struct.Struct(">hqqqq")
ENTRY_BYTES = ENTRY.size  # 34
READ_CHUNK_ENTRIES = 2048  # a read takes at most this many entries at a time (68 KiB)
OFFSET_MAX = 2**63 - 1


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int  # the log's first unstable offset once the abort was done


def encode(txn: AbortedTxn) -> bytes:
    return ENTRY.pack(TXN_INDEX_VERSION, *txn)


def entries_max(segment_bytes: int) -> int:
    """A marker is a whole batch: a segment of segment_bytes holds at most this many."""
    return segment_bytes // BATCH_HEADER_BYTES + 1


def check_entry(txn: AbortedTxn, version: int, base_offset: int, next_offset: int,
                previous_last: int) -> str | None:
    """Why an entry read from a segment [base_offset, next_offset) cannot be right, or None."""
    if version != TXN_INDEX_VERSION:
        return f"version {version}"
    if txn.producer_id < 0:
        return f"producer id {txn.producer_id}"
    if not base_offset <= txn.last_offset < next_offset:
        return f"marker offset {txn.last_offset} outside [{base_offset}, {next_offset})"
    if txn.last_offset <= previous_last:
        return f"marker offset {txn.last_offset} not after {previous_last}"
    if not 0 <= txn.first_offset <= txn.last_offset:
        return f"first offset {txn.first_offset} not in [0, {txn.last_offset}]"
    if not 0 <= txn.last_stable_offset <= txn.last_offset + 1:
        return f"last stable offset {txn.last_stable_offset} not in [0, {txn.last_offset + 1}]"
    return None


class TxnIndex:
    def __init__(self, path: str, base_offset: int, files: OpenFiles | None = None) -> None:
        """files: the cache its descriptor comes from (open_files.py); written entries pin it
        there until the segment's flush."""
        self.path = path
        self.base_offset = base_offset
        self._files = files if files is not None else OpenFiles()
        self._has_file = False  # the file exists and is ours (opened on use)
        self._written = 0  # entries in the file
        self._pending: list[AbortedTxn] = []  # appended, not yet taken by the file
        self._reset_stats()

    def _reset_stats(self) -> None:
        self.last_offset = -1
        self.first_offset_min = OFFSET_MAX
        self.last_stable_offset_max = -1

    def _observe(self, txn: AbortedTxn) -> None:
        self.last_offset = txn.last_offset
        self.first_offset_min = min(self.first_offset_min, txn.first_offset)
        self.last_stable_offset_max = max(self.last_stable_offset_max, txn.last_stable_offset)

    def __len__(self) -> int:
        return self._written + len(self._pending)

    # --- writing ---

    @property
    def _fd(self) -> int:
        assert self._has_file, f"{self.path}: no file"
        return self._files.fd(self.path)

    def _open(self, create: bool) -> bool:
        if not self._has_file:
            if not create and not os.path.exists(self.path):
                return False
            self._files.fd(self.path, create=True)
            self._has_file = True
        return True

    def create(self) -> None:
        """Make sure the file exists (the cleaner's files are swapped in whole, empty or not)."""
        self._open(create=True)

    def append(self, txn: AbortedTxn) -> None:
        assert txn.last_offset > self.last_offset, \
            f"{self.path}: marker offset {txn.last_offset} not after {self.last_offset}"
        assert txn.last_offset >= self.base_offset, f"{self.path}: {txn} below the segment"
        self._pending.append(txn)
        self._observe(txn)
        try:
            self.write_out()
        except OSError:  # kept in memory; written by the next flush (which reports the failure)
            pass

    def write_out(self) -> None:
        """Write the pending entries to the file (no fsync); OSError leaves them pending."""
        if not self._pending:
            return
        self._open(create=True)
        write_all(self._fd, b"".join(map(encode, self._pending)), self._written * ENTRY_BYTES)
        self._files.mark_dirty(self.path)
        self._written += len(self._pending)
        self._pending.clear()

    def dup_fd(self) -> int | None:
        """After write_out: a descriptor for the caller to fsync and close; None if no file."""
        return self._files.dup(self.path) if self._has_file else None

    def flush(self) -> None:
        self.write_out()
        if self._has_file:
            self._files.fsync(self.path)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above offset."""
        if self.last_offset < offset:
            return
        self._pending = [t for t in self._pending if t.last_offset < offset]
        if self._written and self._read_one(self._written - 1).last_offset >= offset:
            keep = self._bisect(offset)
            os.ftruncate(self._fd, keep * ENTRY_BYTES)
            self._written = keep
        self._reset_stats()
        for txn in self.entries():
            self._observe(txn)

    def reset(self) -> None:
        self._pending.clear()
        if self._has_file:
            os.ftruncate(self._fd, 0)
        self._written = 0
        self._reset_stats()

    # --- reading ---

    def _read_one(self, index: int) -> AbortedTxn:
        data = os.pread(self._fd, ENTRY_BYTES, index * ENTRY_BYTES)
        if len(data) != ENTRY_BYTES:
            raise OSError(f"{self.path}: entry {index} cut short")
        return AbortedTxn(*ENTRY.unpack(data)[1:])

    def _bisect(self, offset: int) -> int:
        """The first entry in the file whose marker is at or above offset."""
        lo, hi = 0, self._written
        while lo < hi:
            mid = (lo + hi) // 2
            if self._read_one(mid).last_offset < offset:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _raw_entries(self, first: int) -> Iterator[tuple[int, AbortedTxn]]:
        """(version, entry) of the file's entries from index first, read in chunks."""
        index = first
        while index < self._written:
            count = min(READ_CHUNK_ENTRIES, self._written - index)
            data = os.pread(self._fd, count * ENTRY_BYTES, index * ENTRY_BYTES)
            if len(data) != count * ENTRY_BYTES:
                raise OSError(f"{self.path}: shorter than its {self._written} entries")
            for pos in range(0, len(data), ENTRY_BYTES):
                version, *fields = ENTRY.unpack_from(data, pos)
                yield version, AbortedTxn(*fields)
            index += count

    def _file_entries(self, first: int) -> Iterator[AbortedTxn]:
        return (txn for _, txn in self._raw_entries(first))

    def entries(self, from_offset: int = -1) -> Iterator[AbortedTxn]:
        """The entries whose marker is at or above from_offset, in order."""
        if self._written:
            yield from self._file_entries(self._bisect(from_offset) if from_offset >= 0 else 0)
        yield from (t for t in self._pending if t.last_offset >= from_offset)

    def collect(self, start: int, end: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions holding offsets in [start, end), and whether the search is
        complete: an entry whose last stable offset is at or past end says that every
        transaction starting below end had ended by then, so no later marker can add one
        (Kafka's rule, TransactionIndex.collectAbortedTxns)."""
        found = []
        for txn in self.entries(start):
            if txn.first_offset < end:
                found.append(txn)
            if txn.last_stable_offset >= end:
                return found, True
        return found, False

    # --- opening ---

    def load(self, next_offset: int, segment_bytes: int, *, cut_beyond: bool) -> str | None:
        """Read and check the file of a segment holding [base, next_offset); None if it is
        sound (or absent), else why not, the file then emptied. With cut_beyond (a segment
        whose tail recovery may have cut), entries at or past next_offset are dropped instead
        of being damage."""
        if not self._open(create=False):
            return None
        size = os.fstat(self._fd).st_size
        self._written = 0
        self._pending.clear()
        self._reset_stats()
        problem = None
        if size % ENTRY_BYTES:
            problem = f"{size} bytes is not a whole number of {ENTRY_BYTES}-byte entries"
        elif size // ENTRY_BYTES > entries_max(segment_bytes):
            problem = f"{size // ENTRY_BYTES} entries, more than a segment of {segment_bytes} " \
                      "bytes can hold markers"
        else:
            problem = self._check_all(size // ENTRY_BYTES, next_offset, cut_beyond)
        if problem is not None:
            self.reset()
            return f"{self.path}: {problem}"
        return None

    def _check_all(self, count: int, next_offset: int, cut_beyond: bool) -> str | None:
        self._written = count
        bound = OFFSET_MAX if cut_beyond else next_offset
        kept = 0
        for index, (version, txn) in enumerate(self._raw_entries(0)):
            problem = check_entry(txn, version, self.base_offset, bound, self.last_offset)
            if problem is not None:
                self._written = 0
                return f"entry {index}: {problem}"
            if txn.last_offset >= next_offset:
                break  # cut_beyond: this one and the rest go
            self._observe(txn)
            kept = index + 1
        if kept != count:
            os.ftruncate(self._fd, kept * ENTRY_BYTES)
        self._written = kept
        return None

    # --- lifetime ---

    def close(self) -> None:
        if self._has_file:
            try:
                self.write_out()
            except OSError:  # a full disk: the next open replays these markers (see log.py)
                pass
            self._files.close(self.path)
            self._has_file = False

    def delete(self) -> None:
        self._files.close(self.path)
        self._has_file = False
        self._pending.clear()
        if os.path.exists(self.path):
            os.unlink(self.path)
