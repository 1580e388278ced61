"""`Log`: one partition's replica on disk: segments, the leader epoch cache, producer state.

Theory of operation. Offsets [log_start_offset, log_end_offset) are readable. Appends go to the
active (last) segment, which rolls on segment_bytes, segment_ms, a full index, or offsets that would
not fit its int32 relative offsets. The leader path validates batches (structure, CRC, size,
producer sequences), assigns offsets from the log end and stamps its leader epoch; the follower path
validates structure and CRC and keeps the leader's offsets, which must continue from the log end
(no gaps, except in a compacted log, where the leader's cleaner removed whole batches; and an empty
follower log whose leader's log starts inside the batch received, as in Kafka). A refused append
raises an AppendRefused subclass before anything is written. A compacted log (cleanup_policy has
"compact") refuses records without a key on the leader path (INVALID_RECORD, as Kafka).

Compaction (cleaner.py) replaces closed segments by cleaned ones (`replace_segments`, the swap
protocol of segment_swap.py); a log that may hold offset gaps says so in its `offset-gaps-allowed`
file, written before the first gap lands, so that recovery accepts them (and only there: elsewhere
a gap is damage). Opening completes a swap a crash interrupted before anything else.

Durability. An append returns once its bytes are in the page cache (os.pwrite): that survives a
SIGKILL of the process, not a power loss. `flush()` fsyncs every segment written since the last
flush (its .log, .index and .timeindex) and the partition folder if a file was created there, then
moves `recovery_point` to the log end: everything below the recovery point is on disk.
`flush_due()` applies flush_messages / flush_ms; with `auto_flush` (the default) appends flush by
themselves when due; an asyncio owner turns it off and runs `begin_flush()` / `FlushJob.run()` (in
an executor) / `end_flush()` instead. Truncations fsync the cut file at once. Epoch cache changes
are written atomically before the call that made them returns.

Opening. After a clean shutdown segments are loaded and their indexes checked; after a crash every
segment holding offsets at or past the recovery point is recovered (every batch CRC-checked, the
torn or corrupt tail cut, the indexes rebuilt, later segments dropped), then the epoch cache loses
entries beyond the log end (KIP-101 "Unclean Shutdown").

Producer state (producer_state.py) and the aborted transactions' .txnindex files (txn_index.py).
The state is loaded from the newest producer snapshot (producer_snapshots.py) in [log start, S]
and the batches from the snapshot on are replayed; S is the log end after a clean shutdown and
after a truncation, the recovery point after a crash (what lies past it was recovered, and the
.txnindex entries there may be missing). Replaying re-derives the .txnindex entries of every ABORT
marker met, so the entries from the snapshot's offset on are dropped first. No usable snapshot, or
a .txnindex found damaged in a segment below it: the replay starts at the log start (S is
lowered to the damaged segment's base). Snapshots are taken at each roll and at close, the newest
SNAPSHOTS_KEPT_MAX kept; those above a truncation point and below the log start are deleted.
`producer_batches_replayed` counts what the last rebuild read. Transactions ended by a marker
not yet below the high watermark are not in a snapshot (as in Kafka), so after a restart the last
stable offset may move past them at once: the aborted ones are in the .txnindex, so
read_committed consumers still drop their records, and a commit is final.
`aborted_in` (read_committed fetches) reads the .txnindex files, not memory: the aborted list
costs memory only per segment (four numbers), however many transactions were aborted.

The core is synchronous and reads time only through the injected `clock` (ms).
"""

from __future__ import annotations

import bisect
import contextlib
import logging
import os
import re
from collections.abc import Callable, Iterator
from typing import NamedTuple

from epochlog.protocol.batch import (
    BatchHeader,
    CorruptBatch,
    check_all,
    set_log_append_time,
    stamp,
)
from epochlog.protocol.control_records import Marker, read_marker
from epochlog.protocol.records import Record, decode_batch, recompress

from ..clock import Clock
from .checkpoints import TMP_SUFFIX, fsync_dir, write_atomically
from .config import LogConfig
from .descriptors import exhausted, is_exhaustion
from .disk_health import DiskHealth
from .epoch_cache import LEADER_EPOCH_FILE, LeaderEpochCache
from .errors import (
    CorruptCheckpoint,
    CorruptLog,
    CorruptRecords,
    DescriptorsExhausted,
    DiskWriteFailed,
    InvalidRecord,
    InvalidTimestamp,
    LogDeleted,
    OffsetOutOfRange,
    OffsetsNotIncreasing,
    RecordError,
    RecordTooLarge,
    StorageError,
)
from .open_files import OpenFiles
from .producer_snapshots import ProducerSnapshots
from .producer_state import ProducerStateManager
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, Segment
from .segment_swap import complete_interrupted_swaps, remove_cleaned, swap_in
from .truncations import Truncations
from .txn_index import TXN_INDEX_SUFFIX, AbortedTxn

EARLIEST_TIMESTAMP = -2  # ListOffsets' special timestamps
LATEST_TIMESTAMP = -1
NO_TIMESTAMP = -1  # a record without one: never checked against the bounds (Kafka)
FENCED_LEADER_EPOCH = 74
STRAY_SUFFIXES = (TMP_SUFFIX, ".deleted", ".cleaned", ".swap")
OFFSET_GAPS_FILE = "offset-gaps-allowed"
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")

log = logging.getLogger("epochlog.storage")


class StaleLeaderEpoch(StorageError):
    """A leader append stamped with an epoch older than the cache's latest."""

    error_code = FENCED_LEADER_EPOCH


# A damaged log met at open is cut before the damage; a cut that meets more damage is tried again
# further down, this many times, before the log is emptied (never a broker that cannot start).
OPEN_CUTS_MAX = 8


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    max_timestamp_ms: int
    batch_count: int
    size_bytes: int
    duplicate: bool = False  # an idempotent retry: nothing written, the original offsets


class FlushJob:
    """The fsyncs of one flush, on duplicated descriptors, so that they can run on any thread."""

    def __init__(self, end_offset: int, generation: int, fds: list[int], dirs: list[str]) -> None:
        self.end_offset = end_offset
        self.generation = generation
        self._fds = fds
        self._dirs = dirs

    @property
    def dirs(self) -> list[str]:
        return list(self._dirs)

    def run(self) -> None:
        """The fsyncs; OSError if one fails. Files first, folders then: opening a folder is the
        only step that needs a descriptor (EMFILE there: Log.flush_not_done)."""
        try:
            for fd in self._fds:
                os.fsync(fd)
            for directory in self._dirs:
                fsync_dir(directory)
        finally:
            for fd in self._fds:
                os.close(fd)
            self._fds = []


class Log:
    def __init__(self, directory: str, config: LogConfig, clock: Clock,
                 files: OpenFiles | None = None) -> None:
        """Use Log.open. files: the data dir's cache of open files (open_files.py); None: one
        of the log's own."""
        self.directory = directory
        self.config = config
        self.clock = clock
        self.files = files if files is not None else OpenFiles()
        self.auto_flush = True
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self.log_start_offset = 0
        self.recovery_point = 0
        self.high_watermark = 0
        self.epoch_cache = LeaderEpochCache(None)
        self.producer_state = ProducerStateManager()
        self.snapshots = ProducerSnapshots(directory)
        self.producer_batches_replayed = 0  # by the last rebuild of the producer state
        # Told (by LogManager) whenever the log gets something to flush, so that the periodic
        # flush looks at those logs only, not at every log of the broker (issue 33).
        self.on_unflushed: Callable[[Log], None] | None = None
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self._dir_dirty_flag = False
        self._generation = 0  # bumped by every truncation at the end
        self.offset_gaps_allowed = False  # see OFFSET_GAPS_FILE
        self.deleted = False  # set by LogManager.delete_log: a write still racing is no
        # failure of the disk (write_failed)
        self.disk: DiskHealth | None = None  # the data dir's, set by LogManager
        self.truncations: Truncations | None = None  # the data dir's, set by LogManager

    @property
    def _dir_dirty(self) -> bool:
        """The folder changed (a file made, renamed or removed): its next flush fsyncs it."""
        return self._dir_dirty_flag

    @_dir_dirty.setter
    def _dir_dirty(self, dirty: bool) -> None:
        self._dir_dirty_flag = dirty
        if dirty and self.on_unflushed is not None:
            self.on_unflushed(self)

    def write_failed(self, what: str, exc: OSError
                     ) -> DiskWriteFailed | DescriptorsExhausted | LogDeleted:
        """A failed write (OSError) as the error to raise, counted by the data dir's health
        (running out of descriptors is not a disk failure: descriptors.py; nor is a write to
        this log after it was deleted, whose files are gone: LogDeleted)."""
        if self.deleted:
            return LogDeleted(what, exc)
        if self.disk is not None:
            return self.disk.failed(what, exc)
        return exhausted(what, exc) if is_exhaustion(exc) else DiskWriteFailed(what, exc)

    def _no_descriptor(self, what: str, exc: OSError) -> DescriptorsExhausted:
        """A read or flush that could not open a file for want of a descriptor, as the error to
        raise (descriptors.py); any other OSError goes on as it is."""
        if not is_exhaustion(exc):
            raise exc
        return exhausted(f"{what} of {self.directory}", exc)

    # --- opening and closing ---

    @classmethod
    def open(cls, directory: str, config: LogConfig, clock: Clock, *, recovery_point: int = 0,
             log_start_offset: int = 0, high_watermark: int = 0,
             clean_shutdown: bool = False, files: OpenFiles | None = None,
             sync_parent: bool = True) -> Log:
        """sync_parent=False: a new folder's entry in the data dir is made durable by the
        caller (LogManager.creating_logs: one fsync for many new logs)."""
        self = cls(directory, config, clock, files)
        if not os.path.isdir(directory):
            os.makedirs(directory)
            if sync_parent:
                fsync_dir(os.path.dirname(os.path.abspath(directory)))
        swapped = complete_interrupted_swaps(directory)
        self._remove_strays()
        self.offset_gaps_allowed = os.path.exists(os.path.join(directory, OFFSET_GAPS_FILE))
        if swapped:
            self.allow_offset_gaps()  # written before any swap; this only makes sure
        recovered = self._load_segments(recovery_point, log_start_offset, clean_shutdown, swapped)
        self.log_start_offset = min(max(log_start_offset, self._bases[0]), self.log_end_offset)
        self._load_epoch_cache()
        self._load_producer_state(self.log_end_offset if clean_shutdown
                                  else min(recovery_point, self.log_end_offset))
        self.high_watermark = min(max(high_watermark, self.log_start_offset), self.log_end_offset)
        self.recovery_point = min(recovery_point, self.log_end_offset)
        if recovered or not clean_shutdown:
            self.flush()  # what recovery kept is now on disk: the recovery point moves to the end
        log.info("opened %s: offsets [%d, %d), %d segments, %s", directory,
                 self.log_start_offset, self.log_end_offset, len(self._segments),
                 "clean" if clean_shutdown else f"recovered from offset {recovery_point}")
        return self

    def _load_producer_state(self, snapshot_max: int) -> None:
        """Producer state from the newest snapshot at or below snapshot_max and the batch
        headers after it (see the module notes). After a clean shutdown the segments were
        trusted as far as their indexes go, so this scan may be the first to reach a damaged
        header: the log is cut there, as recovery cuts at a bad batch (a cut below the
        checkpointed high watermark makes the data dir start this replica offline, to be
        repaired from a healthy one: LogManager.cut_at_open), instead of failing the open and
        with it the whole broker."""
        why = "the open found a batch header that does not parse"
        try:
            self._rebuild_producer_state(snapshot_max)
            return
        except CorruptLog as exc:
            problem = exc
        for _ in range(OPEN_CUTS_MAX):
            cut = problem.cut_offset
            if cut is None or cut < self.log_start_offset:
                break
            log.warning("%s: %s; cutting the log at offset %d", self.directory, problem, cut)
            try:
                self.truncate_to(cut, why)
                return
            except CorruptLog as more:
                problem = more
        # the cuts keep meeting damage: keep nothing (the replica is repaired from another)
        log.warning("%s: %s; no intact place to cut found, emptying the log", self.directory,
                    problem)
        self._note_committed_cut(self.log_start_offset, why)
        self.truncate_fully_and_start_at(self.log_start_offset)

    def _rebuild_producer_state(self, snapshot_max: int) -> None:
        """See the module notes, "Producer state". CorruptLog if a batch header does not parse
        (the state and .txnindex entries are then those of the batches before it)."""
        damaged = [s.base_offset for s in self._segments if s.txn_index_problem is not None]
        snapshot_max = min(snapshot_max, self.log_end_offset, *damaged)
        if self.snapshots.delete_outside(self.log_start_offset, snapshot_max):
            self._dir_dirty = True
        found = self.snapshots.load_latest(self.log_start_offset, snapshot_max)
        start = self.log_start_offset
        if found is None:
            self.producer_state.clear()
        else:
            start = found[0]
            self.producer_state.load(found[1], self.log_start_offset)
        for segment in self._segments:
            segment.txn_index.truncate_to(start)
            segment.txn_index_problem = None
        replayed = 0
        for segment, header, marker in self._producer_batches_from(start):
            aborted = self.producer_state.update(header, marker)
            if aborted is not None:
                segment.txn_index.append(aborted)
            replayed += 1
        self.producer_batches_replayed = replayed
        log.info("%s: producer state %s, %d batches replayed", self.directory,
                 "from scratch" if found is None else f"from the snapshot at offset {start}",
                 replayed)

    def _take_snapshot(self, *, sync: bool) -> None:
        """A producer snapshot at the log end; a disk that refuses it costs only a longer replay
        at the next open."""
        try:
            self.snapshots.write(self.log_end_offset, self.producer_state.producers, sync=sync)
        except OSError as exc:
            log.warning("%s: could not write a producer snapshot at offset %d: %s",
                        self.directory, self.log_end_offset, exc.strerror or exc)
            return
        self._dir_dirty = self._dir_dirty or not sync

    def _remove_strays(self) -> None:
        names = os.listdir(self.directory)
        logs = {n[:-len(LOG_SUFFIX)] for n in names if n.endswith(LOG_SUFFIX)}
        for name in names:
            stem, _, _ = name.partition(".")
            orphan_index = (name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))
                            and stem not in logs)
            if name.endswith(STRAY_SUFFIXES) or orphan_index:
                log.info("%s: removing stray file %s", self.directory, name)
                os.unlink(os.path.join(self.directory, name))

    def _load_segments(self, recovery_point: int, log_start_offset: int,
                       clean_shutdown: bool, swapped: set[int]) -> bool:
        bases = sorted(int(m.group(1)) for m in map(_SEGMENT_FILE.match,
                                                     os.listdir(self.directory))
                       if m and m.group(2) == "log")
        recovered = False
        for i, base in enumerate(bases):
            previous_end = self._segments[-1].next_offset if self._segments else base
            if base < previous_end or (base > previous_end and not self.offset_gaps_allowed):
                log.warning("%s: segment %d does not continue the one before (which ends at %d);"
                            " dropping it and the rest", self.directory, base,
                            self._segments[-1].next_offset)
                self._delete_files_from(bases[i:])
                break
            segment = Segment(self.directory, base, self.config, self.clock(), files=self.files)
            segment.offset_gaps_allowed = self.offset_gaps_allowed
            next_base = bases[i + 1] if i + 1 < len(bases) else None
            if base not in swapped and (clean_shutdown or (next_base is not None
                                                           and next_base <= recovery_point)):
                cut = segment.load()
            else:
                cut = segment.recover()
                recovered = True
            self._segments.append(segment)
            self._bases.append(base)
            if cut and next_base is not None:
                log.warning("%s: segment %d had a bad tail; dropping the %d segments after it",
                            self.directory, base, len(bases) - i - 1)
                self._delete_files_from(bases[i + 1:])
                break
        if not self._segments:
            self._add_segment(max(log_start_offset, 0))
        return recovered

    def _delete_files_from(self, bases: list[int]) -> None:
        for base in bases:
            Segment(self.directory, base, self.config, self.clock(), files=self.files).delete()
        self._dir_dirty = True

    def _load_epoch_cache(self) -> None:
        path = os.path.join(self.directory, LEADER_EPOCH_FILE)
        try:
            self.epoch_cache = LeaderEpochCache.load(path)
        except CorruptCheckpoint as e:
            log.warning("%s; rebuilding the epoch cache from the batches", e)
            rebuilt = LeaderEpochCache(None)
            for header in self._headers_from(self.log_start_offset):
                if header.partition_leader_epoch >= 0:
                    rebuilt.assign(header.partition_leader_epoch, header.base_offset)
            self.epoch_cache = LeaderEpochCache(path, rebuilt.entries)
            self.epoch_cache._write()
        # KIP-101, Unclean Shutdown: the cache may be ahead of the log; keep (epoch, end) entries
        self.epoch_cache.truncate_from_end(self.log_end_offset + 1)
        self.epoch_cache.truncate_from_start(self.log_start_offset)

    def close(self, *, snapshot: bool = True) -> None:
        """Close the files, with a producer snapshot at the log end (fsynced: after a clean
        shutdown the next open reads it and replays nothing). snapshot=False: the caller took
        it already (close_snapshot) and flushed it."""
        if snapshot:
            self.close_snapshot(sync=True)
        for segment in self._segments:
            segment.close()

    def close_snapshot(self, *, sync: bool) -> bool:
        """The producer snapshot a clean shutdown leaves at the log end; whether one was
        written. None is when the newest snapshot is already there (nothing was appended since:
        Kafka's rule), or the log holds nothing and never had a snapshot: at 10,000 partitions,
        two fsyncs each made a clean stop take minutes (issue 33). sync=False: the next flush
        makes it durable (LogManager.close flushes every log after)."""
        end = self.log_end_offset
        offsets = self.snapshots.offsets()
        if offsets and offsets[-1] == end and not (sync and self.snapshots.unsynced(end)):
            return False
        if not offsets and end == self.log_start_offset and not self.producer_state.producers:
            return False
        self._take_snapshot(sync=sync)
        return True

    # --- state ---

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def segments(self) -> list[Segment]:
        return list(self._segments)

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size_bytes for s in self._segments)

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is settled: the high watermark, or where the earliest
        transaction still open (or ended by a marker not yet below the high watermark) starts."""
        unstable = self.producer_state.first_unstable_offset(self.high_watermark)
        return self.high_watermark if unstable is None else min(unstable, self.high_watermark)

    def update_high_watermark(self, offset: int) -> None:
        self.high_watermark = min(max(offset, self.log_start_offset), self.log_end_offset)
        self.producer_state.settle(self.high_watermark)

    def begin_leader_epoch(self, leader_epoch: int) -> None:
        """Becoming leader: the new epoch starts at the log end (KIP-101 step 3). On a disk that
        refuses the write the cache keeps its last epoch, whose end is then our log end, which
        is where the new one starts: OffsetForLeaderEpoch answers stay right, and the first
        append at this epoch records it (`_write`)."""
        try:
            self.epoch_cache.assign(leader_epoch, self.log_end_offset)
        except OSError as exc:
            self.write_failed(f"leader epoch {leader_epoch} to {self.directory}", exc)

    def end_offset_for_epoch(self, leader_epoch: int) -> tuple[int, int]:
        return self.epoch_cache.end_offset_for(leader_epoch, self.log_end_offset)

    # --- appending ---

    def append_as_leader(self, records: bytes | bytearray | memoryview,
                         leader_epoch: int) -> AppendInfo:
        """Validate, assign offsets from the log end, stamp leader_epoch, write.

        A writable memoryview is stamped in place (the broker's server gives each request its
        own frame buffer, so the records are copied by nobody); anything else is copied once."""
        headers = self._validate(records)
        for header in headers:
            if header.record_count < 1 or header.last_offset_delta + 1 != header.record_count:
                raise CorruptRecords(f"batch of {header.record_count} records claims "
                                     f"{header.last_offset_delta + 1} offsets")
            if header.size > self.config.max_message_bytes:
                raise RecordTooLarge(f"batch of {header.size} bytes is above max_message_bytes "
                                     f"{self.config.max_message_bytes}")
        if self.config.compact:
            _require_keys(records, headers, self.directory)
        if leader_epoch < self.epoch_cache.latest_epoch:
            raise StaleLeaderEpoch(f"leader epoch {leader_epoch} is older than the latest "
                                   f"epoch {self.epoch_cache.latest_epoch} of {self.directory}")
        codec = self.config.codec
        if codec is not None and any(h.compression != codec and not h.is_control
                                     for h in headers):
            records, headers = _recompressed(records, headers, codec)
            for header in headers:
                if header.size > self.config.max_message_bytes:
                    raise RecordTooLarge(f"batch of {header.size} bytes once recompressed is "
                                         f"above max_message_bytes "
                                         f"{self.config.max_message_bytes}")
        now_ms = self.clock()
        if not self.config.log_append_time:
            for position, header in _positions(headers):
                _check_timestamps(records, position, header, now_ms, self.config)
        buf = records if isinstance(records, memoryview) and not records.readonly \
            else bytearray(records)
        stamped = _stamp(buf, headers, self.log_end_offset, leader_epoch)
        if self.config.log_append_time:
            stamped = [(pos, set_log_append_time(buf, pos, header, now_ms))
                       for pos, header in stamped]
        for pos, header in stamped:
            if header.is_control:  # a transaction marker (WriteTxnMarkers; clients may not)
                marker = _marker_of(buf, pos, header)
                self.producer_state.check_marker(header.producer_id, header.producer_epoch,
                                                 marker.coordinator_epoch)
        duplicate = self.producer_state.check([h for _, h in stamped if not h.is_control])
        if duplicate is not None:
            return AppendInfo(duplicate.first_offset, duplicate.last_offset,
                              duplicate.max_timestamp_ms, 1, 0, duplicate=True)
        return self._write(buf, stamped)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Write batches with the leader's offsets and epochs; offsets must only grow."""
        headers = self._validate(records)
        first = headers[0]
        if self._is_empty() and first.base_offset < self.log_end_offset <= first.last_offset:
            # the leader's log starts inside this batch: take it whole, keep our log start
            log_start = self.log_start_offset
            self.truncate_fully_and_start_at(first.base_offset)
            self.log_start_offset = log_start
        expected, gaps = self.log_end_offset, False
        for header in headers:
            gap = header.base_offset > expected and (self.config.compact
                                                     or self.offset_gaps_allowed)
            if header.base_offset != expected and not gap:
                raise OffsetsNotIncreasing(
                    f"batch at offset {header.base_offset} where {expected} was expected (the "
                    f"log end offset {self.log_end_offset}, or the previous batch's next offset)")
            gaps = gaps or gap
            expected = header.next_offset
        if gaps:
            self.allow_offset_gaps()  # the leader's log was compacted
        return self._write(records, _positions(headers))

    def _is_empty(self) -> bool:
        return self.log_start_offset == self.log_end_offset

    def _validate(self, records: bytes | bytearray | memoryview) -> list[BatchHeader]:
        if len(records) == 0:
            raise CorruptRecords("no record batches to append")
        if len(records) > self.config.segment_bytes:
            raise RecordTooLarge(f"{len(records)} bytes of batches is above segment_bytes "
                                 f"{self.config.segment_bytes}")
        try:
            return check_all(records)  # also: 0 <= last_offset_delta <= int32 max, so a batch
        except CorruptBatch as e:      # always fits a segment that starts at its base offset
            raise CorruptRecords(f"refused batches: {e}") from None

    def _write(self, buf: bytes | bytearray | memoryview,
               stamped: list[tuple[int, BatchHeader]]) -> AppendInfo:
        first, last = stamped[0][1], stamped[-1][1]
        try:
            self._maybe_roll(len(buf), first.base_offset, last.last_offset)
            for _, header in stamped:
                if header.partition_leader_epoch >= 0:
                    self.epoch_cache.assign(header.partition_leader_epoch, header.base_offset)
            self.active_segment.append(buf, stamped)
        except OSError as exc:  # nothing of the batches stays (Segment.append cuts it off)
            raise self.write_failed(f"{len(buf)} bytes at offset {first.base_offset} to "
                                    f"{self.directory}", exc) from None
        if self.disk is not None:
            self.disk.succeeded()
        for pos, header in stamped:
            marker = _marker_of(buf, pos, header) if header.is_control else None
            aborted = self.producer_state.update(header, marker)
            if aborted is not None:  # never fails: kept in memory until the file takes it
                self.active_segment.txn_index.append(aborted)
            self._unflushed_messages += header.record_count
        if self.on_unflushed is not None:
            self.on_unflushed(self)
        if self.auto_flush and self.flush_due():
            with contextlib.suppress(DiskWriteFailed, DescriptorsExhausted):  # the batches are
                # in: a flush comes again
                self.flush()
        return AppendInfo(first.base_offset, last.last_offset,
                          max(h.max_timestamp for _, h in stamped), len(stamped), len(buf))

    # --- rolling ---

    def _roll_reason(self, append_bytes: int, last_offset: int) -> str | None:
        active = self.active_segment
        if not active.can_hold_offset(last_offset):
            return f"offset {last_offset} does not fit relative to {active.base_offset}"
        if active.size_bytes == 0:
            return None
        if active.size_bytes + append_bytes > self.config.segment_bytes:
            return "segment_bytes"
        if active.rolling_age_ms(self.clock()) > self.config.segment_ms:
            return "segment_ms"
        if active.indexes_full():
            return "index full"
        return None

    def _maybe_roll(self, append_bytes: int, first_offset: int, last_offset: int) -> None:
        reason = self._roll_reason(append_bytes, last_offset)
        if reason is not None:
            self.roll(max(first_offset, self.log_end_offset), reason)

    def roll(self, base_offset: int | None = None, reason: str = "asked") -> Segment:
        """Start a new active segment at base_offset (default: the log end)."""
        base = self.log_end_offset if base_offset is None else base_offset
        assert base >= self.log_end_offset, f"roll at {base} below the log end"
        old = self.active_segment
        if old.size_bytes == 0:
            if base == old.base_offset:
                return old
            self._segments.pop().delete()
            self._bases.pop()
        else:
            old.on_roll()
            self._take_snapshot(sync=False)  # fsynced by the next flush
        segment = self._add_segment(base)
        log.info("%s: rolled a new segment at offset %d (%s)", self.directory, base, reason)
        return segment

    def _add_segment(self, base: int) -> Segment:
        segment = Segment(self.directory, base, self.config, self.clock(), files=self.files)
        segment.offset_gaps_allowed = self.offset_gaps_allowed
        assert segment.size_bytes == 0 and os.fstat(segment._fd).st_size == 0, \
            f"{segment.log_path} already holds data"
        self._segments.append(segment)
        self._bases.append(base)
        self._dir_dirty = True
        segment.dirty = True
        return segment

    # --- compaction (cleaner.py) ---

    def allow_offset_gaps(self) -> None:
        """From now on this log may hold offset gaps; durable before the first one lands."""
        if self.offset_gaps_allowed:
            return
        write_atomically(os.path.join(self.directory, OFFSET_GAPS_FILE), b"")
        self.offset_gaps_allowed = True
        for segment in self._segments:
            segment.offset_gaps_allowed = True
        log.info("%s: offset gaps allowed from now on (compacted)", self.directory)

    @property
    def generation(self) -> int:
        """Bumped by every truncation at the end (what the cleaner read may be gone)."""
        return self._generation

    def replace_segments(self, old: list[Segment], sizes: list[int], cleaned_base: int,
                         generation: int) -> bool:
        """Swap the cleaner's fsynced `<cleaned_base>.*.cleaned` files in for the consecutive
        closed segments old (of the sizes given), in one step for readers. False, and the cleaned
        files removed, if the log changed since `generation` (truncated, segments deleted)."""
        first = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
        unchanged = (generation == self._generation
                     and first is not None and first + len(old) < len(self._segments)
                     and all(a is b and a.size_bytes == size for a, b, size
                             in zip(old, self._segments[first:first + len(old)], sizes,
                                    strict=True))
                     and old[0].base_offset == cleaned_base)
        if not unchanged:
            remove_cleaned(self.directory, cleaned_base)
            return False
        assert first is not None
        self.allow_offset_gaps()
        for segment in old:  # the cache names files by path, and the swap renames them
            segment.close()
        deleted = swap_in(self.directory, cleaned_base, [s.base_offset for s in old])
        cleaned = Segment(self.directory, cleaned_base, self.config, self.clock(),
                          files=self.files)
        cleaned.offset_gaps_allowed = True
        cleaned.load()
        if cleaned.next_offset != old[-1].next_offset:
            raise CorruptLog(f"{cleaned.log_path}: cleaned segment ends at {cleaned.next_offset}, "
                             f"the segments it replaced at {old[-1].next_offset}")
        self._segments[first:first + len(old)] = [cleaned]
        self._bases[first:first + len(old)] = [cleaned_base]
        for path in deleted:
            os.unlink(path)
        return True

    # --- flushing ---

    @property
    def has_unflushed(self) -> bool:
        """Something awaits a flush (flush_due says whether it is due)."""
        return self._unflushed_messages > 0 or self._dir_dirty_flag

    def flush_due(self) -> bool:
        if self._unflushed_messages == 0 and not self._dir_dirty:
            return False
        return (self._unflushed_messages >= self.config.flush_messages
                or self.clock() - self._last_flush_ms >= self.config.flush_ms)

    def begin_flush(self) -> FlushJob:
        """Write pending index entries and capture what needs an fsync, up to the log end now."""
        fds: list[int] = []
        start = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
        try:
            for segment in self._segments[start:]:
                if segment.dirty:
                    fds.extend(segment.begin_flush())
            fds.extend(self.snapshots.take_unsynced())
        except OSError as exc:  # writing index entries out, or no descriptor: the segments
            for fd in fds:      # stay dirty
                os.close(fd)
            raise self.write_failed(f"index entries to {self.directory}", exc) from None
        dirs = [self.directory] if self._dir_dirty else []
        self._dir_dirty = False
        self._unflushed_messages = 0
        self._last_flush_ms = self.clock()
        return FlushJob(self.log_end_offset, self._generation, fds, dirs)

    def end_flush(self, job: FlushJob) -> None:
        """After job.run(): move the recovery point, unless the log was truncated meanwhile."""
        if job.generation == self._generation:
            self.recovery_point = max(self.recovery_point, min(job.end_offset,
                                                               self.log_end_offset))

    def flush_not_done(self, job: FlushJob, exc: OSError) -> DescriptorsExhausted:
        """job.run() failed for want of a descriptor (opening a folder to fsync it: every file
        of the job was fsynced before): the folder is flushed again next time, the recovery
        point stays. The error to raise or report."""
        assert is_exhaustion(exc), exc
        if job.dirs:
            self._dir_dirty = True
        return self._no_descriptor("a flush", exc)

    def flush(self) -> None:
        job = self.begin_flush()
        try:
            job.run()
        except OSError as exc:
            if not is_exhaustion(exc):
                raise
            raise self.flush_not_done(job, exc) from None
        self.end_flush(job)

    def maybe_flush(self) -> bool:
        if self.flush_due():
            self.flush()
            return True
        return False

    # --- reading ---

    def _check_range(self, offset: int) -> None:
        if not self.log_start_offset <= offset <= self.log_end_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)

    def read(self, offset: int, bytes_max: int, offset_max: int | None = None) -> bytes:
        """Whole batches from the one holding offset, up to bytes_max but at least one, none
        starting at or after offset_max (e.g. the high watermark). Empty at the log end."""
        self._check_range(offset)
        assert bytes_max >= 0
        if offset == self.log_end_offset:
            return b""
        start = bisect.bisect_right(self._bases, offset) - 1
        try:
            for segment in self._segments[max(start, 0):]:
                data = segment.read(offset, bytes_max, offset_max)
                if data:
                    return data
        except OSError as exc:
            raise self._no_descriptor(f"a read at offset {offset}", exc) from None
        return b""

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after timestamp_ms, or None.
        -1 (latest) and -2 (earliest) answer the log end and start offsets."""
        if timestamp_ms == LATEST_TIMESTAMP:
            return self.log_end_offset, -1
        if timestamp_ms == EARLIEST_TIMESTAMP:
            return self.log_start_offset, -1
        start = max(bisect.bisect_right(self._bases, self.log_start_offset) - 1, 0)
        try:
            for segment in self._segments[start:]:
                if segment.max_timestamp_ms < timestamp_ms:
                    continue
                found = segment.find_by_timestamp(timestamp_ms, self.log_start_offset)
                if found is not None:
                    return self._record_at_timestamp(segment, *found, timestamp_ms)
        except OSError as exc:
            raise self._no_descriptor(f"a search for timestamp {timestamp_ms}", exc) from None
        return None

    def _record_at_timestamp(self, segment: Segment, position: int, header: BatchHeader,
                             timestamp_ms: int) -> tuple[int, int]:
        try:
            _, records = decode_batch(segment.read_batch(position, header))
        except CorruptBatch as e:
            raise CorruptLog(f"{segment.log_path} at position {position}: {e}",
                             cut_offset=header.base_offset) from None
        for record in records:
            if record.offset >= self.log_start_offset and record.timestamp >= timestamp_ms:
                return record.offset, record.timestamp
        # a producer may claim a max timestamp no record has: answer the batch, as Kafka would
        return max(header.base_offset, self.log_start_offset), header.max_timestamp

    def aborted_in(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions holding offsets in [start, end), from the .txnindex files
        of the segment holding start and the later ones, as Kafka walks them: until an entry
        says that every transaction starting below end had ended (its last stable offset), or
        the log's end. Segments whose entries cannot hold such offsets are skipped unread.
        CorruptLog if a .txnindex cannot be read (its entries are never guessed)."""
        found: list[AbortedTxn] = []
        first = max(bisect.bisect_right(self._bases, start) - 1, 0)
        for segment in self._segments[first:]:
            index = segment.txn_index
            if index.last_offset >= start and index.first_offset_min < end:
                try:
                    txns, complete = index.collect(start, end)
                except OSError as exc:
                    if is_exhaustion(exc):
                        raise self._no_descriptor(f"{index.path}", exc) from None
                    raise CorruptLog(f"{index.path}: cannot be read: {exc}") from None
                found += txns
                if complete:
                    break
            elif index.last_stable_offset_max >= end:
                break
        return found

    def _producer_batches_from(self, offset: int
                               ) -> Iterator[tuple[Segment, BatchHeader, Marker | None]]:
        """(segment, header, marker of a control batch) of the batches whose last offset is at
        or above offset: what the producer state is rebuilt from. A control batch whose marker
        does not read is taken as ending nothing (its CRC is checked when it is read for a
        client)."""
        start = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        for segment in self._segments[start:]:
            if segment.next_offset <= offset:
                continue
            position, cut = _replay_position(segment, offset)
            for pos, header in segment.headers(position, cut):
                if header.last_offset < offset:
                    continue
                marker = None
                if header.is_control:
                    try:
                        marker = read_marker(segment.read_batch(pos, header))
                    except CorruptBatch:
                        log.warning("%s: the control batch at offset %d holds no transaction "
                                    "marker", self.directory, header.base_offset)
                yield segment, header, marker

    def _headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batches whose last offset is at or above offset."""
        for segment in self._segments:
            if segment.next_offset <= offset:
                continue
            for _, header in segment.headers():
                if header.last_offset >= offset:
                    yield header

    # --- truncating and deleting ---

    def truncate_to(self, offset: int,
                    why: str = "truncated to the leader's log (an unclean election)") -> None:
        """Remove every batch holding an offset at or above offset (a batch holding offset goes
        whole). The epoch cache and producer state follow. `why` is what a cut of committed
        records is recorded with (truncations.py)."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset >= self.log_end_offset:
            return
        try:
            self._truncate_to(offset, why)
        except OSError as exc:  # no descriptor to cut with: said, retried by the caller
            raise self._no_descriptor("truncation", exc) from exc

    def _truncate_to(self, offset: int, why: str) -> None:
        old_end = self.log_end_offset
        self._note_committed_cut(offset, why)
        if offset < self._bases[0]:
            self._truncate_fully_and_start_at(offset)
            return
        self._generation += 1
        if self.snapshots.delete_outside(0, offset):  # durable before new batches land there
            self._dir_dirty = True
        while len(self._segments) > 1 and self._bases[-1] > offset:
            self._segments.pop().delete()
            self._bases.pop()
            self._dir_dirty = True
        self.active_segment.truncate_to(offset)
        if self._dir_dirty:
            fsync_dir(self.directory)
            self._dir_dirty = False
        self._after_truncation()
        log.info("%s: truncated from offset %d to %d", self.directory, old_end,
                 self.log_end_offset)

    def _note_committed_cut(self, offset: int, why: str) -> None:
        """Cutting from offset loses committed records if our high watermark is above it."""
        end = min(self.high_watermark, self.log_end_offset)
        if offset < end and self.truncations is not None:
            self.truncations.record(os.path.basename(self.directory), offset, end, why)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every batch and start again, empty, at offset (a follower far behind)."""
        try:
            self._truncate_fully_and_start_at(offset)
        except OSError as exc:  # as truncate_to
            raise self._no_descriptor("truncation", exc) from exc

    def _truncate_fully_and_start_at(self, offset: int) -> None:
        old_end = self.log_end_offset
        self._generation += 1
        for segment in self._segments:
            segment.delete()
        self._segments.clear()
        self._bases.clear()
        self._add_segment(offset)
        self.snapshots.delete_all()
        fsync_dir(self.directory)
        self._dir_dirty = False
        self.log_start_offset = offset
        self.epoch_cache.clear()
        self._after_truncation()
        log.info("%s: truncated fully from offset %d, now starting at %d", self.directory,
                 old_end, offset)

    def _after_truncation(self) -> None:
        end = self.log_end_offset
        self.epoch_cache.truncate_from_end(end)
        self.log_start_offset = min(self.log_start_offset, end)
        # never above the end, never below the start (a log started again at a later offset)
        self.high_watermark = max(min(self.high_watermark, end), self.log_start_offset)
        self.recovery_point = min(self.recovery_point, end)
        self._rebuild_producer_state(end)

    def advance_log_start_offset(self, offset: int) -> bool:
        """Make offsets below offset unreadable; delete the segments wholly below it."""
        if offset <= self.log_start_offset:
            return False
        if offset > self.log_end_offset:
            raise OffsetOutOfRange(offset, self.log_start_offset, self.log_end_offset)
        self.log_start_offset = offset
        while len(self._segments) > 1 and self._bases[1] <= offset:
            self._delete_oldest_segment()
        self.epoch_cache.truncate_from_start(offset)
        self.producer_state.truncate_head(offset)
        if self.snapshots.delete_outside(offset, self.log_end_offset):
            self._dir_dirty = True
        self.high_watermark = max(self.high_watermark, offset)
        log.info("%s: log start offset advanced to %d", self.directory, offset)
        return True

    def _delete_oldest_segment(self) -> None:
        segment = self._segments.pop(0)
        self._bases.pop(0)
        segment.delete()
        self._dir_dirty = True
        log.info("%s: deleted segment %d (%d bytes)", self.directory, segment.base_offset,
                 segment.size_bytes)

    def delete_retained_segments(self) -> int:
        """Apply retention_ms and retention_bytes to the non-active segments wholly below the
        high watermark; the number of segments deleted."""
        if not self.config.delete:
            return 0  # cleanup_policy "compact" alone: only the cleaner removes anything
        now_ms = self.clock()
        total_bytes = self.size_bytes
        deleted = 0
        while len(self._segments) > 1 and self._bases[1] <= self.high_watermark:
            oldest = self._segments[0]
            newest_ms = oldest.max_timestamp_ms if oldest.max_timestamp_ms >= 0 \
                else oldest.created_ms
            too_old = self.config.retention_ms >= 0 and \
                now_ms - newest_ms > self.config.retention_ms
            too_big = self.config.retention_bytes >= 0 and \
                total_bytes - oldest.size_bytes >= self.config.retention_bytes
            if not (too_old or too_big):
                break
            total_bytes -= oldest.size_bytes
            if not self.advance_log_start_offset(self._bases[1]):
                self._delete_oldest_segment()
            deleted += 1
        return deleted


def _replay_position(segment: Segment, offset: int) -> tuple[int, int | None]:
    """Where a replay from offset starts in segment, found through its offset index (a replay
    from a snapshot in the active segment reads only the batches after it), and the offset
    there. An index that misleads (segment.find checks the batch it names) makes the replay
    walk from the segment's start instead, which checks every header."""
    if offset <= segment.base_offset:
        return 0, None
    try:
        found = segment.find(offset)
    except CorruptLog:
        return 0, None
    if found is None:
        return segment.size_bytes, None
    return found[0], found[1].base_offset


def _require_keys(records: bytes | bytearray | memoryview, headers: list[BatchHeader],
                  directory: str) -> None:
    """A compacted log keeps the latest record per key, so every record needs one (Kafka): the
    first batch holding records without one is refused, naming each (KIP-467)."""
    partition = os.path.basename(directory)
    for position, _ in _positions(headers):
        refused = [RecordError(index, "Compacted topic cannot accept message without key in "
                                      f"topic partition {partition}")
                   for index, record in enumerate(_records_at(records, position))
                   if record.key is None]
        if refused:
            raise InvalidRecord("records without a key in a compacted topic", refused)


def _records_at(records: bytes | bytearray | memoryview, position: int) -> list[Record]:
    try:
        return decode_batch(records, position)[1]
    except CorruptBatch as e:
        raise CorruptRecords(f"refused batches: {e}") from None


def _marker_of(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> Marker:
    try:
        return read_marker(memoryview(buf)[pos:pos + header.size])
    except CorruptBatch as exc:
        raise CorruptRecords(f"control batch at offset {header.base_offset}: {exc}") from None


def _recompressed(records: bytes | bytearray | memoryview, headers: list[BatchHeader],
                  codec: int) -> tuple[bytearray, list[BatchHeader]]:
    """The batches with their records stored with codec (the topic's compression.type); control
    batches and those already in codec are copied as they are."""
    out = bytearray()
    pos = 0
    for header in headers:
        if header.compression == codec or header.is_control:
            out += records[pos:pos + header.size]
        else:
            try:
                out += recompress(records, pos, header, codec)
            except CorruptBatch as exc:
                raise CorruptRecords(f"batch at position {pos} does not decompress: {exc}") \
                    from None
        pos += header.size
    return out, check_all(out)


def _check_timestamps(records: bytes | bytearray | memoryview, position: int,
                      header: BatchHeader, now_ms: int, config: LogConfig) -> None:
    """message.timestamp.before/after.max.ms on a CreateTime batch, record by record as Kafka
    checks them. The batch's first record (base_timestamp) and its largest timestamp bound every
    record of batches written by Kafka's producers (deltas from the first record are not
    negative), so only a batch outside those bounds is decoded, to name its records outside."""
    if header.is_control:
        return
    low_ms = now_ms - config.timestamp_before_max_ms
    high_ms = now_ms + config.timestamp_after_max_ms
    if low_ms <= header.base_timestamp and header.max_timestamp <= high_ms:
        return
    refused = [RecordError(index, _timestamp_problem(record.timestamp, now_ms, config))
               for index, record in enumerate(_records_at(records, position))
               if record.timestamp != NO_TIMESTAMP and not low_ms <= record.timestamp <= high_ms]
    if refused:
        raise InvalidTimestamp("timestamps out of range", refused)


def _timestamp_problem(timestamp_ms: int, now_ms: int, config: LogConfig) -> str:
    if timestamp_ms < now_ms:
        return (f"timestamp {timestamp_ms} is {now_ms - timestamp_ms} ms in the past; "
                f"message.timestamp.before.max.ms is {config.timestamp_before_max_ms}")
    return (f"timestamp {timestamp_ms} is {timestamp_ms - now_ms} ms in the future; "
            f"message.timestamp.after.max.ms is {config.timestamp_after_max_ms}")


def _stamp(buf: bytearray | memoryview, headers: list[BatchHeader], first_offset: int,
           leader_epoch: int) -> list[tuple[int, BatchHeader]]:
    """Stamp checked batches with consecutive offsets from first_offset and leader_epoch, in
    place (both fields lie outside the CRC, so the checks made still hold); (position, stamped
    header) of each."""
    out, pos, offset = [], 0, first_offset
    for header in headers:
        stamp(buf, pos, offset, leader_epoch)
        out.append((pos, header._replace(base_offset=offset, partition_leader_epoch=leader_epoch)))
        offset += header.last_offset_delta + 1
        pos += header.size
    return out


def _positions(headers: list[BatchHeader]) -> list[tuple[int, BatchHeader]]:
    out, pos = [], 0
    for header in headers:
        out.append((pos, header))
        pos += header.size
    return out
