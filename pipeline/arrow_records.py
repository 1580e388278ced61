"""Kafka record batches to Arrow columns, with no Python object per record.

Why: Spark takes a Python source's rows as Arrow batches. Turning records into Python objects
first (a tuple, or the client's ConsumerRecord) and then into Arrow costs two passes and an
object per field per record; here each record is parsed once, by numpy, and keys and values are
gathered by Arrow's own `take` straight out of the fetched bytes.

Theory of operation. The input is a run of one partition's batches from
`Consumer.poll_batches()` (CRC-checked, decompressed, records still packed). Their records
sections are joined into one buffer (one copy), and:

1. Record starts. Each record opens with its length (a zigzag varint), so where record i+1
   starts depends on record i: the one sequential step. A batch whose records all have the
   same length (what producers of fixed-size records write) is recognised with strided
   comparisons, at C speed; any other batch is walked in a short Python loop that reads only
   the length of each record.
2. Fields. Given every record's start, each field (timestamp delta, offset delta, key length,
   value length, header count) is read for all records at once by a vectorised varint reader:
   one numpy pass per byte of the longest varint, usually one or two.
3. Keys and values. An Arrow binary array is laid over the whole buffer whose elements are,
   alternately, a value and the bytes up to the next value (so its offsets rise, as Arrow
   requires); `take` of the even elements copies the values out into a column of their own,
   and a null in the indices makes a null key or value (length -1).
4. Records before `FetchedBatch.first_offset` (handed out before) or at or after the range's
   end are masked out; the batch-level fields (base offset and timestamp, leader epoch,
   timestamp type) are repeated per record with numpy.

Headers, only with includeHeaders, are the exception: records that have some are walked in
Python (they are rare on fast paths, and each header is a Python string key anyway).

Malformed records (the CRC only proves the bytes are what the producer wrote) raise
CorruptRecordsError naming the partition and batch; nothing is guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from epochlog.client.types import FetchedBatch

from .schema import arrow_schema

I64 = npt.NDArray[np.int64]
VARINT_BYTES_MAX = 10
COLUMN_BYTES_MAX = 2**31 - 1  # Spark's binary is Arrow's binary: 32-bit offsets


class CorruptRecordsError(ValueError):
    """A batch whose records section does not parse as its header says."""


class Decoded:
    """One Arrow batch of a partition's records, and where it leaves the partition."""

    __slots__ = ("batch", "next_offset", "next_epoch", "rows")

    def __init__(self, batch: Any, rows: int, next_offset: int, next_epoch: int) -> None:
        self.batch = batch  # pyarrow.RecordBatch in schema.arrow_schema(include_headers)
        self.rows = rows
        self.next_offset = next_offset  # after the last record kept (or the last batch)
        self.next_epoch = next_epoch


def decode(batches: Sequence[FetchedBatch], end_offset: int, include_headers: bool) -> Decoded:
    """The records of batches (one partition's, in offset order) below end_offset, from each
    batch's first_offset on, as one Arrow batch."""
    if not batches:
        raise ValueError("no batches to decode")
    topic, partition = batches[0].topic, batches[0].partition
    counts = np.fromiter((b.record_count for b in batches), np.int64, len(batches))
    buf = b"".join(b.records for b in batches)
    if len(buf) > COLUMN_BYTES_MAX:
        raise ValueError(f"{len(buf)} bytes of records is more than one Arrow batch holds; "
                         "decode fewer batches at once")
    data = np.frombuffer(buf, dtype=np.uint8)
    section_ends = np.cumsum(np.fromiter((len(b.records) for b in batches), np.int64,
                                         len(batches)))
    try:
        starts, record_ends = _record_starts(buf, data, batches, section_ends)
        fields = _fields(data, starts, record_ends, include_headers)
    except (IndexError, ValueError) as exc:
        raise CorruptRecordsError(
            f"{topic}-{partition}: the records of the batches at offsets "
            f"{batches[0].base_offset}..{batches[-1].next_offset - 1} do not parse: {exc}"
        ) from exc
    ts_delta, off_delta, key_start, key_len, value_start, value_len, header_pos = fields

    base = np.repeat(np.fromiter((b.base_offset for b in batches), np.int64, len(batches)),
                     counts)
    offsets = base + off_delta
    first = np.repeat(np.fromiter((b.first_offset for b in batches), np.int64, len(batches)),
                      counts)
    ends = np.repeat(np.fromiter((b.next_offset for b in batches), np.int64, len(batches)),
                     counts)
    if np.any((off_delta < 0) | (offsets >= ends)):
        raise CorruptRecordsError(f"{topic}-{partition}: a record's offset delta lies outside "
                                  f"its batch (batches from offset {batches[0].base_offset})")
    keep = (offsets >= first) & (offsets < end_offset)
    log_append = np.repeat(np.fromiter((b.timestamp_type for b in batches), np.int32,
                                       len(batches)), counts)
    ts_ms = np.where(log_append == 1,
                     np.repeat(np.fromiter((b.max_timestamp for b in batches), np.int64,
                                           len(batches)), counts),
                     np.repeat(np.fromiter((b.base_timestamp for b in batches), np.int64,
                                           len(batches)), counts) + ts_delta)
    epochs = np.repeat(np.fromiter((b.leader_epoch for b in batches), np.int32, len(batches)),
                       counts)
    if not keep.all():
        offsets, ts_ms, log_append, epochs = (offsets[keep], ts_ms[keep], log_append[keep],
                                              epochs[keep])
        key_start, key_len = key_start[keep], key_len[keep]
        value_start, value_len = value_start[keep], value_len[keep]
        header_pos = header_pos[keep] if header_pos is not None else None
    rows = len(offsets)
    columns = [
        _binary_column(buf, key_start, key_len),
        _binary_column(buf, value_start, value_len),
        _repeated_string(topic, rows),
        pa.array(np.full(rows, partition, np.int32)),
        pa.array(offsets),
        pa.array(ts_ms * 1000, pa.timestamp("us", tz="UTC")),
        pa.array(log_append),
    ]
    if include_headers:
        assert header_pos is not None
        columns.append(_headers_column(buf, data, header_pos, topic, partition))
    columns.append(pa.array(epochs))
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
    # Where the partition stands: after the last record kept, or past the whole run when the
    # run ends before end_offset (a compacted tail, control records, a transaction marker).
    last = batches[-1]
    if last.next_offset <= end_offset:
        return Decoded(batch, rows, last.next_offset, last.leader_epoch)
    if rows:
        return Decoded(batch, rows, int(offsets[-1]) + 1, int(epochs[-1]))
    return Decoded(batch, rows, end_offset, last.leader_epoch)


# ------------------------------------------------------------------------------- 1. starts
def _record_starts(buf: bytes, data: npt.NDArray[np.uint8], batches: Sequence[FetchedBatch],
                   section_ends: I64) -> tuple[I64, I64]:
    """Per record: where its body starts (after its length) and where it ends."""
    starts: list[I64] = []
    lengths: list[I64] = []
    section_start = 0
    for batch, section_end in zip(batches, section_ends.tolist(), strict=True):
        _starts_in_runs(buf, data, section_start, section_end, batch.record_count, starts,
                        lengths)
        section_start = section_end
    body = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    return body, body + (np.concatenate(lengths) if lengths else np.zeros(0, np.int64))


def _starts_in_runs(buf: bytes, data: npt.NDArray[np.uint8], p: int, end: int, count: int,
                    starts: list[I64], lengths: list[I64]) -> None:
    """Records of one batch, found run by run: from a record of length L (its varint taking s
    bytes), the records that follow at stride s + L whose length bytes are the same are the
    next records, by induction, so one strided comparison finds the whole run. Producers of
    fixed-size records write a few runs per batch (the records' timestamp and offset deltas
    grow from one byte to two); where runs are short, a Python loop walks WALK_RECORDS records
    at a time instead."""
    i = 0
    while i < count:
        length, after = _py_varint(buf, p)
        size = after - p
        stride = size + length
        if length <= 0:
            raise ValueError(f"record {i} has length {length}")
        room = min(count - i, (end - p) // stride)
        run = 1
        if room >= RUN_RECORDS_MIN:
            heads = data[p:p + room * stride].reshape(room, stride)[:, :size]
            same = (heads == heads[0]).all(axis=1)
            run = room if same.all() else int(np.argmin(same))
        if run >= RUN_RECORDS_MIN:
            starts.append(np.arange(p + size, p + run * stride, stride, dtype=np.int64))
            lengths.append(np.full(run, length, np.int64))
            p += run * stride
            i += run
            continue
        walked = min(WALK_RECORDS, count - i)
        body, sizes, p = _walk(buf, p, end, walked)
        starts.append(body)
        lengths.append(sizes)
        i += walked
    if p != end:
        raise ValueError(f"{count} records end at byte {p}, their section at {end}")


RUN_RECORDS_MIN = 8  # a run shorter than this is walked: a numpy call costs ~8 records' walk
WALK_RECORDS = 64


def _walk(buf: bytes, p: int, end: int, count: int) -> tuple[I64, I64, int]:
    """count records from p, one by one: (body starts, lengths, the position after)."""
    body: list[int] = []
    sizes: list[int] = []
    for i in range(count):
        b = buf[p]
        if b < 0x80:
            raw = b
            p += 1
        else:
            raw, shift = b & 0x7F, 7
            p += 1
            while True:
                b = buf[p]
                raw |= (b & 0x7F) << shift
                p += 1
                if b < 0x80:
                    break
                shift += 7
                if shift >= 7 * 5:
                    raise ValueError(f"record length varint too long at byte {p}")
        length = (raw >> 1) ^ -(raw & 1)
        if length <= 0:
            raise ValueError(f"record {i} has length {length}")
        body.append(p)
        sizes.append(length)
        p += length
    if p > end:
        raise ValueError(f"records run past their section ({p} > {end})")
    return np.array(body, np.int64), np.array(sizes, np.int64), p


# ------------------------------------------------------------------------------- 2. fields
def _fields(data: npt.NDArray[np.uint8], body: I64, record_end: I64, include_headers: bool
            ) -> tuple[I64, I64, I64, I64, I64, I64, I64 | None]:
    """Per record: timestamp delta, offset delta, key start and length, value start and length,
    and where the header count is (with headers)."""
    # attributes (one byte, unused in v2) at body; then the timestamp delta
    ts_delta, p = _varints(data, body + 1)
    off_delta, p = _varints(data, p)
    key_len, key_start = _varints(data, p)
    p = key_start + np.maximum(key_len, 0)
    value_len, value_start = _varints(data, p)
    header_pos = value_start + np.maximum(value_len, 0)
    if np.any(key_len < -1) or np.any(value_len < -1):
        raise ValueError("a key or value length below -1")
    if np.any(header_pos >= record_end):
        raise ValueError("a record's key and value run past its length")
    return (ts_delta, off_delta, key_start, key_len, value_start, value_len,
            header_pos if include_headers else None)


def _varints(data: npt.NDArray[np.uint8], pos: I64) -> tuple[I64, I64]:
    """The zigzag varint at each position, and the position after each."""
    b = data[pos].astype(np.uint64)
    raw = b & np.uint64(0x7F)
    size = np.ones(len(pos), np.int64)
    more = np.nonzero(b >= 0x80)[0]
    shift = 7
    while len(more):
        if shift >= 7 * VARINT_BYTES_MAX:
            raise ValueError(f"varint longer than {VARINT_BYTES_MAX} bytes")
        nxt = data[pos[more] + size[more]].astype(np.uint64)
        raw[more] |= (nxt & np.uint64(0x7F)) << np.uint64(shift)
        size[more] += 1
        more = more[nxt >= 0x80]
        shift += 7
    value = (raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))
    return value.view(np.int64), pos + size


# ------------------------------------------------------------------------------- 3. columns
def _binary_column(buf: bytes, start: I64, length: I64) -> Any:
    """Column of buf[start:start+length] per record; null where length is -1."""
    n = len(start)
    if n == 0:
        return pa.array([], pa.binary())
    valid = length >= 0
    size = np.where(valid, length, 0)
    # Elements 2i: record i's bytes; 2i+1: from its end to record i+1's start. Arrow wants
    # rising offsets, not offsets from 0, so the column is laid over buf as it is (whose size
    # decode() bounds below 2 GiB, so 32-bit offsets do).
    bounds = np.empty(2 * n + 1, np.int32)
    bounds[0:2 * n:2] = start
    bounds[1:2 * n:2] = start + size
    bounds[2 * n] = start[-1] + size[-1]
    if np.any(np.diff(bounds) < 0):
        raise ValueError("records overlap")
    laid = pa.Array.from_buffers(pa.binary(), 2 * n,
                                 [None, pa.py_buffer(bounds), pa.py_buffer(buf)])
    picks = np.arange(0, 2 * n, 2, dtype=np.int32)
    return laid.take(pa.array(picks) if valid.all() else pa.array(picks, mask=~valid))


def _repeated_string(text: str, n: int) -> Any:
    raw = text.encode()
    offsets = np.arange(0, (n + 1) * len(raw), len(raw), dtype=np.int32)[:n + 1] \
        if raw else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets),
                                                  pa.py_buffer(raw * n)])


def _headers_column(buf: bytes, data: npt.NDArray[np.uint8], header_pos: I64, topic: str,
                    partition: int) -> Any:
    counts, first = _varints(data, header_pos)
    if np.any(counts < 0):
        raise CorruptRecordsError(f"{topic}-{partition}: a negative header count")
    list_offsets = np.zeros(len(counts) + 1, np.int32)
    np.cumsum(counts, out=list_offsets[1:])
    keys: list[str] = []
    values: list[bytes | None] = []
    for i in np.nonzero(counts)[0].tolist():
        p = int(first[i])
        for _ in range(int(counts[i])):
            key_len, p = _py_varint(buf, p)
            if key_len < 0:
                raise CorruptRecordsError(f"{topic}-{partition}: a header without a key")
            keys.append(buf[p:p + key_len].decode("utf-8", "replace"))
            p += key_len
            value_len, p = _py_varint(buf, p)
            if value_len < 0:
                values.append(None)
            else:
                values.append(buf[p:p + value_len])
                p += value_len
    header_type = pa.struct([("key", pa.string()), ("value", pa.binary())])
    children = pa.StructArray.from_arrays([pa.array(keys, pa.string()),
                                           pa.array(values, pa.binary())],
                                          fields=list(header_type))
    return pa.ListArray.from_arrays(pa.array(list_offsets), children,
                                    type=pa.list_(pa.field("element", header_type)))


def _py_varint(buf: bytes, p: int) -> tuple[int, int]:
    raw = 0
    for i in range(VARINT_BYTES_MAX):
        b = buf[p + i]
        raw |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            return (raw >> 1) ^ -(raw & 1), p + i + 1
    raise CorruptRecordsError(f"varint longer than {VARINT_BYTES_MAX} bytes at byte {p}")
