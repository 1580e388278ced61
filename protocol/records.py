"""RecordBatch v2 records: build a batch from records, and decode a batch back into records.

protocol.batch reads, checks and stamps the 61-byte batch header; this module owns what follows it.
Each record (all varints zigzag-encoded, as Kafka's DefaultRecord):

    length           varint   bytes after this field
    attributes       int8     unused, written 0
    timestamp_delta  varlong  from the batch's base_timestamp
    offset_delta     varint   from the batch's base_offset
    key_length       varint   -1 for a null key; then the key
    value_length     varint   -1 for a null value; then the value
    header_count     varint   then per header: key_length varint, key (UTF-8, never null),
                              value_length varint (-1 for null), value

With a codec in the attributes, the records (everything after record_count) are one compressed
payload (protocol.compression).

Building is the producer's hot path, where per-record Python operations decide throughput: varints
come from a table, each record is joined once and the batch once. Decoding reads one- and two-byte
varints inline. Measured here, 1,000 records of 100 B: build ~3.0M records/s (kafka-python 3.0's
builder ~0.7M, aiokafka's Cython one ~5.4M); decode ~1.3M records/s (kafka-python ~0.43M).

Decoding trusts nothing: CRC first (protocol.batch.check), then every length, varint and count is
checked against the bytes present before anything is sliced or allocated; any fault is a
CorruptBatch naming the record and the field. Offset deltas must rise strictly and stay within the
batch's last_offset_delta, so a record cannot claim an offset outside its batch.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import msgspec
from crc32c import crc32c

from .batch import (
    BATCH_HEADER_BYTES,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CURRENT_MAGIC,
    LOG_OVERHEAD,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    CorruptBatch,
    check,
    check_whole,
)
from .compression import DECOMPRESSED_BYTES_MAX, Compression, compress, decompress
from .errors import DecodeError
from .varint import UVARINT32_BYTES_MAX, UVARINT64_BYTES_MAX, encode_varint, read_uvarint

CREATE_TIME = 0
LOG_APPEND_TIME = 1

# The Java producer's default batch.size: where BatchBuilder closes a batch unless told otherwise.
BATCH_BYTES_MAX_DEFAULT = 16384
# Smallest record body: attributes, timestamp delta, offset delta, key and value lengths, header
# count, one byte each; with its length prefix a record takes at least one byte more.
RECORD_BODY_BYTES_MIN = 6
RECORD_BYTES_MIN = RECORD_BODY_BYTES_MIN + 1
# A header takes at least its key length and value length, one byte each.
HEADER_BYTES_MIN = 2

# The header is packed in two parts: the CRC (in the first) covers the second and the records.
_HEAD = struct.Struct(">qiibI")  # base_offset, batch_length, partition_leader_epoch, magic, crc
_TAIL = struct.Struct(">hiqqqhii")  # attributes ... record_count
assert _HEAD.size + _TAIL.size == BATCH_HEADER_BYTES
_BATCH_LENGTH_BASE = BATCH_HEADER_BYTES - LOG_OVERHEAD  # batch_length of a batch with no records
_INT32_MAX = (1 << 31) - 1

# Zigzag varints of 0.._ZZ_SIZE-1, looked up instead of encoded: lengths up to 8 kB, offset deltas
# and timestamp deltas that small take one list index each.
_ZZ_SIZE = 8192
_ZZ = [encode_varint(i) for i in range(_ZZ_SIZE)]
_ATTRIBUTES_AND_ZZ = [b"\x00" + encoded for encoded in _ZZ]  # record attributes 0, then a delta
_NULL = encode_varint(-1)
_NO_HEADERS = _ZZ[0]
# Zigzag values of one- and two-byte varints (14 bits), for the decoder's fast path: lengths up to
# 8 kB and deltas up to 8191 decode inline with one list index.
_UNZIGZAG_2 = [(raw >> 1) ^ -(raw & 1) for raw in range(1 << 14)]


class Record(msgspec.Struct, gc=False, frozen=True):
    """One record with its absolute offset and timestamp (ms). Header keys are text, values bytes.

    A msgspec Struct because it is the cheapest to build: ~45 ns against ~255 ns for a NamedTuple,
    measured here; decoding builds one per record."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


# Input to build_batch: (key, value, headers, timestamp_ms). headers may be None or empty;
# timestamp None means now. Keys and values are bytes-like (bytes, bytearray, memoryview of bytes).
RecordInput = tuple[bytes | None, bytes | None,
                    Sequence[tuple[str, bytes | None]] | None, int | None]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def _zz(value: int) -> bytes:
    return _ZZ[value] if 0 <= value < _ZZ_SIZE else encode_varint(value)


def _encode_headers(headers: Sequence[tuple[str, bytes | None]]) -> bytes:
    parts = [_zz(len(headers))]
    for name, value in headers:
        name_bytes = name.encode()
        parts.append(_zz(len(name_bytes)))
        parts.append(name_bytes)
        if value is None:
            parts.append(_NULL)
        else:
            parts.append(_zz(len(value)))
            parts.append(value)
    return b"".join(parts)


def _encode_record(offset_delta: int, timestamp_delta: int, key: bytes | None,
                   value: bytes | None, headers: Sequence[tuple[str, bytes | None]] | None,
                   table: list[bytes] = _ZZ, size: int = _ZZ_SIZE,
                   encode: Callable[[int], bytes] = encode_varint,
                   join: Callable[[Iterable[bytes]], bytes] = b"".join) -> bytes:
    """One record with its length prefix. The hot loop of every builder: keep it lean."""
    if key is None:
        key_part = _NULL
    else:
        n = len(key)
        key_part = (table[n] if n < size else encode(n)) + key
    if value is None:
        value_part = _NULL
    else:
        n = len(value)
        value_part = (table[n] if n < size else encode(n)) + value
    body = join((
        _ATTRIBUTES_AND_ZZ[timestamp_delta] if 0 <= timestamp_delta < size
        else b"\x00" + encode(timestamp_delta),
        table[offset_delta] if offset_delta < size else encode(offset_delta),
        key_part,
        value_part,
        _encode_headers(headers) if headers else _NO_HEADERS,
    ))
    n = len(body)
    return (table[n] if n < size else encode(n)) + body


def _attributes(compression: int, timestamp_type: int, is_transactional: bool,
                is_control: bool) -> int:
    if not Compression.NONE <= compression <= Compression.ZSTD:
        raise ValueError(f"unknown compression codec {compression}: Kafka's codecs are 0-4")
    if timestamp_type not in (CREATE_TIME, LOG_APPEND_TIME):
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), "
                         f"not {timestamp_type}")
    return (compression | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
            | (TRANSACTIONAL_MASK if is_transactional else 0)
            | (CONTROL_MASK if is_control else 0))


def _assemble(payload: bytes, attributes: int, record_count: int, base_timestamp: int,
              max_timestamp: int, base_offset: int, partition_leader_epoch: int,
              producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """The finished batch: header and CRC around payload, the records as the attributes' codec
    left them."""
    batch_length = _BATCH_LENGTH_BASE + len(payload)
    if batch_length > _INT32_MAX:
        raise ValueError(f"a batch of {batch_length} bytes does not fit batch_length (int32)")
    tail = _TAIL.pack(attributes, record_count - 1, base_timestamp, max_timestamp, producer_id,
                      producer_epoch, base_sequence, record_count)
    crc = crc32c(payload, crc32c(tail))
    head = _HEAD.pack(base_offset, batch_length, partition_leader_epoch, CURRENT_MAGIC, crc)
    return b"".join((head, tail, payload))


def recompress(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader,
               codec: int, level: int | None = None,
               max_bytes: int = DECOMPRESSED_BYTES_MAX) -> bytes:
    """The batch at pos with its records stored with codec instead (a topic's
    compression.type): every other field as it was, a new length and CRC. CorruptBatch if its
    records do not decompress within max_bytes."""
    payload = memoryview(buf)[pos + BATCH_HEADER_BYTES:pos + header.size]
    records = decompress(header.compression, payload, max_bytes)
    attributes = (header.attributes & ~COMPRESSION_MASK) | codec
    return _assemble(compress(codec, records, level), attributes, header.record_count,
                     header.base_timestamp, header.max_timestamp, header.base_offset,
                     header.partition_leader_epoch, header.producer_id, header.producer_epoch,
                     header.base_sequence)


def build_batch(records: Sequence[RecordInput], *,
                compression: int = Compression.NONE,
                base_offset: int = 0,
                partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                producer_id: int = NO_PRODUCER_ID,
                producer_epoch: int = NO_PRODUCER_EPOCH,
                base_sequence: int = NO_SEQUENCE,
                is_transactional: bool = False,
                is_control: bool = False,
                timestamp_type: int = CREATE_TIME,
                base_timestamp: int | None = None,
                compression_level: int | None = None) -> bytes:
    """A whole RecordBatch v2 of records, each (key, value, headers, timestamp_ms) (see
    RecordInput).

    Offset deltas are 0, 1, 2...; base_timestamp defaults to the first record's timestamp and
    max_timestamp is the largest record timestamp. The batch is written with the codec asked for,
    even where compression does not pay (BatchBuilder may fall back; see there)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    attributes = _attributes(compression, timestamp_type, is_transactional, is_control)
    now = now_ms()
    first = records[0][3]
    base = base_timestamp if base_timestamp is not None else (now if first is None else first)
    max_timestamp = -1 << 63
    parts: list[bytes] = []
    append = parts.append
    encode_record = _encode_record
    for offset_delta, (key, value, headers, timestamp) in enumerate(records):
        if timestamp is None:
            timestamp = now
        if timestamp > max_timestamp:
            max_timestamp = timestamp
        append(encode_record(offset_delta, timestamp - base, key, value, headers))
    payload = b"".join(parts)
    if compression != Compression.NONE:
        payload = compress(compression, payload, compression_level)
    return _assemble(payload, attributes, len(parts), base, max_timestamp, base_offset,
                     partition_leader_epoch, producer_id, producer_epoch, base_sequence)


class BatchBuilder:
    """Records appended one at a time into one batch, up to batch_bytes_max: the producer's batch.

    append() returns False, and keeps nothing, when the record would take the batch past
    batch_bytes_max; the first record is always taken, however big, as Kafka's producer does.
    size_in_bytes is the batch's size uncompressed, header included. build() compresses with the
    codec asked for, and writes the records uncompressed instead if that is not smaller (as
    kafka-python does), so a built batch never exceeds size_in_bytes."""

    def __init__(self, *, compression: int = Compression.NONE,
                 batch_bytes_max: int = BATCH_BYTES_MAX_DEFAULT,
                 base_offset: int = 0,
                 partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
                 producer_id: int = NO_PRODUCER_ID,
                 producer_epoch: int = NO_PRODUCER_EPOCH,
                 base_sequence: int = NO_SEQUENCE,
                 is_transactional: bool = False,
                 is_control: bool = False,
                 timestamp_type: int = CREATE_TIME,
                 base_timestamp: int | None = None,
                 compression_level: int | None = None) -> None:
        self._attributes = _attributes(compression, timestamp_type, is_transactional, is_control)
        self.batch_bytes_max = batch_bytes_max
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.compression_level = compression_level
        self._base_timestamp = base_timestamp
        self._max_timestamp = -1 << 63
        self._parts: list[bytes] = []
        self._size = BATCH_HEADER_BYTES

    def set_producer_state(self, producer_id: int, producer_epoch: int, base_sequence: int,
                           is_transactional: bool) -> None:
        """Idempotence fields, known only when the batch is drained for sending."""
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self._attributes = (self._attributes & ~TRANSACTIONAL_MASK
                            | (TRANSACTIONAL_MASK if is_transactional else 0))

    def append(self, key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes | None]] | None = None,
               timestamp: int | None = None) -> bool:
        """Add a record (timestamp in ms, None for now); False if it does not fit."""
        if timestamp is None:
            timestamp = now_ms()
        if self._base_timestamp is None:
            self._base_timestamp = timestamp
        parts = self._parts
        record = _encode_record(len(parts), timestamp - self._base_timestamp, key, value, headers)
        if self._size + len(record) > self.batch_bytes_max and parts:
            return False
        parts.append(record)
        self._size += len(record)
        if timestamp > self._max_timestamp:
            self._max_timestamp = timestamp
        return True

    @property
    def record_count(self) -> int:
        return len(self._parts)

    @property
    def size_in_bytes(self) -> int:
        return self._size

    def build(self) -> bytes:
        if not self._parts:
            raise ValueError("a record batch needs at least one record")
        records = b"".join(self._parts)
        attributes = self._attributes
        codec = attributes & COMPRESSION_MASK
        if codec != Compression.NONE:
            compressed = compress(codec, records, self.compression_level)
            if len(compressed) < len(records):
                return self._assemble(compressed, attributes)
            attributes &= ~COMPRESSION_MASK
        return self._assemble(records, attributes)

    def _assemble(self, payload: bytes, attributes: int) -> bytes:
        assert self._base_timestamp is not None  # set by the first append
        return _assemble(payload, attributes, len(self._parts), self._base_timestamp,
                         self._max_timestamp, self.base_offset, self.partition_leader_epoch,
                         self.producer_id, self.producer_epoch, self.base_sequence)


# Decoding.

def decode_batch(buf: bytes | bytearray | memoryview, pos: int = 0, *,
                 max_bytes: int = DECOMPRESSED_BYTES_MAX,
                 verify_crc: bool = True) -> tuple[BatchHeader, list[Record]]:
    """The header and records of the batch at pos, after checking its CRC (unless verify_crc is
    False: a consumer with check_crcs off) and every field.

    max_bytes bounds the decompressed size of a compressed batch. CorruptBatch on any fault."""
    header = check(buf, pos) if verify_crc else check_whole(buf, pos)
    start = pos + BATCH_HEADER_BYTES
    end = pos + header.size
    codec = header.attributes & COMPRESSION_MASK
    if codec != Compression.NONE:
        data = decompress(codec, memoryview(buf)[start:end], max_bytes)
        start, end = 0, len(data)
    elif type(buf) is bytes:
        data = buf  # slice keys and values straight out of it
    else:
        data = bytes(memoryview(buf)[start:end])
        start, end = 0, len(data)
    return header, _decode_records(data, start, end, header)


def decode_batches(buf: bytes | bytearray | memoryview, *,
                   max_bytes: int = DECOMPRESSED_BYTES_MAX,
                   allow_partial_tail: bool = False) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch in buf, end to end. A Fetch response may end in a batch cut short by the
    broker's size limit: allow_partial_tail=True skips such a tail, as Kafka's consumers do;
    otherwise it is a CorruptBatch."""
    batches = []
    pos = 0
    end = len(buf)
    while pos < end:
        if allow_partial_tail and _is_partial(buf, pos, end):
            break
        header, records = decode_batch(buf, pos, max_bytes=max_bytes)
        batches.append((header, records))
        pos += header.size
    return batches


def iter_records(buf: bytes | bytearray | memoryview, *,
                 max_bytes: int = DECOMPRESSED_BYTES_MAX,
                 allow_partial_tail: bool = False) -> Iterator[Record]:
    """The records of every batch in buf, in order (see decode_batches)."""
    pos = 0
    end = len(buf)
    while pos < end:
        if allow_partial_tail and _is_partial(buf, pos, end):
            return
        header, records = decode_batch(buf, pos, max_bytes=max_bytes)
        yield from records
        pos += header.size


def _is_partial(buf: bytes | bytearray | memoryview, pos: int, end: int) -> bool:
    """Whether the bytes from pos are the start of a batch that the buffer's end cuts short."""
    if end - pos < LOG_OVERHEAD:
        return True
    batch_length = int.from_bytes(buf[pos + 8:pos + 12], "big", signed=True)
    return batch_length >= 0 and LOG_OVERHEAD + batch_length > end - pos


def _decode_records(data: bytes, p: int, end: int, header: BatchHeader) -> list[Record]:
    """Records of data[p:end] as header describes them. Varints of one or two bytes (nearly all of
    them) are decoded inline; longer ones, and every fault, go to the helpers below."""
    count = header.record_count
    if count > (end - p) // RECORD_BYTES_MIN:
        raise CorruptBatch(f"record_count {count} needs at least {count * RECORD_BYTES_MIN} "
                           f"bytes but the records take {end - p}", "RecordBatch.record_count")
    base_offset = header.base_offset
    base_timestamp = header.base_timestamp
    last_offset_delta = header.last_offset_delta
    log_append_time = header.attributes & TIMESTAMP_TYPE_MASK
    max_timestamp = header.max_timestamp
    unzigzag = _UNZIGZAG_2
    records: list[Record] = []
    append = records.append
    previous_delta = -1
    i = 0
    try:
        for i in range(count):
            if p >= end:
                raise CorruptBatch(f"record_count is {count} but the records end after {i}",
                                   "RecordBatch.record_count")
            b = data[p]
            if b < 0x80:
                length = unzigzag[b]
                p += 1
            elif data[p + 1] < 0x80:
                length = unzigzag[b & 0x7F | data[p + 1] << 7]
                p += 2
            else:
                length, p = _varint(data, p, end, i, "length")
            record_end = p + length
            if length < RECORD_BODY_BYTES_MIN or record_end > end:
                raise CorruptBatch(f"record {i}: length {length} does not fit the "
                                   f"{end - p} bytes left", "Record.length")
            p += 1  # attributes: unused by Kafka
            b = data[p]
            if b < 0x80:
                timestamp_delta = unzigzag[b]
                p += 1
            elif data[p + 1] < 0x80:
                timestamp_delta = unzigzag[b & 0x7F | data[p + 1] << 7]
                p += 2
            else:
                timestamp_delta, p = _varint(data, p, record_end, i, "timestamp delta",
                                             UVARINT64_BYTES_MAX)
            b = data[p]
            if b < 0x80:
                offset_delta = unzigzag[b]
                p += 1
            elif data[p + 1] < 0x80:
                offset_delta = unzigzag[b & 0x7F | data[p + 1] << 7]
                p += 2
            else:
                offset_delta, p = _varint(data, p, record_end, i, "offset delta")
            if offset_delta <= previous_delta or offset_delta > last_offset_delta:
                raise CorruptBatch(f"record {i}: offset delta {offset_delta} is not between the "
                                   f"previous record's ({previous_delta}) and the batch's last "
                                   f"({last_offset_delta})", "Record.offset_delta")
            previous_delta = offset_delta
            b = data[p]
            if b < 0x80:
                n = unzigzag[b]
                p += 1
            elif data[p + 1] < 0x80:
                n = unzigzag[b & 0x7F | data[p + 1] << 7]
                p += 2
            else:
                n, p = _varint(data, p, record_end, i, "key length")
            if n < 0:
                if n != -1:
                    raise _bad_length(i, "key", n, p, record_end)
                key = None
            else:
                q = p + n
                if q > record_end:
                    raise _bad_length(i, "key", n, p, record_end)
                key = data[p:q]
                p = q
            b = data[p]
            if b < 0x80:
                n = unzigzag[b]
                p += 1
            elif data[p + 1] < 0x80:
                n = unzigzag[b & 0x7F | data[p + 1] << 7]
                p += 2
            else:
                n, p = _varint(data, p, record_end, i, "value length")
            if n < 0:
                if n != -1:
                    raise _bad_length(i, "value", n, p, record_end)
                value = None
            else:
                q = p + n
                if q > record_end:
                    raise _bad_length(i, "value", n, p, record_end)
                value = data[p:q]
                p = q
            if data[p] == 0:  # header count 0, the usual case
                headers: list[tuple[str, bytes | None]] = []
                p += 1
            else:
                headers, p = _decode_headers(data, p, record_end, i)
            if p != record_end:
                raise CorruptBatch(f"record {i}: its fields end {p - record_end:+d} bytes from "
                                   f"where its length ({length}) says", "Record.length")
            append(Record(base_offset + offset_delta,
                          max_timestamp if log_append_time else base_timestamp + timestamp_delta,
                          key, value, headers))
    except IndexError:
        # A varint read past the end of data: the last record is cut short. (Reads past a
        # record's own end, inside data, are caught by the length check instead.)
        raise CorruptBatch(f"record {i}: cut short by the end of the batch", "Record") from None
    if p != end:
        raise CorruptBatch(f"{end - p} bytes after the last of record_count {count} records",
                           "RecordBatch.records")
    return records


def _varint(data: bytes, p: int, end: int, i: int, field: str,
            bytes_max: int = UVARINT32_BYTES_MAX) -> tuple[int, int]:
    """Record i's zigzag varint field at p, which must end by end and fit 32 (or 64) bits."""
    try:
        raw, q = read_uvarint(data, p, bytes_max)
    except DecodeError as exc:
        raise CorruptBatch(f"record {i}: {field}: {exc}", f"Record.{field}") from None
    if q > end:
        raise CorruptBatch(f"record {i}: {field} runs past the end of the record",
                           f"Record.{field}")
    if raw >> (64 if bytes_max == UVARINT64_BYTES_MAX else 32):
        raise CorruptBatch(f"record {i}: {field} varint overflows "
                           f"{64 if bytes_max == UVARINT64_BYTES_MAX else 32} bits",
                           f"Record.{field}")
    return (raw >> 1) ^ -(raw & 1), q


def _bad_length(i: int, field: str, n: int, p: int, end: int,
                nullable: bool = True) -> CorruptBatch:
    if n < -1 or (n < 0 and not nullable):
        return CorruptBatch(f"record {i}: {field} length {n} is negative"
                            + ("" if nullable else f" ({field} cannot be null)"),
                            f"Record.{field}_length")
    return CorruptBatch(f"record {i}: {field} length {n} runs past the end of the record "
                        f"({end - p} bytes left)", f"Record.{field}_length")


def _decode_headers(data: bytes, p: int, end: int,
                    i: int) -> tuple[list[tuple[str, bytes | None]], int]:
    count, p = _varint(data, p, end, i, "header count")
    if count < 0 or count > (end - p) // HEADER_BYTES_MIN:
        raise CorruptBatch(f"record {i}: header count {count} does not fit the {end - p} bytes "
                           "left", "Record.header_count")
    headers = []
    for j in range(count):
        n, p = _varint(data, p, end, i, f"header {j} key length")
        if n < 0 or p + n > end:
            raise _bad_length(i, f"header {j} key", n, p, end, nullable=False)
        try:
            name = data[p:p + n].decode()
        except UnicodeDecodeError as exc:
            raise CorruptBatch(f"record {i}: header {j} key is not UTF-8: {exc}",
                               "Record.header_key") from None
        p += n
        n, p = _varint(data, p, end, i, f"header {j} value length")
        if n == -1:
            value = None
        elif n < 0 or p + n > end:
            raise _bad_length(i, f"header {j} value", n, p, end)
        else:
            value = data[p:p + n]
            p += n
        headers.append((name, value))
    return headers, p
