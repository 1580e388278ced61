"""Producer state for idempotence: per producer id, its epoch and its last few batches' sequences.

Kafka's rules, checked on the leader before an append (`check`), replayed without checks on the
follower path and when the log is reopened (`update`):
- an epoch below the producer's current one is refused (InvalidProducerEpoch);
- a batch equal (same epoch, first and last sequence) to one of the producer's last 5 is a retry:
  it is not written again, and its original offsets are answered (Kafka only deduplicates a request
  holding one batch; inside a larger request it is DuplicateSequence);
- a new epoch must start at sequence 0; within an epoch the first sequence must follow the last
  one (wrapping at int32 max); a producer we know nothing of may start anywhere.

Transactions (KIP-98): a producer's first transactional batch opens its transaction here
(`txn_first_offset`); a transaction marker (a control batch, written by WriteTxnMarkers from the
transaction coordinator) closes it, and remembers the coordinator's epoch: a marker from an older
coordinator is refused (CoordinatorFenced), as a stale leader epoch is. A producer whose
transaction is open may not write outside it (InvalidTxnState). Markers carry no sequence and do
not count as the producer's batches.

What read_committed consumers need (KIP-98): `aborted` lists every aborted transaction still in
the log, (producer id, first offset, marker offset), in marker order, as Kafka's .txnindex files
do; `first_unstable_offset(high_watermark)` is where the earliest transaction not yet settled
starts: one still open, or one whose marker is not yet below the high watermark (a leader that
dies before its followers hold the marker leaves the transaction open on the next leader). The
last stable offset is the smaller of it and the high watermark.

The state is a function of the batches in [log start, log end): `truncate_head` drops what falls
below the log start, and after a truncation at the end the log rebuilds the state from its batches
(reading the record of each marker for its type and coordinator epoch).
No snapshot files: rebuilding reads every batch header once (see the storage notes).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import NamedTuple

from epochlog.protocol.batch import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, BatchHeader
from epochlog.protocol.control_records import Marker

from .errors import (
    CoordinatorFenced,
    DuplicateSequence,
    InvalidProducerEpoch,
    InvalidTxnState,
    OutOfOrderSequence,
)

BATCHES_PER_PRODUCER_MAX = 5  # Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN
SEQUENCE_MAX = 2**31 - 1


class BatchMetadata(NamedTuple):
    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp_ms: int


class ProducerEntry(NamedTuple):
    producer_epoch: int
    batches: tuple[BatchMetadata, ...]
    txn_first_offset: int = -1  # where the producer's open transaction starts here; -1: none
    coordinator_epoch: int = -1  # of the last transaction marker

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    def with_batch(self, header: BatchHeader) -> ProducerEntry:
        kept = self.batches if header.producer_epoch == self.producer_epoch else ()
        if header.base_sequence != NO_SEQUENCE:  # a coordinator's transactional write has none
            batch = BatchMetadata(header.base_sequence, header.last_sequence, header.base_offset,
                                  header.last_offset, header.max_timestamp)
            kept = (kept + (batch,))[-BATCHES_PER_PRODUCER_MAX:]
        txn = self.txn_first_offset
        if header.is_transactional and txn < 0:
            txn = header.base_offset
        return ProducerEntry(header.producer_epoch, kept, txn, self.coordinator_epoch)

    def with_marker(self, header: BatchHeader, marker: Marker) -> ProducerEntry:
        kept = self.batches if header.producer_epoch == self.producer_epoch else ()
        return ProducerEntry(header.producer_epoch, kept, -1, marker.coordinator_epoch)


def _is_idempotent(header: BatchHeader) -> bool:
    return header.producer_id != NO_PRODUCER_ID


def _in_sequence(last_sequence: int, first_sequence: int) -> bool:
    return first_sequence == last_sequence + 1 or (first_sequence == 0
                                                   and last_sequence == SEQUENCE_MAX)


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self.aborted: list[AbortedTxn] = []
        self._open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self._settling: list[tuple[int, int]] = []  # (first offset, marker offset), in order
        self._longest_abort = 0  # the most offsets an aborted transaction spans

    def check(self, headers: list[BatchHeader]) -> BatchMetadata | None:
        """Validate a leader append of data batches; the original batch if it is a retry of
        one. Raises the AppendRefused subclass that names the problem. Changes nothing."""
        staged: dict[int, ProducerEntry] = {}
        for header in headers:
            if not _is_idempotent(header):
                continue
            pid = header.producer_id
            entry = staged.get(pid) or self.producers.get(pid)
            duplicate = _check_one(pid, entry, header)
            if duplicate is not None:
                if len(headers) == 1:
                    return duplicate
                raise DuplicateSequence(f"producer {pid}: batch with sequences "
                                        f"{header.base_sequence}..{header.last_sequence} was "
                                        "already written, inside a request of several batches")
            if entry is not None and entry.txn_first_offset >= 0 \
                    and not header.is_transactional:
                raise InvalidTxnState(f"producer {pid}: a batch outside its transaction, open "
                                      f"here since offset {entry.txn_first_offset}")
            staged[pid] = (entry or ProducerEntry(header.producer_epoch, ())).with_batch(header)
        return None

    def check_marker(self, producer_id: int, producer_epoch: int,
                     coordinator_epoch: int) -> None:
        """Validate a transaction marker the leader is about to write."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.producer_epoch:
            raise InvalidProducerEpoch(f"producer {producer_id}: a marker at epoch "
                                       f"{producer_epoch}, older than {entry.producer_epoch}")
        if coordinator_epoch < entry.coordinator_epoch:
            raise CoordinatorFenced(f"producer {producer_id}: a marker from coordinator epoch "
                                    f"{coordinator_epoch}, older than "
                                    f"{entry.coordinator_epoch}")

    def update(self, header: BatchHeader, marker: Marker | None = None) -> None:
        """Record a batch that is now in the log (a control batch with its marker; one
        without a marker ends nothing)."""
        if not _is_idempotent(header):
            return
        pid = header.producer_id
        entry = self.producers.get(pid)
        base = entry or ProducerEntry(header.producer_epoch, ())
        if header.is_control:
            if marker is not None:
                first = base.txn_first_offset if base.txn_first_offset >= 0 \
                    else header.base_offset
                self.producers[pid] = base.with_marker(header, marker)
                self._open.pop(pid, None)
                self._settling.append((first, header.base_offset))
                if not marker.commit:
                    self.aborted.append(AbortedTxn(pid, first, header.base_offset))
                    self._longest_abort = max(self._longest_abort, header.base_offset - first)
            return
        self.producers[pid] = updated = base.with_batch(header)
        if updated.txn_first_offset >= 0:
            self._open[pid] = updated.txn_first_offset

    def update_all(self, batches: Iterable[tuple[BatchHeader, Marker | None]]) -> None:
        for header, marker in batches:
            self.update(header, marker)

    def open_transactions(self) -> dict[int, int]:
        """producer id -> the first offset of its open transaction."""
        return dict(self._open)

    def settle(self, high_watermark: int) -> None:
        """Forget the ended transactions whose marker is below high_watermark (the log calls
        this as its high watermark moves, so that a follower, asked for nothing, keeps few)."""
        if self._settling and self._settling[0][1] < high_watermark:
            self._settling = [s for s in self._settling if s[1] >= high_watermark]

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """Where the earliest transaction not settled below high_watermark starts, if any."""
        self.settle(high_watermark)
        firsts = [first for first, _ in self._settling]
        if self._open:
            firsts.append(min(self._open.values()))
        return min(firsts, default=None)

    def aborted_in(self, start: int, end: int) -> list[AbortedTxn]:
        """The aborted transactions that hold offsets in [start, end). Markers are in offset
        order; one at or past end plus the longest span seen starts at or past end."""
        lo = bisect.bisect_left(self.aborted, start, key=lambda a: a.last_offset)
        hi = bisect.bisect_left(self.aborted, end + self._longest_abort, lo,
                                key=lambda a: a.last_offset)
        return [a for a in self.aborted[lo:hi] if a.first_offset < end]

    def last_sequence(self, producer_id: int) -> int:
        entry = self.producers.get(producer_id)
        return entry.last_sequence if entry else NO_SEQUENCE

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget the batches now below the log start, and producers left with none."""
        if self.aborted and self.aborted[0].last_offset < log_start_offset:
            self.aborted = [a for a in self.aborted if a.last_offset >= log_start_offset]
        for pid, entry in list(self.producers.items()):
            kept = tuple(b for b in entry.batches if b.last_offset >= log_start_offset)
            if not kept and entry.txn_first_offset < 0:
                del self.producers[pid]
            elif len(kept) != len(entry.batches):
                self.producers[pid] = entry._replace(batches=kept)

    def clear(self) -> None:
        self.producers.clear()
        self.aborted.clear()
        self._open.clear()
        self._settling.clear()
        self._longest_abort = 0


def _check_one(pid: int, entry: ProducerEntry | None, header: BatchHeader
               ) -> BatchMetadata | None:
    epoch, first = header.producer_epoch, header.base_sequence
    if entry is None or entry.producer_epoch == NO_PRODUCER_EPOCH:
        return None
    if epoch < entry.producer_epoch:
        raise InvalidProducerEpoch(f"producer {pid}: epoch {epoch} is older than the current "
                                   f"epoch {entry.producer_epoch}")
    if first == NO_SEQUENCE:  # a coordinator's transactional write (TxnOffsetCommit)
        return None
    if epoch != entry.producer_epoch:
        if first != 0:
            raise OutOfOrderSequence(f"producer {pid}: new epoch {epoch} must start at sequence "
                                     f"0, got {first}")
        return None
    for batch in entry.batches:
        if batch.first_sequence == first and batch.last_sequence == header.last_sequence:
            return batch
    if not _in_sequence(entry.last_sequence, first):
        raise OutOfOrderSequence(f"producer {pid} epoch {epoch}: sequence {first} does not "
                                 f"follow the last written sequence {entry.last_sequence}")
    return None
