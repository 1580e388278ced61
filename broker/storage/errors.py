"""Exceptions of the storage engine.

Two kinds, as everywhere in epochlog: operating errors a caller answers with a Kafka error code
(each class carries `error_code`, Kafka's number, and `retriable`), and broken invariants, which are
assertions and stop the process. A refused append never changes what is stored.
"""

from __future__ import annotations

from typing import NamedTuple

# Kafka's error-code numbers, for the handlers that turn these exceptions into responses.
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
MESSAGE_TOO_LARGE = 10
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
TRANSACTION_COORDINATOR_FENCED = 52
KAFKA_STORAGE_ERROR = 56
NOT_LEADER_OR_FOLLOWER = 6
INVALID_RECORD = 87
INVALID_TIMESTAMP = 32
UNKNOWN_SERVER_ERROR = -1


RECORD_ERRORS_SHOWN_MAX = 3  # in the message of a refusal, as Kafka shows them


class RecordError(NamedTuple):
    """One refused record (KIP-467): its index in its batch, and why."""

    batch_index: int
    message: str


class StorageError(Exception):
    """Base of the storage engine's operating errors."""

    error_code = UNKNOWN_SERVER_ERROR
    retriable = False
    record_errors: tuple[RecordError, ...] = ()  # the records that made a batch refused


class OffsetOutOfRange(StorageError):
    """An offset below the log start or above the log end."""

    error_code = OFFSET_OUT_OF_RANGE

    def __init__(self, offset: int, log_start_offset: int, log_end_offset: int) -> None:
        self.offset = offset
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        super().__init__(f"offset {offset} is out of range: the log holds "
                         f"[{log_start_offset}, {log_end_offset})")


class AppendRefused(StorageError):
    """Batches refused before anything was written; the message names what was wrong."""


class CorruptRecords(AppendRefused):
    error_code = CORRUPT_MESSAGE


class RecordTooLarge(AppendRefused):
    error_code = MESSAGE_TOO_LARGE


class RecordsRefused(AppendRefused):
    """A batch refused for some of its records, each named (Produce v8+ answers them as
    record_errors, as Kafka's LogValidator does); the message counts them and shows the first
    few."""

    def __init__(self, what: str, record_errors: list[RecordError]) -> None:
        assert record_errors, "a refusal for records names at least one"
        self.record_errors = tuple(record_errors)
        shown = "; ".join(f"record {e.batch_index}: {e.message}"
                          for e in record_errors[:RECORD_ERRORS_SHOWN_MAX])
        more = len(record_errors) - RECORD_ERRORS_SHOWN_MAX
        super().__init__(f"{len(record_errors)} records of a batch refused ({what}): {shown}"
                         + (f"; and {more} more" if more > 0 else ""))


class InvalidTimestamp(RecordsRefused):
    """Records of a CreateTime batch timestamped outside the topic's message.timestamp.*.max.ms
    bounds."""

    error_code = INVALID_TIMESTAMP


class OffsetsNotIncreasing(AppendRefused):
    """A follower append whose offsets do not start at or after the log end, or go backwards."""


class InvalidRecord(RecordsRefused):
    """Records the topic's settings forbid: a null key in a compacted topic."""

    error_code = INVALID_RECORD


class InvalidProducerEpoch(AppendRefused):
    error_code = INVALID_PRODUCER_EPOCH


class OutOfOrderSequence(AppendRefused):
    error_code = OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidTxnState(AppendRefused):
    """A producer with a transaction open here writes outside it."""

    error_code = INVALID_TXN_STATE


class CoordinatorFenced(AppendRefused):
    """A transaction marker from a coordinator older than the last marker's."""

    error_code = TRANSACTION_COORDINATOR_FENCED


class DuplicateSequence(AppendRefused):
    """A retried batch inside a request of several batches, which Kafka does not deduplicate."""

    error_code = DUPLICATE_SEQUENCE_NUMBER


class CorruptLog(StorageError):
    """Stored bytes that fail their checks when read: refused, never served. `cut_offset`, when
    known: the log is intact before it (truncating to it removes the damage)."""

    error_code = KAFKA_STORAGE_ERROR

    def __init__(self, message: str, cut_offset: int | None = None) -> None:
        super().__init__(message)
        self.cut_offset = cut_offset


class DiskWriteFailed(StorageError):
    """A write to the data dir failed (a full disk, an I/O error): nothing of it was kept, so the
    caller may try again once the disk takes writes (retriable, as Kafka's KAFKA_STORAGE_ERROR)."""

    error_code = KAFKA_STORAGE_ERROR
    retriable = True

    def __init__(self, what: str, exc: OSError) -> None:
        self.what = what
        self.errno = exc.errno
        reason = exc.strerror or str(exc)
        super().__init__(f"cannot write {what}: {reason}")


class LogDeleted(StorageError):
    """A write to a log deleted meanwhile (its topic was deleted while a flush waited on another
    thread): no failure of the disk, and only that partition's business; it is not ours any
    more, so its writer looks for its leader again."""

    error_code = NOT_LEADER_OR_FOLLOWER
    retriable = True

    def __init__(self, what: str, exc: OSError) -> None:
        super().__init__(f"cannot write {what}: the log was deleted ({exc.strerror or exc})")


class DescriptorsExhausted(StorageError):
    """The process is out of file descriptors (EMFILE, or the system's table is full: ENFILE).
    An operating limit, not a disk failure (descriptors.py): nothing was done, the data dir is
    healthy, and the request may be tried again once descriptors are free (retriable, answered
    with KAFKA_STORAGE_ERROR, which Kafka's clients retry after a metadata refresh)."""

    error_code = KAFKA_STORAGE_ERROR
    retriable = True

    def __init__(self, what: str, exc: OSError, limit: str) -> None:
        self.what = what
        self.errno = exc.errno
        super().__init__(f"cannot open a file for {what}: out of file descriptors "
                         f"({exc.strerror or exc}; {limit})")


class CorruptCheckpoint(StorageError):
    """A checkpoint file that does not parse, or is cut short."""

    error_code = KAFKA_STORAGE_ERROR

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"checkpoint file {path} is corrupt: {reason}")


class InconsistentIdentity(StorageError):
    """A data dir whose identity file names another broker or cluster."""


class LogConfigError(ValueError):
    """A log setting out of its range; the message names the setting."""
