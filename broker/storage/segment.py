"""One segment of a partition log: `<base>.log` holding whole RecordBatch v2 batches end to end, and
its `<base>.index` and `<base>.timeindex` (see indexes.py), and `<base>.txnindex`, the aborted
transactions whose markers it holds (txn_index.py); `<base>` is the 20-digit base offset.

Rules:
- Batches are written whole and in offset order; every batch's offsets fit in int32 relative to the
  base offset (the log rolls before they would not).
- Reads return whole batches only, each CRC-checked first: stored bytes that fail their checks raise
  CorruptLog and are never served.
- Offsets are contiguous: the first batch starts at the base offset and each batch at the previous
  one's next offset, so a gap can only be damage (base_offset lies outside the CRC, and this is how
  a flipped offset is caught). Except where `offset_gaps_allowed` (set by the Log of a compacted
  partition, cleaner.py): there batches only have to start at or after the previous one's next
  offset, as compaction removes whole batches.
- `recover()` trusts nothing: it scans every batch from the start (structure, CRC, contiguous
  offsets), cuts the file at the first bad or torn batch and rebuilds both indexes.
- `load()` is the clean-shutdown path: it trusts the log up to its size, checks the index files and
  scans only the batches after the last index entry (falling back to recover() if anything is off).
- `flush()` writes the pending index entries and fsyncs the files.
- The .txnindex is checked at load and recover (txn_index.py); a bad one is emptied and reported
  in `txn_index_problem`, for the log to rebuild its entries from the batches. Recovery, which may
  cut the tail, drops the entries past it; truncation drops those at or past the cut.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

from epochlog.protocol.batch import (
    BATCH_HEADER_BYTES,
    BatchHeader,
    CorruptBatch,
    crc_of,
    read_header,
)

from .config import LogConfig
from .errors import CorruptLog
from .indexes import OffsetIndex, TimeIndex, write_all
from .open_files import OpenFiles
from .txn_index import TXN_INDEX_SUFFIX, TxnIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
RECOVERY_CHUNK_BYTES_MAX = 8 << 20  # recovery reads this much at a time (more for a bigger batch)
RELATIVE_OFFSET_MAX = 2**31 - 1
NO_TIMESTAMP = -1

log = logging.getLogger("epochlog.storage")


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class Segment:
    def __init__(self, directory: str, base_offset: int, config: LogConfig, now_ms: int,
                 file_suffix: str = "", files: OpenFiles | None = None) -> None:
        """file_suffix: added to the three file names (the cleaner writes `.cleaned` ones).
        files: the cache its descriptors come from (open_files.py); None: one of its own.
        The files are made here if missing, then opened on use."""
        self.base_offset = base_offset
        self.config = config
        self._files = files if files is not None else OpenFiles()
        self.log_path = os.path.join(directory,
                                     segment_file_name(base_offset, LOG_SUFFIX) + file_suffix)
        self._files.fd(self.log_path, create=True)
        self.offset_index = OffsetIndex(
            os.path.join(directory, segment_file_name(base_offset, INDEX_SUFFIX) + file_suffix),
            base_offset, config.segment_index_bytes, self._files)
        self.time_index = TimeIndex(
            os.path.join(directory,
                         segment_file_name(base_offset, TIME_INDEX_SUFFIX) + file_suffix),
            base_offset, config.segment_index_bytes, self._files)
        self.txn_index = TxnIndex(
            os.path.join(directory,
                         segment_file_name(base_offset, TXN_INDEX_SUFFIX) + file_suffix),
            base_offset, self._files)
        self.txn_index_problem: str | None = None  # why load or recover emptied the .txnindex
        self.created_ms = now_ms
        self.dirty = False  # written since the last fsync
        self.offset_gaps_allowed = False  # see the module notes
        self._reset_stats()

    def _reset_stats(self) -> None:
        self.size_bytes = 0
        self.next_offset = self.base_offset
        self.max_timestamp_ms = NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.first_batch_timestamp_ms: int | None = None
        self._bytes_since_index_entry = 0

    def __repr__(self) -> str:
        return f"Segment({self.log_path}, size {self.size_bytes}, next {self.next_offset})"

    @property
    def _fd(self) -> int:
        """The .log's descriptor, from the cache: valid until the cache's next call, so it is
        asked for at each use (open_files.py)."""
        return self._files.fd(self.log_path)

    def dup_for_reading(self) -> int:
        """A descriptor of the .log of the caller's own (the cleaner reads on its thread)."""
        return os.dup(self._fd)

    # --- writing ---

    def append(self, buf: bytes | bytearray | memoryview,
               headers: list[tuple[int, BatchHeader]]) -> None:
        """Write whole batches (headers: their positions inside buf) at the end of the file.
        A write that fails (OSError: a full disk) is cut off again: the file and this object are
        as before, and the error propagates."""
        position = self.size_bytes
        assert not headers or headers[0][1].base_offset >= self.next_offset, \
            f"{self.log_path}: offsets go back"
        try:
            write_all(self._fd, buf, position)
        except OSError:
            if self.log_path in self._files:  # the write began: cut it off
                os.ftruncate(self._fd, position)  # shrinking needs no space
            raise
        self._files.mark_dirty(self.log_path)
        for pos, header in headers:
            self._track(header, position + pos)
        self.size_bytes += len(buf)
        self.dirty = True

    def _observe(self, header: BatchHeader) -> None:
        if header.max_timestamp > self.max_timestamp_ms:
            self.max_timestamp_ms = header.max_timestamp
            self.offset_of_max_timestamp = header.last_offset
        if self.first_batch_timestamp_ms is None:
            self.first_batch_timestamp_ms = header.max_timestamp
        self.next_offset = header.next_offset

    def _track(self, header: BatchHeader, position: int) -> None:
        self._observe(header)
        if self._bytes_since_index_entry > self.config.index_interval_bytes:
            self.offset_index.append(header.last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_ms, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += header.size

    def can_hold_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= RELATIVE_OFFSET_MAX

    def indexes_full(self) -> bool:
        return self.offset_index.is_full or self.time_index.is_full

    def rolling_age_ms(self, now_ms: int) -> int:
        """How long this segment has been open, as Kafka counts it for segment.ms."""
        first = self.first_batch_timestamp_ms
        since = first if first is not None and first >= 0 else self.created_ms
        return now_ms - since

    def on_roll(self) -> None:
        """No longer the active segment: add the final time index entry, write the indexes out."""
        if self.max_timestamp_ms >= 0:
            self.time_index.maybe_append(self.max_timestamp_ms, self.offset_of_max_timestamp,
                                         skip_full_check=True)
        self.offset_index.write_out()
        self.time_index.write_out()

    def begin_flush(self) -> list[int]:
        """Write the pending index entries; duplicated descriptors of the three files for the
        caller to fsync (and close) on any thread."""
        self.offset_index.write_out()
        self.time_index.write_out()
        self.txn_index.write_out()
        fds: list[int] = []
        try:
            for duplicate in (lambda: self._files.dup(self.log_path), self.offset_index.dup_fd,
                              self.time_index.dup_fd, self.txn_index.dup_fd):
                fd = duplicate()
                if fd is not None:
                    fds.append(fd)
        except OSError:  # out of descriptors: the segment stays dirty for the next flush
            for fd in fds:
                os.close(fd)
            self._files.mark_dirty(self.log_path)
            raise
        self.dirty = False
        return fds

    def flush(self) -> None:
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()
        self._files.fsync(self.log_path)
        self.dirty = False

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is at or above offset; bytes removed.
        A batch holding offset goes whole, so the segment ends at a batch boundary. Where the
        headers stop parsing at or before that batch (the cut that removes damage), the
        segment ends where the whole, intact batches before the damage end, which may be below
        offset (see _end_of_whole_batches)."""
        end_offset = offset
        try:
            found = self.find(offset)
            position = found[0] if found is not None else None
        except CorruptLog:
            position, end_offset = self._end_of_whole_batches(offset)
        if position is None:
            return 0
        removed = self.size_bytes - position
        os.ftruncate(self._fd, position)
        self.offset_index.truncate_to(end_offset)
        self.time_index.truncate_to(end_offset)
        self.txn_index.truncate_to(end_offset)
        self._rescan_after_last_index_entry(position)
        self._files.fsync(self.log_path)  # durable before new batches land on the same bytes
        return removed

    def _end_of_whole_batches(self, offset: int) -> tuple[int, int]:
        """(position, offset) where the intact batches before offset end, scanning from the
        segment's start: where the batch holding offset starts, or, if a header at or before it
        does not parse or is out of sequence, where the batches before it end. The batch just
        before such a header is checked whole (its CRC): a damaged length field still parses,
        and points the next header into the wrong bytes, so that batch is the damage."""
        end, expected = 0, self.base_offset
        last: tuple[int, BatchHeader] | None = None
        try:
            for pos, header in self.headers(0):
                if header.last_offset >= offset:
                    return pos, header.base_offset
                if not self._follows(header, expected):
                    break
                last, end, expected = (pos, header), pos + header.size, header.next_offset
        except CorruptLog:
            pass
        if last is not None and not self._intact(*last):
            return last[0], last[1].base_offset
        return end, expected

    def _intact(self, position: int, header: BatchHeader) -> bool:
        return crc_of(self.read_batch(position, header), 0, header.size) == header.crc

    # --- reading ---

    def header_at(self, position: int) -> BatchHeader:
        data = os.pread(self._files.fd(self.log_path), BATCH_HEADER_BYTES, position)  # hot
        try:
            header = read_header(data)
        except CorruptBatch as e:
            raise CorruptLog(f"{self.log_path} at position {position}: {e}") from None
        if position + header.size > self.size_bytes:
            raise CorruptLog(f"{self.log_path} at position {position}: batch of {header.size} "
                             f"bytes runs past the segment end {self.size_bytes}")
        return header

    def headers(self, position: int = 0, first_offset: int | None = None
                ) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of each batch from position (a batch boundary, where the batch
        holding first_offset, or the segment's first, starts) to the end. A header that does
        not parse raises CorruptLog whose cut_offset is where the batches read so far end."""
        cut = self.base_offset if first_offset is None else first_offset
        while position < self.size_bytes:
            try:
                header = self.header_at(position)
            except CorruptLog as exc:
                raise CorruptLog(str(exc), cut_offset=cut) from None
            yield position, header
            position += header.size
            cut = header.next_offset

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """Position and header of the first batch whose last offset is at or above offset.
        The batches walked must follow each other: the one the index names ends at the
        entry's offset (or the segment's first starts at its base offset), each next one starts
        where the one before ended (or later, where offset gaps are allowed). A header out of
        sequence (a damaged base offset: it lies outside the CRC) raises CorruptLog, so that no
        batch is ever served, or skipped, as if it held other offsets."""
        entry, position = self.offset_index.lookup(offset)
        assert position <= self.size_bytes, f"{self.log_path}: index points past the segment"
        expected = self.base_offset if position == 0 else None
        for pos, header in self.headers(position, entry):
            if expected is None and header.last_offset != entry:
                raise CorruptLog(f"{self.log_path} at position {pos}: a batch ending at offset "
                                 f"{header.last_offset} where the index says {entry}",
                                 cut_offset=entry)
            if expected is not None and not self._follows(header, expected):
                raise CorruptLog(f"{self.log_path} at position {pos}: a batch at offset "
                                 f"{header.base_offset} where {expected} was expected",
                                 cut_offset=expected)
            if header.last_offset >= offset:
                return pos, header
            expected = header.next_offset
        return None

    def read(self, offset: int, bytes_max: int, offset_max: int | None = None) -> bytes:
        """Whole batches from the one holding offset: as many as fit in bytes_max, but at least
        one; none that start at or after offset_max. Each batch is CRC-checked: the intact
        batches before a bad one are returned, and a read that starts at a bad batch raises
        CorruptLog naming the file, position and offset (never a corrupt byte served). A bad
        batch that only an index entry pointing inside a batch made (the log is whole) is not
        the log's damage: the indexes are rebuilt and the read done again."""
        try:
            return self._read(offset, bytes_max, offset_max)
        except CorruptLog:
            if not self._index_misleads(offset):
                raise
        self.rebuild_indexes()
        return self._read(offset, bytes_max, offset_max)

    def _index_misleads(self, offset: int) -> bool:
        """Whether the offset index's entry for offset names a position where no batch with
        that last offset starts, the batches from the segment's start being whole up to there.
        False when the index was not used (position 0) or the batches themselves do not parse:
        then the damage is the log's."""
        entry, position = self.offset_index.lookup(offset)
        if position == 0:
            return False
        expected = self.base_offset
        try:
            for pos, header in self.headers(0):
                if not self._follows(header, expected):
                    return False  # a batch out of sequence: the log's damage
                if pos >= position:
                    return pos != position or header.last_offset != entry
                expected = header.next_offset
        except CorruptLog:
            return False
        return True  # past the last batch

    def rebuild_indexes(self) -> None:
        """Both indexes again from the batches' headers, the file untouched (an index found
        pointing where no batch starts; the log was checked whole up to there)."""
        log.warning("%s: its offset index points where no batch starts; rebuilding both "
                    "indexes from the batches", self.log_path)
        stats = (self.size_bytes, self.next_offset, self.max_timestamp_ms,
                 self.offset_of_max_timestamp, self.first_batch_timestamp_ms)
        found, whole = self._batches_in_sequence()
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_stats()
        for pos, header in found:
            self._track(header, pos)
        (self.size_bytes, self.next_offset, self.max_timestamp_ms, self.offset_of_max_timestamp,
         self.first_batch_timestamp_ms) = stats
        if not whole:  # the entries end before the damage, which the next read meets again
            log.warning("%s: only its first %d batches parse and follow each other; the "
                        "indexes go no further", self.log_path, len(found))
        self.dirty = True
        try:  # now: a log flushes only the segments from its recovery point on
            self.offset_index.write_out()
            self.time_index.write_out()
        except OSError as exc:  # the entries held here serve reads; the next open rescans
            log.warning("%s: writing the rebuilt indexes failed: %s", self.log_path, exc)

    def _batches_in_sequence(self) -> tuple[list[tuple[int, BatchHeader]], bool]:
        """(position, header) of the batches from the segment's start while their headers
        parse and each follows the one before; and whether that reached the segment's end."""
        found: list[tuple[int, BatchHeader]] = []
        expected = self.base_offset
        try:
            for pos, header in self.headers(0):
                if not self._follows(header, expected):
                    return found, False
                found.append((pos, header))
                expected = header.next_offset
        except CorruptLog:
            return found, False
        return found, True

    def _read(self, offset: int, bytes_max: int, offset_max: int | None) -> bytes:
        found = self.find(offset)
        if found is None:
            return b""
        position, first = found
        if offset_max is not None and first.base_offset >= offset_max:
            return b""
        want = min(max(bytes_max, first.size), self.size_bytes - position)
        chunk = os.pread(self._fd, want, position)
        end, next_offset = 0, first.base_offset
        try:
            for pos, header in _whole_batches(chunk):
                if offset_max is not None and header.base_offset >= offset_max:
                    break
                if crc_of(chunk, pos, header.size) != header.crc:
                    raise CorruptBatch(f"CRC mismatch in batch at offset {header.base_offset}")
                if not self._offset_fits(header.base_offset, next_offset):  # outside the CRC
                    raise CorruptBatch(f"batch at offset {header.base_offset} where "
                                       f"{next_offset} was expected")
                next_offset = header.next_offset
                end = pos + header.size
        except CorruptBatch as e:
            if end == 0:
                raise CorruptLog(f"{self.log_path} at position {position} (offset "
                                 f"{next_offset}): {e}", cut_offset=next_offset) from None
        return chunk if end == len(chunk) else chunk[:end]

    def find_by_timestamp(self, timestamp_ms: int, offset_min: int
                          ) -> tuple[int, BatchHeader] | None:
        """The first batch at or after offset_min whose max timestamp reaches timestamp_ms
        (an offset index that misleads rebuilt, as for read)."""
        _, offset = self.time_index.lookup(timestamp_ms)
        try:
            return self._find_by_timestamp(timestamp_ms, max(offset, offset_min), offset_min)
        except CorruptLog:
            if not self._index_misleads(max(offset, offset_min)):
                raise
        self.rebuild_indexes()
        _, offset = self.time_index.lookup(timestamp_ms)
        return self._find_by_timestamp(timestamp_ms, max(offset, offset_min), offset_min)

    def _find_by_timestamp(self, timestamp_ms: int, start: int, offset_min: int
                           ) -> tuple[int, BatchHeader] | None:
        entry, position = self.offset_index.lookup(start)
        for pos, header in self.headers(position, entry):
            if header.last_offset >= offset_min and header.max_timestamp >= timestamp_ms:
                return pos, header
        return None

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        return os.pread(self._fd, header.size, position)

    # --- opening ---

    def load(self) -> int:
        """Open after a clean shutdown: check the indexes, scan the tail. Bytes cut (0 unless
        the checks failed and recover() had to run)."""
        self.size_bytes = os.fstat(self._fd).st_size
        if not (self.offset_index.load(self.size_bytes) and self.time_index.load(self.size_bytes)):
            log.warning("%s: index files failed their checks; rebuilding", self.log_path)
            return self.recover()
        try:
            self._rescan_after_last_index_entry(self.size_bytes)
        except CorruptLog as e:
            log.warning("%s: %s; recovering the segment", self.log_path, e)
            return self.recover()
        self._load_txn_index(cut_beyond=False)
        return 0

    def _load_txn_index(self, *, cut_beyond: bool) -> None:
        self.txn_index_problem = self.txn_index.load(self.next_offset, self.size_bytes,
                                                     cut_beyond=cut_beyond)
        if self.txn_index_problem is not None:
            log.warning("%s; its entries are rebuilt from the batches",
                        self.txn_index_problem)

    def _rescan_after_last_index_entry(self, size_bytes: int) -> None:
        """Set the statistics from the indexes plus a scan of the batches they do not cover.
        The indexes' last entries must agree with the batches (a damaged key in order and in
        range passes the index's own checks, then fails every later append): CorruptLog."""
        index_offset, position = self.offset_index.last_entry()
        max_ts, offset_of_max = self.time_index.last_entry()
        self._reset_stats()
        self.size_bytes = size_bytes
        if size_bytes == 0:
            return
        self.first_batch_timestamp_ms = self.header_at(0).max_timestamp
        self.max_timestamp_ms, self.offset_of_max_timestamp = max_ts, offset_of_max
        indexed = len(self.offset_index) > 0
        self.next_offset = index_offset + 1 if indexed else self.base_offset
        for pos, header in self.headers(position):
            if indexed and pos == position and header.last_offset != index_offset:
                raise CorruptLog(f"{self.log_path}: the offset index's last entry names offset "
                                 f"{index_offset} at position {position}, where the batch "
                                 f"ends at offset {header.last_offset}")
            self._observe(header)
            self._bytes_since_index_entry += header.size
        if len(self.time_index) and offset_of_max >= self.next_offset:
            raise CorruptLog(f"{self.log_path}: the time index's last entry names offset "
                             f"{offset_of_max}, past the segment's last offset "
                             f"{self.next_offset - 1}")

    def recover(self) -> int:
        """Rebuild from the bytes alone: keep the valid batches, cut the rest. Bytes cut."""
        file_bytes = os.fstat(self._fd).st_size
        self.offset_index.reset()
        self.time_index.reset()
        self._reset_stats()
        position, problem = 0, None
        for pos, header, why in self._scan_valid(file_bytes):
            if header is None:
                problem = why
                break
            self._track(header, pos)
            position = pos + header.size
            self.size_bytes = position
        cut_bytes = file_bytes - position
        if cut_bytes:
            log.warning("%s: cut %d bytes at position %d (%s)", self.log_path, cut_bytes,
                        position, problem)
            os.ftruncate(self._fd, position)
            self._files.mark_dirty(self.log_path)
        self._load_txn_index(cut_beyond=True)
        self.dirty = True
        return cut_bytes

    def _scan_valid(self, file_bytes: int
                    ) -> Iterator[tuple[int, BatchHeader | None, str | None]]:
        """(position, header, None) per valid batch, then (position, None, why) at a bad one."""
        position, next_offset = 0, self.base_offset
        while position < file_bytes:
            chunk = os.pread(self._fd, min(RECOVERY_CHUNK_BYTES_MAX, file_bytes - position),
                             position)
            pos = 0
            while pos < len(chunk):
                problem, header = _check_at(chunk, pos, file_bytes - position)
                if problem == "chunk too short":
                    break
                if problem is None:
                    assert header is not None
                    problem = self._check_offsets(header, next_offset)
                if problem is not None:
                    yield position + pos, None, problem
                    return
                assert header is not None
                yield position + pos, header, None
                next_offset = header.next_offset
                pos += header.size
            if pos == 0:  # a batch bigger than the chunk: read it alone
                header = read_header(os.pread(self._fd, BATCH_HEADER_BYTES, position))
                chunk = os.pread(self._fd, header.size, position)
                problem, header = _check_at(chunk, 0, file_bytes - position)
                problem = problem or self._check_offsets(header, next_offset)
                if problem is not None:
                    yield position, None, problem
                    return
                assert header is not None
                yield position, header, None
                next_offset = header.next_offset
                pos = header.size
            position += pos

    def _check_offsets(self, header: BatchHeader | None, next_offset: int) -> str | None:
        assert header is not None
        if not self._offset_fits(header.base_offset, next_offset):
            return f"batch at offset {header.base_offset} where {next_offset} was expected"
        if not self.can_hold_offset(header.last_offset):
            return f"offset {header.last_offset} does not fit segment {self.base_offset}"
        return None

    def _follows(self, header: BatchHeader, expected: int) -> bool:
        """The batch starts where the one before ended (or later, gaps allowed); a segment's
        first batch starts at the segment's base offset (a follower whose log starts inside
        a batch starts its segment at that batch: Log.append_as_follower). A base offset lowered
        by damage (it lies outside the CRC) so that its batch seems to hold the offset expected
        would otherwise be served with every record moved to the wrong offset."""
        return self._offset_fits(header.base_offset, expected)

    def _offset_fits(self, base_offset: int, next_offset: int) -> bool:
        if self.offset_gaps_allowed:
            return base_offset >= next_offset
        return base_offset == next_offset

    # --- lifetime ---

    def close(self) -> None:
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self._files.close(self.log_path)

    def delete(self) -> None:
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self._files.close(self.log_path)
        os.unlink(self.log_path)


def _whole_batches(chunk: bytes) -> Iterator[tuple[int, BatchHeader]]:
    pos = 0
    while len(chunk) - pos >= BATCH_HEADER_BYTES:
        header = read_header(chunk, pos)
        if len(chunk) - pos < header.size:
            return
        yield pos, header
        pos += header.size


def _check_at(chunk: bytes, pos: int, bytes_left_in_file: int
              ) -> tuple[str | None, BatchHeader | None]:
    """(problem, header) for the batch at pos of a chunk that starts bytes_left_in_file before the
    end of the file. 'chunk too short' means: read further and look again."""
    available = len(chunk) - pos
    if available < BATCH_HEADER_BYTES:
        if bytes_left_in_file - pos < BATCH_HEADER_BYTES:
            return f"torn header: {bytes_left_in_file - pos} bytes left", None
        return "chunk too short", None
    try:
        header = read_header(chunk, pos)
    except CorruptBatch as e:
        return str(e), None
    if header.size > bytes_left_in_file - pos:
        return f"torn batch: {header.size} bytes, {bytes_left_in_file - pos} left", None
    if header.size > available:
        return "chunk too short", None
    if crc_of(chunk, pos, header.size) != header.crc:
        return f"CRC mismatch in batch at offset {header.base_offset}", None
    return None, header
