"""The transaction coordinator's state, one `TxnMetadata` per transactional id: a pure state
machine (no I/O, no clock: `now_ms` is passed in) that decides what each request does and which
state must be written to `__transaction_state` before it is answered.

Theory of operation (KIP-98; Kafka's transaction protocol version 1):
- A request is checked against the id's state and answered at once (an error), or it yields a
  transition: the new state, which the caller appends to the transaction log and, once that is
  durable, applies with `written()` (or drops with `write_failed()`) before answering. While a
  transition is being written the id is busy: every other request gets CONCURRENT_TRANSACTIONS
  (retriable), as Kafka's pending state does.
- States and their moves are a table, `PREVIOUS` (Kafka's TransactionState.validPreviousStates,
  for the states we write): a transition from a state not listed for the new one is a bug and
  stops the process, checked at every move (`_begin`, where a transition is decided, before
  anything is written). Kafka's numbers are log_records.Status.
      Empty    --AddPartitions-->         Ongoing
      Ongoing  --EndTxn(commit)-->        PrepareCommit --markers--> CompleteCommit
      Ongoing  --EndTxn(abort)-->         PrepareAbort  --markers--> CompleteAbort
      Empty/Complete* --InitProducerId--> Empty (epoch + 1)
      Ongoing  --InitProducerId, or the timeout--> PrepareAbort (epoch + 1: the old producer is
               fenced, then its transaction is aborted)
  After a Prepare* state is written the caller sends the COMMIT or ABORT markers to the
  transaction's partitions (WriteTxnMarkers) and then writes `markers_written()`'s Complete*.
  A new coordinator loading the log finds ids left in Prepare* (`unfinished()`) and finishes
  them the same way: the two-phase commit survives the coordinator's death. Loading is not a
  move: the log says what each id is.
- Fencing, as the partition leader fences stale leader epochs (seeds 000, 001): a request naming
  another producer id than the id's gets INVALID_PRODUCER_ID_MAPPING, an older producer epoch
  PRODUCER_FENCED. InitProducerId bumps the epoch; at Kafka's last epoch (32766) the id gets a
  new producer id at epoch 0.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from epochlog.protocol.error_codes import ErrorCode as E

from .log_records import Status, TxnLogEntry

EPOCH_MAX = 32766  # Kafka's Short.MAX_VALUE - 1: past it, a new producer id
DEFAULT_TIMEOUT_MAX_MS = 900_000  # transaction.max.timeout.ms
PREPARED = (Status.PREPARE_COMMIT, Status.PREPARE_ABORT)
COMPLETED = (Status.COMPLETE_COMMIT, Status.COMPLETE_ABORT)
S = Status
# New state -> the states it may be entered from (Kafka's validPreviousStates; Dead and
# PrepareEpochFence are Kafka's and never written here: an expiry writes a tombstone instead).
PREVIOUS: dict[Status, frozenset[Status]] = {
    S.EMPTY: frozenset({S.EMPTY, *COMPLETED}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, *COMPLETED}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, *COMPLETED}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


@dataclass
class TxnMetadata:
    transactional_id: str
    entry: TxnLogEntry  # the state last written to the log
    pending: TxnLogEntry | None = None  # a transition being written

    @property
    def status(self) -> Status:
        return self.entry.status


@dataclass(frozen=True)
class Answer:
    """What a request does: `write`, if any, is appended to the log first (and `written()`);
    then the request is answered with `error` (and, for InitProducerId without an error,
    producer_id/producer_epoch). An InitProducerId that fences an ongoing transaction has both:
    the abort is written and the producer is told CONCURRENT_TRANSACTIONS, to retry."""
    error: int = 0
    write: TxnLogEntry | None = None
    producer_id: int = -1
    producer_epoch: int = -1


class TxnState:
    def __init__(self, new_producer_id: Callable[[], int],
                 timeout_max_ms: int = DEFAULT_TIMEOUT_MAX_MS) -> None:
        self.new_producer_id = new_producer_id
        self.timeout_max_ms = timeout_max_ms
        self.ids: dict[str, TxnMetadata] = {}

    # ------------------------------------------------------------------------- loading
    def load(self, transactional_id: str, entry: TxnLogEntry | None) -> None:
        """One record of the log, in log order (None: a tombstone)."""
        if entry is None:
            self.ids.pop(transactional_id, None)
        else:
            self.ids[transactional_id] = TxnMetadata(transactional_id, entry)

    def unfinished(self) -> list[str]:
        """Ids whose commit or abort was decided but whose markers may not all be written."""
        return sorted(t for t, m in self.ids.items() if m.status in PREPARED)

    # ------------------------------------------------------------------------- requests
    def init_producer_id(self, transactional_id: str, timeout_ms: int, now_ms: int,
                         expected: tuple[int, int] | None = None) -> Answer:
        """expected: the (producer id, epoch) a producer names to have its own epoch bumped
        (InitProducerId v3+, KIP-360); any other than the id's current one is fenced."""
        if not 0 < timeout_ms <= self.timeout_max_ms:
            return Answer(E.INVALID_TRANSACTION_TIMEOUT)
        m = self.ids.get(transactional_id)
        if expected is not None and (m is None or m.entry.producer_epoch < 0 or (
                m.entry.producer_id, m.entry.producer_epoch) != expected):
            return Answer(E.PRODUCER_FENCED if m is not None else E.INVALID_PRODUCER_ID_MAPPING)
        if m is None:
            pid = self.new_producer_id()
            entry = TxnLogEntry(pid, 0, timeout_ms, Status.EMPTY, frozenset(), now_ms, -1)
            self.ids[transactional_id] = m = TxnMetadata(transactional_id, entry)
            m.entry = replace(entry, producer_epoch=-1)  # nothing written yet
            return self._begin(m, entry, pid, 0)
        if m.pending is not None or m.status not in (Status.EMPTY, Status.ONGOING, *COMPLETED):
            return Answer(E.CONCURRENT_TRANSACTIONS)
        bumped = m.entry.producer_epoch + 1
        if m.status is Status.ONGOING:  # fence the old producer, then abort what it left open
            abort = replace(m.entry, producer_epoch=bumped, status=Status.PREPARE_ABORT,
                            last_update_ms=now_ms)
            return replace(self._begin(m, abort), error=E.CONCURRENT_TRANSACTIONS)
        pid = m.entry.producer_id
        if bumped > EPOCH_MAX:
            pid, bumped = self.new_producer_id(), 0
        entry = TxnLogEntry(pid, bumped, timeout_ms, Status.EMPTY, frozenset(), now_ms, -1)
        return self._begin(m, entry, pid, bumped)

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                       partitions: Iterable[tuple[str, int]], now_ms: int) -> Answer:
        """AddPartitionsToTxn, and AddOffsetsToTxn with the group's offsets partition."""
        m, error = self._producer(transactional_id, producer_id, producer_epoch)
        if m is None:
            return Answer(error)
        if m.status in PREPARED or m.status is Status.PREPARE_EPOCH_FENCE:
            return Answer(E.CONCURRENT_TRANSACTIONS)
        if m.status is Status.DEAD:
            return Answer(E.INVALID_TXN_STATE)
        wanted = frozenset(partitions)
        if not wanted or m.status is Status.ONGOING and wanted <= m.entry.partitions:
            return Answer()  # a retry, or nothing named: nothing to write (no empty
            # transaction is opened, which would only time out and fence its producer)
        ongoing = m.status is Status.ONGOING
        return self._begin(m, replace(
            m.entry, status=Status.ONGOING, last_update_ms=now_ms,
            partitions=(m.entry.partitions if ongoing else frozenset()) | wanted,
            start_ms=m.entry.start_ms if ongoing else now_ms))

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, now_ms: int) -> Answer:
        m, error = self._producer(transactional_id, producer_id, producer_epoch)
        if m is None:
            return Answer(error)
        wanted_prepare = Status.PREPARE_COMMIT if commit else Status.PREPARE_ABORT
        wanted_complete = Status.COMPLETE_COMMIT if commit else Status.COMPLETE_ABORT
        if m.status is Status.ONGOING:
            return self._begin(m, replace(m.entry, status=wanted_prepare, last_update_ms=now_ms))
        if m.status is wanted_complete:
            return Answer()  # a retry of the request that ended it
        if m.status is wanted_prepare:
            return Answer(E.CONCURRENT_TRANSACTIONS)  # its markers are being written
        return Answer(E.INVALID_TXN_STATE)  # Empty, the other outcome, Dead, fencing

    # ------------------------------------------------------------------ the coordinator's
    def markers_written(self, transactional_id: str, now_ms: int) -> Answer:
        """Every marker of a Prepare* transaction is written: its Complete* state to write."""
        m = self.ids.get(transactional_id)
        if m is None or m.pending is not None or m.status not in PREPARED:
            return Answer(E.INVALID_TXN_STATE)
        done = Status.COMPLETE_COMMIT if m.status is Status.PREPARE_COMMIT else \
            Status.COMPLETE_ABORT
        return self._begin(m, replace(m.entry, status=done, partitions=frozenset(),
                                      last_update_ms=now_ms))

    def timed_out(self, now_ms: int) -> list[str]:
        """Ongoing transactions older than their timeout, not busy."""
        return sorted(t for t, m in self.ids.items()
                      if m.status is Status.ONGOING and m.pending is None
                      and now_ms - m.entry.start_ms > m.entry.timeout_ms)

    def abort_timed_out(self, transactional_id: str, now_ms: int) -> Answer:
        """The coordinator aborts a transaction past its timeout, bumping the epoch so that its
        producer, if it is still there, is fenced (PRODUCER_FENCED) rather than committing."""
        m = self.ids.get(transactional_id)
        if m is None or m.pending is not None or m.status is not Status.ONGOING:
            return Answer(E.INVALID_TXN_STATE)
        return self._begin(m, replace(m.entry, producer_epoch=m.entry.producer_epoch + 1,
                                      status=Status.PREPARE_ABORT, last_update_ms=now_ms))

    # ------------------------------------------------------------------------- the log
    def written(self, transactional_id: str, entry: TxnLogEntry) -> None:
        """The transition `entry` is durable in the log: it is the id's state now."""
        m = self.ids[transactional_id]
        assert m.pending == entry, (m.pending, entry)
        m.entry, m.pending = entry, None

    def write_failed(self, transactional_id: str) -> None:
        """The append failed: the id keeps its state (a new one, never written, goes)."""
        m = self.ids.get(transactional_id)
        if m is None:
            return
        m.pending = None
        if m.entry.producer_epoch < 0:
            del self.ids[transactional_id]

    # ------------------------------------------------------------------------- expiration
    def expired(self, now_ms: int, expiration_ms: int) -> list[str]:
        """Ids with no transaction (Empty, Complete*), not busy, and untouched for
        expiration_ms (transactional.id.expiration.ms)."""
        return sorted(t for t, m in self.ids.items()
                      if m.pending is None and m.entry.producer_epoch >= 0
                      and m.status in (Status.EMPTY, *COMPLETED)
                      and now_ms - m.entry.last_update_ms >= expiration_ms)

    def begin_expire(self, transactional_id: str) -> bool:
        """Mark an expired id busy while its tombstone is written (requests for it get
        CONCURRENT_TRANSACTIONS meanwhile); False if it is no longer expirable."""
        m = self.ids.get(transactional_id)
        if m is None or m.pending is not None or m.status not in (Status.EMPTY, *COMPLETED):
            return False
        m.pending = m.entry
        return True

    def expire_written(self, transactional_id: str) -> None:
        """The tombstone is durable: the id is forgotten (a later InitProducerId starts it
        afresh with a new producer id)."""
        self.ids.pop(transactional_id, None)

    # ------------------------------------------------------------------------- helpers
    def _producer(self, transactional_id: str, producer_id: int, producer_epoch: int
                  ) -> tuple[TxnMetadata | None, int]:
        m = self.ids.get(transactional_id)
        if m is None or m.entry.producer_epoch < 0 or m.entry.producer_id != producer_id:
            return None, E.INVALID_PRODUCER_ID_MAPPING
        if producer_epoch != m.entry.producer_epoch:
            return None, E.PRODUCER_FENCED
        if m.pending is not None:
            return None, E.CONCURRENT_TRANSACTIONS
        return m, 0

    @staticmethod
    def _begin(m: TxnMetadata, entry: TxnLogEntry, producer_id: int = -1,
               producer_epoch: int = -1) -> Answer:
        """A transition decided: checked against `PREVIOUS`, then the id is busy until it is
        written (or fails)."""
        if m.status not in PREVIOUS[entry.status]:
            raise AssertionError(f"transactional id {m.transactional_id}: {m.status.kafka_name} "
                                 f"-> {entry.status.kafka_name} is not a valid transition")
        m.pending = entry
        return Answer(0, entry, producer_id, producer_epoch)
