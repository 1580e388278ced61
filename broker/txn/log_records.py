"""The records of `__transaction_state`, in Kafka's layouts, so Kafka's tools can read our topic.

Each record's key and value open with an int16 version:

    key version 0      TransactionLogKey    transactional_id string
    value version 0    TransactionLogValue  producer_id int64, producer_epoch int16,
                       transaction_timeout_ms int32, transaction_status int8,
                       transaction_partitions [topic string, partition_ids [int32]] (nullable),
                       transaction_last_update_timestamp_ms int64,
                       transaction_start_timestamp_ms int64
    value version 1    the same, flexible, with tagged fields previous_producer_id (tag 0),
                       next_producer_id (tag 1), client_transaction_version (tag 2)

We write value version 0 (what every Kafka since 0.11 reads) and read both. A null value is a
tombstone: the transactional id expired. Keys make compaction keep the latest state of each id.
The status numbers are Kafka's TransactionState ids (`Status`). A record that does not decode is a
`BadRecord` naming its offset.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from epochlog.protocol import codegen
from epochlog.protocol.errors import DecodeError
from epochlog.protocol.schema import Message, V, i8, i16, i32, i64

KEY_VERSION = 0
VALUE_VERSION = 0
VALUE_VERSION_MAX = 1
FLEXIBLE_FROM = 1
_INT16 = struct.Struct(">h")


class Status(enum.IntEnum):
    """A transaction's state, numbered as Kafka's TransactionState."""
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """As DescribeTransactions and Kafka's tools spell it: "PrepareCommit"."""
        return "".join(part.capitalize() for part in self.name.split("_"))


class TransactionLogKey(Message):
    transactional_id: str = ""


class PartitionsSchema(Message):
    topic: str = ""
    partition_ids: list[i32] = []  # noqa: RUF012 (msgspec copies defaults)


class TransactionLogValue(Message):
    producer_id: i64 = -1
    previous_producer_id: Annotated[i64, V("1+", tag=0, tagged="1+")] = -1
    next_producer_id: Annotated[i64, V("1+", tag=1, tagged="1+")] = -1
    producer_epoch: i16 = -1
    transaction_timeout_ms: i32 = 0
    transaction_status: i8 = 0
    transaction_partitions: Annotated[list[PartitionsSchema] | None, V(nullable="0+")] = None
    transaction_last_update_timestamp_ms: i64 = -1
    transaction_start_timestamp_ms: i64 = -1
    client_transaction_version: Annotated[i16, V("1+", tag=2, tagged="1+")] = 0


class BadRecord(Exception):
    """A record of the transaction log that does not decode."""


@dataclass(frozen=True)
class TxnLogEntry:
    """One transactional id's state as the log keeps it."""
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    status: Status
    partitions: frozenset[tuple[str, int]]
    last_update_ms: int
    start_ms: int


_encoders: dict[tuple[type[Message], int], Callable[[Any, list[bytes]], None]] = {}
_decoders: dict[tuple[type[Message], int], Callable[[bytes, int], tuple[Any, int]]] = {}


def _encode(version: int, msg: Message) -> bytes:
    key = (type(msg), version)
    fn = _encoders.get(key)
    if fn is None:
        fn = _encoders[key] = codegen.build_encoder(type(msg), version, version >= FLEXIBLE_FROM)
    out = [_INT16.pack(version)]
    fn(msg, out)
    return b"".join(out)


def _decode(cls: type[Message], buf: bytes, version: int) -> Any:
    key = (cls, version)
    fn = _decoders.get(key)
    if fn is None:
        fn = _decoders[key] = codegen.build_decoder(cls, version, version >= FLEXIBLE_FROM)
    msg, _ = fn(buf, 2)
    return msg


def txn_key(transactional_id: str) -> bytes:
    return _encode(KEY_VERSION, TransactionLogKey(transactional_id))


def txn_value(entry: TxnLogEntry) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(entry.partitions):
        by_topic.setdefault(topic, []).append(partition)
    return _encode(VALUE_VERSION, TransactionLogValue(
        producer_id=entry.producer_id, producer_epoch=entry.producer_epoch,
        transaction_timeout_ms=entry.timeout_ms, transaction_status=int(entry.status),
        transaction_partitions=[PartitionsSchema(t, ps) for t, ps in by_topic.items()],
        transaction_last_update_timestamp_ms=entry.last_update_ms,
        transaction_start_timestamp_ms=entry.start_ms))


def parse(key: bytes | None, value: bytes | None, offset: int
          ) -> tuple[str, TxnLogEntry | None]:
    """(transactional id, its state or None for a tombstone) of one record."""
    try:
        if key is None or len(key) < 2:
            raise DecodeError("no key", "TransactionLogKey")
        key_version = _INT16.unpack_from(key)[0]
        if key_version != KEY_VERSION:
            raise DecodeError(f"key version {key_version} is not known", "TransactionLogKey")
        txn_id: str = _decode(TransactionLogKey, key, KEY_VERSION).transactional_id
        if value is None:
            return txn_id, None
        version = _INT16.unpack_from(value)[0]
        if not 0 <= version <= VALUE_VERSION_MAX:
            raise DecodeError(f"value version {version} is not known", "TransactionLogValue")
        v = _decode(TransactionLogValue, value, version)
        status = Status(v.transaction_status)
    except (DecodeError, struct.error, IndexError, UnicodeDecodeError, ValueError) as exc:
        raise BadRecord(f"record at offset {offset}: {exc}") from None
    partitions = frozenset((p.topic, i) for p in v.transaction_partitions or () for i in
                           p.partition_ids)
    return txn_id, TxnLogEntry(v.producer_id, v.producer_epoch, v.transaction_timeout_ms, status,
                               partitions, v.transaction_last_update_timestamp_ms,
                               v.transaction_start_timestamp_ms)
