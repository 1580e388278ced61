"""The client's exceptions: one class per Kafka error code, each with `retriable`, and a few of
ours.

Every class derives from `KafkaError` and carries two class attributes: `code` (the Kafka error
code, None for errors that arise in the client) and `retriable` (whether the same request may
succeed later, Kafka's Java classification, from protocol.error_codes). The classes users catch
most are declared here by name (FencedLeaderEpochError, NotLeaderOrFollowerError, ...); the rest
are built from protocol.error_codes' table at import, named after Kafka's constant in CamelCase
with an `Error` suffix, and reached with `error_class(code)` or `error_for(code, what)`.

    try:
        await producer.send_and_wait("orders", value=b"x")
    except KafkaError as exc:
        if exc.retriable: ...

Client-side errors: KafkaTimeoutError (a delivery, block or request timeout ran out),
KafkaConnectionError (no connection to a broker), BufferFullError (send_nowait with the buffer
full), ProducerClosedError, TransactionAbortedError (a record of a transaction aborted before
it was sent), and LogTruncationError (KIP-320: the consumer's position is past the point where
the leader's log diverged; carries the divergent offset per partition).
"""

from __future__ import annotations

from epochlog.protocol.error_codes import ALL, ErrorCode, info

from .types import TopicPartition


class KafkaError(Exception):
    """Base of every client error. code: the Kafka error code, None if the client raised it."""

    code: int | None = None
    retriable: bool = False

    def __init__(self, message: str = "") -> None:
        super().__init__(message or (info(self.code).message if self.code is not None
                                     else type(self).__name__))


# ---------------------------------------------------------------- raised by the client itself
class KafkaTimeoutError(KafkaError):
    """A bound on time ran out: delivery_timeout_ms, max_block_ms or a request timeout."""

    retriable = True


class KafkaConnectionError(KafkaError):
    """No connection to the broker needed, or it closed before an answer arrived."""

    retriable = True


class BufferFullError(KafkaError):
    """send_nowait found the producer's buffer_memory full; await send() to wait instead."""

    retriable = True


class ProducerClosedError(KafkaError):
    """The producer is closed (or closing) and takes no more records."""


class TransactionAbortedError(KafkaError):
    """The record was in a transaction that was aborted before it was sent (Java's
    TransactionAbortedException)."""


class LogTruncationError(KafkaError):
    """KIP-320: the log was truncated below the consumer's position (an unclean leader election),
    and auto_offset_reset is "none". divergent_offsets maps each partition to (offset,
    leader_epoch): the first offset the consumer's position and the leader's log disagree at, and
    the epoch the leader's OffsetForLeaderEpoch answer named, that is, the last epoch the two
    share, which ends at that offset (as Kafka's LogTruncationException reports it), or -1 if it
    is not known. Seeking to the pair resumes right after what both logs hold."""

    def __init__(self, divergent_offsets: dict[TopicPartition, tuple[int, int]],
                 message: str = "") -> None:
        self.divergent_offsets = dict(divergent_offsets)
        described = ", ".join(f"{tp.topic}-{tp.partition} at offset {offset} (leader epoch "
                              f"{epoch})" for tp, (offset, epoch) in
                              sorted(self.divergent_offsets.items()))
        super().__init__(message or f"log truncated below the consumer's position: {described}")


# ----------------------------------------------------------- Kafka's codes users catch by name
class _Coded(KafkaError):
    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        if cls.code is not None:
            cls.retriable = info(cls.code).retriable


class UnknownServerError(_Coded):
    code = ErrorCode.UNKNOWN_SERVER_ERROR


class OffsetOutOfRangeError(_Coded):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class CorruptMessageError(_Coded):
    code = ErrorCode.CORRUPT_MESSAGE


class UnknownTopicOrPartitionError(_Coded):
    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class LeaderNotAvailableError(_Coded):
    code = ErrorCode.LEADER_NOT_AVAILABLE


class NotLeaderOrFollowerError(_Coded):
    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class RequestTimedOutError(_Coded):
    code = ErrorCode.REQUEST_TIMED_OUT


class MessageTooLargeError(_Coded):
    code = ErrorCode.MESSAGE_TOO_LARGE


# Java's name for MESSAGE_TOO_LARGE (RecordTooLargeException): the same class, either name.
RecordTooLargeError = MessageTooLargeError


class NetworkError(_Coded):
    code = ErrorCode.NETWORK_EXCEPTION


class NotEnoughReplicasError(_Coded):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class NotEnoughReplicasAfterAppendError(_Coded):
    code = ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND


class TopicAlreadyExistsError(_Coded):
    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidPartitionsError(_Coded):
    code = ErrorCode.INVALID_PARTITIONS


class InvalidReplicationFactorError(_Coded):
    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidConfigError(_Coded):
    code = ErrorCode.INVALID_CONFIG


class NotControllerError(_Coded):
    code = ErrorCode.NOT_CONTROLLER


class InvalidRequestError(_Coded):
    code = ErrorCode.INVALID_REQUEST


class OutOfOrderSequenceNumberError(_Coded):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class DuplicateSequenceNumberError(_Coded):
    code = ErrorCode.DUPLICATE_SEQUENCE_NUMBER


class InvalidProducerEpochError(_Coded):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class UnknownProducerIdError(_Coded):
    code = ErrorCode.UNKNOWN_PRODUCER_ID


class InvalidTxnStateError(_Coded):
    code = ErrorCode.INVALID_TXN_STATE


class ProducerFencedError(_Coded):
    """A newer producer with the same transactional id took over (InitProducerId bumped the
    epoch): this one can only be closed."""

    code = ErrorCode.PRODUCER_FENCED


class KafkaStorageError(_Coded):
    code = ErrorCode.KAFKA_STORAGE_ERROR


class FencedLeaderEpochError(_Coded):
    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(_Coded):
    code = ErrorCode.UNKNOWN_LEADER_EPOCH


class OffsetNotAvailableError(_Coded):
    code = ErrorCode.OFFSET_NOT_AVAILABLE


class PreferredLeaderNotAvailableError(_Coded):
    code = ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE


class ElectionNotNeededError(_Coded):
    code = ErrorCode.ELECTION_NOT_NEEDED


class UnsupportedVersionError(_Coded):
    code = ErrorCode.UNSUPPORTED_VERSION


# ------------------------------------------------------------------------- the whole table
def _class_name(name: str) -> str:
    stem = name.removesuffix("_EXCEPTION")
    return "".join(part.capitalize() for part in stem.split("_")) + "Error"


_BY_CODE: dict[int, type[KafkaError]] = {
    cls.code: cls for cls in _Coded.__subclasses__() if cls.code is not None}
for _info in ALL:
    if _info.code != 0 and _info.code not in _BY_CODE:
        _BY_CODE[_info.code] = type(_class_name(_info.name), (_Coded,), {
            "code": _info.code, "__doc__": _info.message, "__module__": __name__})


def error_class(code: int) -> type[KafkaError]:
    """The exception class of a Kafka error code (a new one for a code we do not know)."""
    cls = _BY_CODE.get(code)
    if cls is None:
        cls = type(_class_name(info(code).name), (_Coded,), {
            "code": code, "__doc__": info(code).message, "__module__": __name__})
        _BY_CODE[code] = cls
    return cls


def error_for(code: int, what: str) -> KafkaError:
    """An exception for an error code in an answer about `what` (e.g. "produce to t-0")."""
    known = info(code)
    return error_class(code)(f"{what}: {known.name} ({code}): {known.message}")
