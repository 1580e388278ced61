"""Key-based log compaction (Kafka's log cleaner) for the logs whose cleanup_policy has "compact".

Theory of operation
-------------------
A compacted log keeps, per key, at least the latest record. The cleaner works on the closed
segments below a bound: the first segment that is the active one, holds offsets at or above the
last stable offset (a record there may still be truncated away, or belong to a transaction not
yet settled, and must not hide an older committed value), or is younger than
`min_compaction_lag_ms` (its largest record timestamp). The
`cleaner-offset-checkpoint` of the data dir holds, per partition, the first dirty offset: below
it the log was cleaned already. A log is chosen when its dirty bytes over its cleanable bytes reach
`min_cleanable_dirty_ratio` (the dirtiest first), or when tombstones it holds are due.

One pass, `CleanJob.run`, runs off the event loop on descriptors of its own:
1. the offset map: key -> latest offset, over the dirty batches from the first dirty offset. Its
   size is bounded (`CleanerSettings.offset_map_bytes_max`); when the next batch would not fit,
   the map ends there and the rest waits for the next pass (several passes clean a large dirty
   section). Keys of 16 bytes or more are kept as their 16-byte MD5 digest, as Kafka does.
2. the segments below the map's end are grouped (consecutive, their sizes summing to at most
   segment_bytes, their offsets within a segment's int32 range) and each group rewritten to one
   `<base>.log.cleaned` (+ indexes, built as it is written), fsynced. A record is kept unless the
   map holds a later offset for its key, or it is a tombstone whose delete horizon has passed;
   records without a key and control batches are kept; the records of aborted transactions
   (storage's producer state lists them) neither enter the map nor stay, as in Kafka, so they
   never hide a committed value (the log's .txnindex files list them). Control batches (the
   markers) are always kept, so the cleaned segment's `.txnindex.cleaned` holds the entries of
   the segments it replaces, in order: every marker stays in the segment covering its offset.
   Every record keeps its offset; a batch
   keeps its base offset, last offset delta (so the batch's last offset, the producer's sequence
   range and the log end stay right), leader epoch and producer fields, and is re-encoded with its
   codec only if a record went (untouched batches are copied byte for byte). A batch left empty
   is dropped, except the last batch of a group (so a cleaned segment ends where the segments it
   replaces ended: segment_swap.py relies on it) and a producer's last batch (its sequence must
   survive for idempotence), which stay as empty batches, as Kafka keeps them.
3. back on the event loop, `LogCleaner.finish` swaps each group in (Log.replace_segments: the
   `.cleaned` -> `.swap` -> final renames of segment_swap.py; readers see the old segments or the
   new one), unless the log changed meanwhile, and moves the checkpoint to the map's end.

Tombstones (null values) are kept `delete_retention_ms` after their batch was first cleaned, so
that a consumer that read the old value has time to see the deletion: the first cleaning stamps
the batch's delete horizon (now + delete_retention_ms) in base_timestamp with attribute bit 6, as
KIP-534 does (record timestamps are unchanged: their deltas are re-based); a later pass after the
horizon drops them. The earliest horizon of a log makes it due for a pass (kept in memory; after a
restart the next dirty pass finds them).

KIP-101: compaction leaves the leader epoch cache as it is. An epoch whose records were all
compacted away still starts where it started, so OffsetForLeaderEpoch answers the same before and
after, and followers truncate to the same offsets. The log start offset does not move.

Sans-IO where it counts: `choose` and `finish` are plain calls on the event loop with an injected
clock; `CleanJob.run` does the reading and writing, on any thread; `clean_once` runs all three
in a row (tests, simulation).
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from crc32c import crc32c

from epochlog.protocol.batch import (
    BATCH_HEADER_BYTES,
    COMPRESSION_MASK,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    BatchHeader,
    CorruptBatch,
    read_header,
)
from epochlog.protocol.compression import compress
from epochlog.protocol.records import Record, decode_batch
from epochlog.protocol.varint import encode_varint

from ..clock import Clock
from .checkpoints import TopicPartition, read_offsets, write_offsets
from .config import LogConfig
from .errors import CorruptCheckpoint, CorruptLog, DescriptorsExhausted
from .log import Log
from .log_manager import LogManager
from .segment import RELATIVE_OFFSET_MAX, Segment
from .segment_swap import CLEANED_SUFFIX, remove_cleaned
from .txn_index import AbortedTxn

CLEANER_CHECKPOINT_FILE = "cleaner-offset-checkpoint"
DELETE_HORIZON_MASK = 0x40  # KIP-534: base_timestamp holds the delete horizon
# What one offset map entry costs in CPython: a bytes key of up to 16 bytes (~50), an int (~32),
# its dict slot (~40). The map's memory bound is offset_map_bytes_max / this.
OFFSET_MAP_ENTRY_BYTES = 120
KEY_DIGEST_BYTES = 16
FAILED_BACKOFF_MS = 60_000  # a log whose pass failed is not tried again before this

log = logging.getLogger("epochlog.storage")

_HEAD = struct.Struct(">qiibI")  # base_offset, batch_length, partition_leader_epoch, magic, crc
_TAIL = struct.Struct(">hiqqqhii")  # attributes ... record_count: what the CRC covers first


@dataclass(frozen=True)
class CleanerSettings:
    offset_map_bytes_max: int = 128 << 20  # Kafka's log.cleaner.dedupe.buffer.size
    io_buffer_bytes: int = 512 << 10  # Kafka's log.cleaner.io.buffer.size: reads and writes

    def __post_init__(self) -> None:
        if self.offset_map_bytes_max < OFFSET_MAP_ENTRY_BYTES:
            raise ValueError(f"offset_map_bytes_max must be at least {OFFSET_MAP_ENTRY_BYTES}")
        if self.io_buffer_bytes < BATCH_HEADER_BYTES:
            raise ValueError(f"io_buffer_bytes must be at least {BATCH_HEADER_BYTES}")

    @property
    def offset_map_entries_max(self) -> int:
        return self.offset_map_bytes_max // OFFSET_MAP_ENTRY_BYTES


class OffsetMap:
    """key -> latest offset, at most entries_max keys."""

    def __init__(self, entries_max: int) -> None:
        assert entries_max >= 1
        self.entries_max = entries_max
        self._offsets: dict[bytes, int] = {}

    def __len__(self) -> int:
        return len(self._offsets)

    def has_room_for(self, count: int) -> bool:
        return len(self._offsets) + count <= self.entries_max

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[_map_key(key)] = offset

    def get(self, key: bytes) -> int:
        return self._offsets.get(_map_key(key), -1)


def _map_key(key: bytes) -> bytes:
    # raw keys are shorter than a digest, so the two never collide with each other
    return key if len(key) < KEY_DIGEST_BYTES else hashlib.md5(key).digest()


@dataclass
class SegmentView:
    """A closed segment as the job sees it: captured on the event loop, read on its own fd."""

    segment: Segment  # the object the swap checks is still in place; never used by the job
    base_offset: int
    next_offset: int
    size_bytes: int
    fd: int
    aborted_here: list[AbortedTxn] = field(default_factory=list)  # its .txnindex entries


@dataclass
class CleanedGroup:
    views: list[SegmentView]
    base_offset: int
    next_offset: int
    bytes_out: int
    records_removed: int
    tombstone_due_ms: int | None


@dataclass
class CleanResult:
    map_end: int = 0
    groups: list[CleanedGroup] = field(default_factory=list)
    bytes_read: int = 0
    error: str | None = None


class _Cancelled(Exception):
    pass


class CleanJob:
    """One pass over one log; `run` may run on any thread and touches no Log state."""

    def __init__(self, tp: TopicPartition, target: Log, views: list[SegmentView],
                 first_dirty: int, producer_last: dict[int, int], now_ms: int,
                 settings: CleanerSettings,
                 aborted: dict[int, list[tuple[int, int]]] | None = None) -> None:
        self.tp = tp
        self.log = target
        self.directory = target.directory
        self.generation = target.generation  # a truncation since voids the pass
        self.config: LogConfig = target.config
        self.views = views
        self.first_dirty = first_dirty
        self.producer_last = producer_last  # producer id -> last offset of its last batch
        # producer id -> (first offset, marker offset) of its aborted transactions
        self.aborted = aborted or {}
        self.now_ms = now_ms
        self.settings = settings
        self._cancel = threading.Event()
        self._writing: list[int] = []  # bases of the .cleaned files begun

    def cancel(self) -> None:
        """Ask a running pass to stop at its next batch (it then closes its descriptors)."""
        self._cancel.set()

    def run(self) -> CleanResult:
        result = CleanResult()
        try:
            offsets, result.map_end = self._build_map(result)
            for group in self._groups(result.map_end):
                result.groups.append(self._clean_group(group, offsets, result))
        except _Cancelled:
            result.error = "cancelled"
        except Exception as e:  # noqa: BLE001  a bad segment or full disk must not stop us
            result.error = f"{type(e).__name__}: {e}"
        finally:
            for view in self.views:
                os.close(view.fd)
        if result.error is not None:
            for base in {done.base_offset for done in result.groups} | set(self._writing):
                remove_cleaned(self.directory, base)
            result.groups = []
        return result

    # --- reading ---

    def _batches(self, view: SegmentView, result: CleanResult) -> Iterator[tuple[BatchHeader,
                                                                                   bytes]]:
        """(header, bytes) of each batch of the segment, read io_buffer_bytes at a time."""
        position = 0
        while position < view.size_bytes:
            if self._cancel.is_set():
                raise _Cancelled()
            want = min(max(self.settings.io_buffer_bytes, BATCH_HEADER_BYTES),
                       view.size_bytes - position)
            chunk = os.pread(view.fd, want, position)
            header = read_header(chunk)
            if header.size > len(chunk):  # a batch larger than the buffer: read it alone
                chunk = os.pread(view.fd, header.size, position)
            if len(chunk) < header.size:
                raise CorruptBatch(f"segment {view.base_offset} ends inside a batch at "
                                   f"position {position}")
            pos = 0
            while len(chunk) - pos >= BATCH_HEADER_BYTES:
                header = read_header(chunk, pos)
                if len(chunk) - pos < header.size:
                    break
                result.bytes_read += header.size
                yield header, chunk[pos:pos + header.size]
                pos += header.size
            position += pos

    def _build_map(self, result: CleanResult) -> tuple[OffsetMap, int]:
        offsets = OffsetMap(self.settings.offset_map_entries_max)
        map_end = self.first_dirty
        for view in self.views:
            if view.next_offset <= self.first_dirty:
                continue
            for header, data in self._batches(view, result):
                if header.last_offset < self.first_dirty:
                    continue
                if header.is_control:
                    map_end = header.next_offset
                    continue
                if len(offsets) and not offsets.has_room_for(header.record_count):
                    return offsets, header.base_offset  # full: the next pass goes on from here
                if self._aborted(header):
                    map_end = header.next_offset
                    continue  # an aborted transaction's records never win
                _, records = decode_batch(data)
                for record in records:
                    if record.key is not None:
                        offsets.put(record.key, record.offset)
                map_end = header.next_offset
            map_end = view.next_offset
        return offsets, map_end

    # --- writing ---

    def _groups(self, map_end: int) -> list[list[SegmentView]]:
        groups: list[list[SegmentView]] = []
        for view in (v for v in self.views if v.base_offset < map_end):
            group = groups[-1] if groups else None
            if (group is not None
                    and sum(v.size_bytes for v in group) + view.size_bytes
                    <= self.config.segment_bytes
                    and view.next_offset - 1 - group[0].base_offset <= RELATIVE_OFFSET_MAX):
                group.append(view)
            else:
                groups.append([view])
        return groups

    def _clean_group(self, group: list[SegmentView], offsets: OffsetMap,
                     result: CleanResult) -> CleanedGroup:
        base, end = group[0].base_offset, group[-1].next_offset
        remove_cleaned(self.directory, base)  # a pass that died before may have left some
        self._writing.append(base)
        out = Segment(self.directory, base, self.config, self.now_ms, file_suffix=CLEANED_SUFFIX)
        out.offset_gaps_allowed = True
        removed, due = 0, None
        pending: list[bytes] = []
        pending_bytes = 0
        try:
            for view in group:
                for header, data in self._batches(view, result):
                    last = header.next_offset == end
                    cleaned, dropped, horizon = self._clean_batch(header, data, offsets, last)
                    removed += dropped
                    if horizon is not None:
                        due = horizon if due is None else min(due, horizon)
                    if cleaned is None:
                        continue
                    pending.append(cleaned)
                    pending_bytes += len(cleaned)
                    if pending_bytes >= self.settings.io_buffer_bytes:
                        _append(out, pending)
                        pending, pending_bytes = [], 0
            _append(out, pending)
            assert out.next_offset == end, f"cleaned {base} ends at {out.next_offset}, not {end}"
            out.txn_index.create()
            for view in group:
                for txn in view.aborted_here:
                    out.txn_index.append(txn)
            out.on_roll()
            out.flush()
            size = out.size_bytes
        finally:
            out.close()
        return CleanedGroup(group, base, end, size, removed, due)

    def _clean_batch(self, header: BatchHeader, data: bytes, offsets: OffsetMap,
                     last_in_group: bool) -> tuple[bytes | None, int, int | None]:
        """(the batch to write or None, records removed, its pending delete horizon or None)."""
        if header.is_control:
            return data, 0, None
        _, records = decode_batch(data)
        has_horizon = bool(header.attributes & DELETE_HORIZON_MASK)
        horizon_passed = has_horizon and self.now_ms >= header.base_timestamp
        kept = [] if self._aborted(header) else \
            [r for r in records if self._retain(r, offsets, horizon_passed)]
        tombstones = any(r.value is None and r.key is not None for r in kept)
        horizon = None
        if tombstones:
            horizon = header.base_timestamp if has_horizon \
                else self.now_ms + self.config.delete_retention_ms
        dropped = len(records) - len(kept)
        if dropped == 0 and (has_horizon or not tombstones):
            return data, 0, horizon
        if kept:
            return _rebuild(header, kept, horizon), dropped, horizon
        producer_last = header.producer_id >= 0 and \
            self.producer_last.get(header.producer_id) == header.last_offset
        if last_in_group or producer_last:
            return _empty_batch(header), dropped, None
        return None, dropped, None

    def _aborted(self, header: BatchHeader) -> bool:
        """A batch of an aborted transaction: no reader ever sees its records, so they go."""
        if not header.is_transactional:
            return False
        return any(first <= header.base_offset <= last
                   for first, last in self.aborted.get(header.producer_id, ()))

    @staticmethod
    def _retain(record: Record, offsets: OffsetMap, horizon_passed: bool) -> bool:
        if record.key is None:
            return True
        if offsets.get(record.key) > record.offset:
            return False  # a later record has this key
        return not (record.value is None and horizon_passed)


def _read_descriptors(segments: list[Segment]) -> list[int]:
    """A descriptor of each segment's .log for the cleaner's thread; none kept on OSError
    (out of descriptors: the pass is tried again later)."""
    fds: list[int] = []
    try:
        for segment in segments:
            fds.append(segment.dup_for_reading())
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    return fds


def _append(out: Segment, batches: list[bytes]) -> None:
    if not batches:
        return
    buf = b"".join(batches)
    headers, pos = [], 0
    for batch in batches:
        headers.append((pos, read_header(batch)))
        pos += len(batch)
    out.append(buf, headers)


def _encode_record(record: Record, base_offset: int, base_timestamp: int) -> bytes:
    key, value = record.key, record.value
    parts = [b"\x00", encode_varint(record.timestamp - base_timestamp),
             encode_varint(record.offset - base_offset)]
    parts += [encode_varint(-1)] if key is None else [encode_varint(len(key)), key]
    parts += [encode_varint(-1)] if value is None else [encode_varint(len(value)), value]
    parts.append(encode_varint(len(record.headers)))
    for name, header_value in record.headers:
        name_bytes = name.encode()
        parts += [encode_varint(len(name_bytes)), name_bytes]
        parts += [encode_varint(-1)] if header_value is None \
            else [encode_varint(len(header_value)), header_value]
    body = b"".join(parts)
    return encode_varint(len(body)) + body


def _assemble(header: BatchHeader, attributes: int, base_timestamp: int, max_timestamp: int,
              record_count: int, payload: bytes) -> bytes:
    """A batch with header's offsets, epoch and producer fields around payload."""
    tail = _TAIL.pack(attributes, header.last_offset_delta, base_timestamp, max_timestamp,
                      header.producer_id, header.producer_epoch, header.base_sequence,
                      record_count)
    crc = crc32c(payload, crc32c(tail))
    batch_length = BATCH_HEADER_BYTES - LOG_OVERHEAD + len(payload)
    head = _HEAD.pack(header.base_offset, batch_length, header.partition_leader_epoch,
                      CURRENT_MAGIC, crc)
    return b"".join((head, tail, payload))


def _rebuild(header: BatchHeader, kept: list[Record], horizon: int | None) -> bytes:
    """The batch with only the kept records, each at its own offset and timestamp, in the
    batch's codec; with horizon, the delete horizon stamped (KIP-534)."""
    attributes = header.attributes
    if horizon is not None:
        base_timestamp = horizon
        attributes |= DELETE_HORIZON_MASK
    else:
        base_timestamp = min(r.timestamp for r in kept)
    if header.timestamp_type:  # LogAppendTime: the batch's max timestamp is every record's
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(r.timestamp for r in kept)
    payload = b"".join(_encode_record(r, header.base_offset, base_timestamp) for r in kept)
    codec = attributes & COMPRESSION_MASK
    if codec:
        payload = compress(codec, payload, None)
    return _assemble(header, attributes, base_timestamp, max_timestamp, len(kept), payload)


def _empty_batch(header: BatchHeader) -> bytes:
    """No records, the same offsets and producer fields (Kafka's retained empty batch)."""
    attributes = header.attributes & ~(COMPRESSION_MASK | DELETE_HORIZON_MASK)
    return _assemble(header, attributes, header.max_timestamp, header.max_timestamp, 0, b"")


@dataclass
class CleanerStats:
    passes: int = 0
    passes_failed: int = 0
    passes_aborted: int = 0  # the log changed under the pass
    bytes_read: int = 0
    bytes_written: int = 0
    records_removed: int = 0
    segments_swapped: int = 0
    dirty_ratio_max: float = 0.0  # of the last look at every compacted log


class LogCleaner:
    """The cleaner of one data dir: chooses logs, runs passes, swaps and checkpoints."""

    def __init__(self, logs: LogManager, settings: CleanerSettings, clock: Clock) -> None:
        self.logs = logs
        self.settings = settings
        self.clock = clock
        self.path = os.path.join(logs.data_dir, CLEANER_CHECKPOINT_FILE)
        self.first_dirty = self._read_checkpoint()
        self.tombstones_due_ms: dict[TopicPartition, int] = {}
        self.failed_at_ms: dict[TopicPartition, int] = {}
        self.stats = CleanerStats()

    def _read_checkpoint(self) -> dict[TopicPartition, int]:
        if not os.path.exists(self.path):
            return {}
        try:
            return read_offsets(self.path)
        except CorruptCheckpoint as e:
            log.warning("%s; every compacted log is dirty from its start again", e)
            return {}

    # --- choosing (event loop) ---

    def choose(self) -> CleanJob | None:
        """The dirtiest log due for a pass, as a job holding descriptors of its own; None if
        no log is due."""
        now_ms = self.clock()
        best: tuple[float, TopicPartition, Log, list[Segment], int] | None = None
        ratio_max = 0.0
        for tp, target in self.logs.logs.items():
            if not target.config.compact:
                continue
            if now_ms - self.failed_at_ms.get(tp, now_ms - FAILED_BACKOFF_MS) < FAILED_BACKOFF_MS:
                continue
            cleanable = self._cleanable(target, now_ms)
            if not cleanable:
                continue
            first_dirty = self._first_dirty(tp, target)
            dirty = sum(s.size_bytes for s in cleanable if s.next_offset > first_dirty)
            total = sum(s.size_bytes for s in cleanable)
            ratio = dirty / total if total else 0.0
            ratio_max = max(ratio_max, ratio)
            due = self.tombstones_due_ms.get(tp)
            wanted = (dirty > 0 and ratio >= target.config.min_cleanable_dirty_ratio) or \
                (due is not None and now_ms >= due)
            if wanted and (best is None or ratio > best[0]):
                best = (ratio, tp, target, cleanable, first_dirty)
        self.stats.dirty_ratio_max = ratio_max
        if best is None:
            return None
        _, tp, target, cleanable, first_dirty = best
        try:
            here = [list(s.txn_index.entries()) for s in cleanable]
            aborted_txns = target.aborted_in(cleanable[0].base_offset, cleanable[-1].next_offset)
            fds = _read_descriptors(cleanable)
        except (OSError, CorruptLog, DescriptorsExhausted) as exc:
            self.failed_at_ms[tp] = now_ms
            log.warning("%s: cannot read its aborted transactions or segments (%s); not cleaned "
                        "for %d ms", target.directory, exc, FAILED_BACKOFF_MS)
            return None
        views = [SegmentView(s, s.base_offset, s.next_offset, s.size_bytes, fd, entries)
                 for s, fd, entries in zip(cleanable, fds, here, strict=True)]
        producer_last = {pid: entry.batches[-1].last_offset
                         for pid, entry in target.producer_state.producers.items()
                         if entry.batches}
        aborted: dict[int, list[tuple[int, int]]] = {}
        for a in aborted_txns:
            aborted.setdefault(a.producer_id, []).append((a.first_offset, a.last_offset))
        return CleanJob(tp, target, views, first_dirty, producer_last, now_ms, self.settings,
                        aborted)

    @staticmethod
    def _cleanable(target: Log, now_ms: int) -> list[Segment]:
        """The closed segments from the log start that are wholly below the last stable offset
        (the high watermark, or an unsettled transaction's first offset: its records may yet be
        aborted, and must not hide an older committed value) and older than
        min_compaction_lag_ms, up to the first that is not."""
        out = []
        lag_ms = target.config.min_compaction_lag_ms
        for segment in target.segments[:-1]:
            newest_ms = segment.max_timestamp_ms if segment.max_timestamp_ms >= 0 \
                else segment.created_ms
            if segment.next_offset > target.last_stable_offset or (
                    lag_ms > 0 and now_ms - newest_ms < lag_ms):
                break
            out.append(segment)
        return out

    def _first_dirty(self, tp: TopicPartition, target: Log) -> int:
        checkpoint = self.first_dirty.get(tp, target.log_start_offset)
        if not target.log_start_offset <= checkpoint <= target.log_end_offset:
            return target.log_start_offset  # truncated or deleted below it since
        return checkpoint

    # --- finishing (event loop) ---

    def finish(self, job: CleanJob, result: CleanResult) -> bool:
        """Swap the cleaned groups in and move the checkpoint; True if the whole pass took."""
        started = job.now_ms
        self.stats.bytes_read += result.bytes_read
        if result.error is not None:
            self.stats.passes_failed += 1
            self.failed_at_ms[job.tp] = self.clock()
            log.warning("%s: cleaning failed (%s); trying again in %d ms", job.directory,
                        result.error, FAILED_BACKOFF_MS)
            return False
        swapped = 0
        for i, group in enumerate(result.groups):
            current = self.logs.logs.get(job.tp)
            if current is not job.log or not job.log.replace_segments(
                    [v.segment for v in group.views], [v.size_bytes for v in group.views],
                    group.base_offset, job.generation):
                for rest in result.groups[i:]:
                    remove_cleaned(job.directory, rest.base_offset)
                self.stats.passes_aborted += 1
                log.info("%s: cleaning abandoned after %d of %d groups: the log changed",
                         job.directory, i, len(result.groups))
                return False
            swapped += len(group.views)
        self.first_dirty[job.tp] = result.map_end
        due = [g.tombstone_due_ms for g in result.groups if g.tombstone_due_ms is not None]
        if due:
            self.tombstones_due_ms[job.tp] = min(due)
        else:
            self.tombstones_due_ms.pop(job.tp, None)
        self.write_checkpoint()
        bytes_in = sum(v.size_bytes for g in result.groups for v in g.views)
        bytes_out = sum(g.bytes_out for g in result.groups)
        removed = sum(g.records_removed for g in result.groups)
        self.stats.passes += 1
        self.stats.bytes_written += bytes_out
        self.stats.records_removed += removed
        self.stats.segments_swapped += swapped
        log.info("%s: cleaned offsets [%d, %d) (dirty from %d): %d segments into %d, %d bytes "
                 "into %d, %d records removed, in %d ms", job.directory,
                 job.views[0].base_offset if job.views else 0, result.map_end, job.first_dirty,
                 swapped, len(result.groups), bytes_in, bytes_out, removed,
                 self.clock() - started)
        return True

    def write_checkpoint(self) -> None:
        live = {tp: offset for tp, offset in self.first_dirty.items() if tp in self.logs.logs}
        self.first_dirty = live
        write_offsets(self.path, live)

    # --- all in one (tests, simulation) ---

    def clean_once(self) -> bool:
        """Choose, run and finish one pass on this thread; False if no log was due."""
        job = self.choose()
        if job is None:
            return False
        self.finish(job, job.run())
        return True
