"""The consumer's fast path for decoding a record batch whose records all look alike.

Why: decoding varints one record at a time costs ~750 ns per record in Python
(protocol.records), which caps a consumer near 1.3M records/s before it does anything else.
But most batches a producer writes are uniform: every record has the same key length, value
length and no headers, its offset delta is its index, and its timestamp delta fits one byte. Such
records sit at a fixed stride, so every field of every record can be checked and cut out with
C-speed slicing (`data[start:stop:stride]` gathers one byte of each record into a bytes object):
about 5x less work per record.

Theory of operation: the batch's records are taken in *runs* of equal size: offset deltas 0-63
have one-byte varints, 64-8191 two-byte ones, so a batch is at most two runs (a batch holds at
most 8192 records on this path). The first record of a run is parsed in full and becomes the
template; then for all n records of the run, every byte that must equal the template's (length,
attributes, key and value lengths, the empty header count) is compared in one slice, the offset
deltas are compared with the expected sequence in one slice, and the timestamp deltas are
gathered in one slice (each must be one byte). Anything unexpected returns None, and the caller
decodes the batch with protocol.records.decode_batch, which checks every field and names what is
wrong. So this path never accepts what the strict decoder would refuse (the tests compare both on
random batches), and the CRC is checked by the caller before either.

Garbage collection: each record brings a fresh headers list (the API's type: a list per record,
which the application may keep or change), and allocating a thousand container objects in a row
sets off the cyclic collector every 700 of them, which then traverses them again and again as
they age while the application holds them. The collector is paused while one batch is decoded
(and left as it was if the application had turned it off): the collections that follow are fewer
(measured with bench/clients.py's consumer, 100 B records: about a fifth less CPU after start-up).
The pause is process-wide but lasts one batch (a few hundred microseconds; other threads' garbage
is collected at the next collection), and nothing here creates a reference cycle.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from itertools import repeat

from epochlog.protocol.batch import TIMESTAMP_TYPE_MASK, BatchHeader

from .types import ConsumerRecord

ONE_BYTE_DELTAS = 64  # offset deltas 0-63 are one-byte zigzag varints
RECORDS_MAX = 8192  # offset deltas up to 8191 take two bytes at most
_UNZIGZAG = [(raw >> 1) ^ -(raw & 1) for raw in range(128)]
# The two bytes of the zigzag varint of offset delta d, for d in 64..8191.
_TWO_LOW = bytes(((d << 1) & 0x7F) | 0x80 for d in range(ONE_BYTE_DELTAS, RECORDS_MAX))
_TWO_HIGH = bytes((d << 1) >> 7 for d in range(ONE_BYTE_DELTAS, RECORDS_MAX))
_ONE = bytes(d << 1 for d in range(ONE_BYTE_DELTAS))


def _varint(data: bytes, p: int) -> tuple[int, int, int]:
    """(zigzag value, its first byte's position, the position after it) of the varint at p;
    only one- and two-byte varints (anything longer is not uniform enough to bother)."""
    b = data[p]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), p, p + 1
    b2 = data[p + 1]
    if b2 >= 0x80:
        raise ValueError("varint longer than two bytes")
    raw = (b & 0x7F) | (b2 << 7)
    return (raw >> 1) ^ -(raw & 1), p, p + 2


def decode_uniform(data: bytes, start: int, end: int, header: BatchHeader, topic: str,
                   partition: int) -> list[ConsumerRecord] | None:
    """The records of data[start:end] (a batch's records, uncompressed) as ConsumerRecords, or
    None when they are not uniform (then use the strict decoder)."""
    count = header.record_count
    if count < 2 or count > RECORDS_MAX or header.last_offset_delta != count - 1:
        return None
    collecting = gc.isenabled()
    if collecting:
        gc.disable()  # see "Garbage collection" above
    try:
        return _decode(data, start, end, header, topic, partition, count)
    except (IndexError, ValueError):
        return None
    finally:
        if collecting:
            gc.enable()


def _decode(data: bytes, p: int, end: int, header: BatchHeader, topic: str, partition: int,
            count: int) -> list[ConsumerRecord] | None:
    base_offset = header.base_offset
    base_ts = header.base_timestamp
    log_append = header.attributes & TIMESTAMP_TYPE_MASK
    ts_type = 1 if log_append else 0
    epoch = header.partition_leader_epoch
    out: list[ConsumerRecord] = []
    i = 0
    while i < count:
        # The template: record i parsed in full.
        length, _, q = _varint(data, p)
        record_end = q + length
        if data[q] != 0:  # attributes
            return None
        ts_pos = q + 1
        if data[ts_pos] >= 0x80:
            return None
        delta, off_pos, q = _varint(data, ts_pos + 1)
        if delta != i:
            return None
        key_len, key_len_pos, q = _varint(data, q)
        key_pos = q
        if key_len > 0:
            q += key_len
        elif key_len < -1:
            return None
        value_len, value_len_pos, q = _varint(data, q)
        value_pos = q
        if value_len >= 0:
            q += value_len
        elif value_len < -1:
            return None
        if q + 1 != record_end or data[q] != 0:  # headers: none, and the record ends there
            return None
        stride = record_end - p
        n = min(count, ONE_BYTE_DELTAS if i < ONE_BYTE_DELTAS else RECORDS_MAX) - i
        stop = p + n * stride
        if stop > end:
            return None
        # Every byte that must be the template's, for all n records at once.
        for fixed in (*range(p, ts_pos), *range(key_len_pos, key_pos),
                      *range(value_len_pos, value_pos), q):
            if data[fixed:stop:stride] != data[fixed:fixed + 1] * n:
                return None
        if i < ONE_BYTE_DELTAS:
            if data[off_pos:stop:stride] != _ONE[i:i + n]:
                return None
        elif (data[off_pos:stop:stride] != _TWO_LOW[i - ONE_BYTE_DELTAS:i - ONE_BYTE_DELTAS + n]
              or data[off_pos + 1:stop:stride]
              != _TWO_HIGH[i - ONE_BYTE_DELTAS:i - ONE_BYTE_DELTAS + n]):
            return None
        ts_bytes = data[ts_pos:stop:stride]
        if max(ts_bytes) >= 0x80:
            return None
        timestamps: Iterator[int]
        keys: Iterator[bytes | None]
        values: Iterator[bytes | None]
        if log_append:
            timestamps = repeat(header.max_timestamp, n)
        elif ts_bytes.count(ts_bytes[0]) == n:
            timestamps = repeat(base_ts + _UNZIGZAG[ts_bytes[0]], n)
        else:
            unzigzag = _UNZIGZAG
            timestamps = iter([base_ts + unzigzag[b] for b in ts_bytes])
        if key_len < 0:
            keys = repeat(None, n)
        else:
            keys = iter([data[s:s + key_len] for s in range(key_pos, stop, stride)])
        if value_len < 0:
            values = repeat(None, n)
        else:
            values = iter([data[s:s + value_len] for s in range(value_pos, stop, stride)])
        out += map(ConsumerRecord, repeat(topic, n), repeat(partition, n),
                   range(base_offset + i, base_offset + i + n), timestamps, repeat(ts_type, n),
                   keys, values, [[] for _ in range(n)], repeat(epoch, n))
        i += n
        p = stop
    if p != end:
        return None
    return out
