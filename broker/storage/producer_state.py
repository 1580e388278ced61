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

What read_committed consumers need (KIP-98): the aborted transactions, which `update` hands back
as each ABORT marker is replayed, with the last stable offset of that moment (the earliest other
transaction still open, else the marker's offset + 1), for the log to write in the marker's
segment's .txnindex (txn_index.py): they are kept on disk, not here; and
`first_unstable_offset(high_watermark)`: where the earliest transaction not yet settled starts:
one still open, or one whose marker is not yet below the high watermark (a leader that dies
before its followers hold the marker leaves the transaction open on the next leader). The last
stable offset is the smaller of it and the high watermark.

The state is a function of the batches in [log start, log end): `truncate_head` drops what falls
below the log start (and a producer left without batches: it may then start again at any
sequence, as in Kafka), and after a truncation at the end the log rebuilds the state from its
latest snapshot at or below the new end (producer_snapshots.py, `load`) and the batches after it
(reading the record of each marker for its type and coordinator epoch).
"""

from __future__ import annotations

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
from .txn_index import AbortedTxn

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


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerEntry] = {}
        self._open: dict[int, int] = {}  # producer id -> first offset of its open transaction
        self._settling: list[tuple[int, int]] = []  # (first offset, marker offset), in order

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

    def update(self, header: BatchHeader, marker: Marker | None = None) -> AbortedTxn | None:
        """Record a batch that is now in the log (a control batch with its marker; one
        without a marker ends nothing); the transaction it aborted, if it is an ABORT marker."""
        if not _is_idempotent(header):
            return None
        pid = header.producer_id
        entry = self.producers.get(pid)
        base = entry or ProducerEntry(header.producer_epoch, ())
        if header.is_control:
            if marker is None:
                return None
            first = base.txn_first_offset if base.txn_first_offset >= 0 else header.base_offset
            self.producers[pid] = base.with_marker(header, marker)
            self._open.pop(pid, None)
            self._settling.append((first, header.base_offset))
            if marker.commit:
                return None
            stable = min(self._open.values(), default=header.base_offset + 1)
            return AbortedTxn(pid, first, header.base_offset, stable)
        self.producers[pid] = updated = base.with_batch(header)
        if updated.txn_first_offset >= 0:
            self._open[pid] = updated.txn_first_offset
        return None

    def load(self, producers: dict[int, ProducerEntry], log_start_offset: int = 0) -> None:
        """Start again from a snapshot's state (the transactions open are the entries'). A
        snapshot taken before the log start moved may name producers whose batches have all
        gone since: they are left out, as truncate_head would have dropped them (a producer
        that never had a batch here, only a marker, keeps its epoch)."""
        self.clear()
        self.producers = {pid: e for pid, e in producers.items()
                          if not (e.batches and _gone_below(e, log_start_offset))}
        self._open = {pid: e.txn_first_offset for pid, e in producers.items()
                      if e.txn_first_offset >= 0}

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

    def last_sequence(self, producer_id: int) -> int:
        entry = self.producers.get(producer_id)
        return entry.last_sequence if entry else NO_SEQUENCE

    def truncate_head(self, log_start_offset: int) -> None:
        """Forget the batches now below the log start, and the producers left with none, as
        Kafka's truncateHead does: a producer whose every batch went (DeleteRecords, retention)
        is unknown from then on, so its next batch is taken at any sequence, even inside a
        transaction it had open (whose start went with its batches; its next batch opens it
        again where it lands). Only a transaction still starting at or above the log start
        keeps a producer without batches (a coordinator's writes carry no sequence)."""
        for pid, entry in list(self.producers.items()):
            if _gone_below(entry, log_start_offset):
                del self.producers[pid]
                self._open.pop(pid, None)
                continue
            kept = tuple(b for b in entry.batches if b.last_offset >= log_start_offset)
            if len(kept) != len(entry.batches):
                self.producers[pid] = entry._replace(batches=kept)

    def clear(self) -> None:
        self.producers.clear()
        self._open.clear()
        self._settling.clear()


def _gone_below(entry: ProducerEntry, log_start_offset: int) -> bool:
    """Nothing of the producer is left at or above the log start: no batch, no transaction."""
    last = entry.batches[-1].last_offset if entry.batches else -1
    return last < log_start_offset and entry.txn_first_offset < log_start_offset


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
