"""Transaction markers: the control records that end a transaction in each of its partitions.

A marker is a batch of its own, with the control and transactional attribute bits set, the
transaction's producer id and epoch, no sequence, and one record:

    key      version int16 (0), type int16 (0 ABORT, 1 COMMIT)
    value    version int16 (0), coordinator_epoch int32 (the transaction coordinator's epoch:
             its leader epoch of the __transaction_state partition; a marker from an older
             coordinator is refused, as a stale leader epoch is)

Clients never hand control records to applications; read_committed consumers use the ABORT ones
to drop what the transaction wrote.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from .batch import CorruptBatch
from .records import build_batch, decode_batch

CONTROL_VERSION = 0
ABORT = 0
COMMIT = 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class Marker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def marker_batch(commit: bool, producer_id: int, producer_epoch: int, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    key = _KEY.pack(CONTROL_VERSION, COMMIT if commit else ABORT)
    value = _VALUE.pack(CONTROL_VERSION, coordinator_epoch)
    return build_batch([(key, value, None, timestamp_ms)], producer_id=producer_id,
                       producer_epoch=producer_epoch, is_transactional=True, is_control=True)


def read_marker(batch: bytes | bytearray | memoryview) -> Marker:
    """The marker of a control batch (CorruptBatch if it holds none: no record, another
    control type, a key or value cut short)."""
    header, records = decode_batch(batch, 0)
    if not header.is_control or not records:
        raise CorruptBatch("not a control batch with a record", "ControlRecord")
    return marker_of(records[0].key, records[0].value)


def marker_of(key: bytes | None, value: bytes | None) -> Marker:
    """The marker a control record holds (CorruptBatch if none)."""
    if key is None or len(key) < _KEY.size:
        raise CorruptBatch("control record key cut short", "ControlRecord.key")
    _, kind = _KEY.unpack_from(key)
    if kind not in (ABORT, COMMIT):
        raise CorruptBatch(f"control record type {kind} is not a transaction marker",
                           "ControlRecord.type")
    epoch = -1
    if value is not None and len(value) >= _VALUE.size:
        _, epoch = _VALUE.unpack_from(value)
    return Marker(kind == COMMIT, epoch)
