"""RecordBatch v2 at the header level: read, check, stamp; the records themselves stay packed.

Layout (big-endian), 61 bytes before the first record:

    offset  size  field
         0     8  base_offset             } outside the CRC: the leader assigns both
         8     4  batch_length            } (bytes after this field)
        12     4  partition_leader_epoch  }
        16     1  magic (2)
        17     4  crc (CRC-32C of bytes 21..end, unsigned)
        21     2  attributes: bits 0-2 compression, 3 timestamp type, 4 transactional, 5 control
        23     4  last_offset_delta
        27     8  base_timestamp
        35     8  max_timestamp
        43     8  producer_id
        51     2  producer_epoch
        53     4  base_sequence
        57     4  record_count
        61        records...

Brokers use this module on the hot path: a leader validates each incoming batch (structure and CRC)
and stamps base_offset and partition_leader_epoch in place without touching the CRC; storage walks
segments batch by batch. Magic 0 and 1 message sets are refused with a clear error.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from .errors import DecodeError

LOG_OVERHEAD = 12  # base_offset + batch_length: bytes not counted in batch_length
BATCH_HEADER_BYTES = 61
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
CURRENT_MAGIC = 2
# batch_length counts from partition_leader_epoch to the end: at least the rest of the header.
BATCH_LENGTH_MIN = BATCH_HEADER_BYTES - LOG_OVERHEAD

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_OFFSET_AND_EPOCH = struct.Struct(">qii")  # base_offset, batch_length, partition_leader_epoch
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")


class CorruptBatch(DecodeError):
    """A batch whose structure or CRC is wrong, or whose format (magic) we do not accept."""


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def size(self) -> int:
        """Bytes the whole batch takes, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return (self.attributes & TIMESTAMP_TYPE_MASK) >> 3

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at pos. CorruptBatch if cut short, badly sized or not magic 2."""
    if len(buf) - pos < LOG_OVERHEAD + 5:
        raise CorruptBatch(f"{len(buf) - pos} bytes is too short for a record batch header",
                           "RecordBatch")
    magic = buf[pos + MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        raise CorruptBatch(f"message format v{magic} (magic {magic}) is not supported: "
                           "only RecordBatch v2 (magic 2) is accepted", "RecordBatch.magic")
    if len(buf) - pos < BATCH_HEADER_BYTES:
        raise CorruptBatch(f"{len(buf) - pos} bytes is too short for a record batch header",
                           "RecordBatch")
    header = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if header.batch_length < BATCH_LENGTH_MIN:
        raise CorruptBatch(f"batch_length {header.batch_length} is below the header size",
                           "RecordBatch.batch_length")
    if header.last_offset_delta < 0 or header.record_count < 0:
        raise CorruptBatch("negative last_offset_delta or record_count", "RecordBatch")
    return header


def crc_of(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    """CRC-32C of the checked part of the batch at pos that takes size bytes."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size])


def check_whole(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Header of the batch at pos after checking it is whole (its CRC is not checked)."""
    header = read_header(buf, pos)
    if len(buf) - pos < header.size:
        raise CorruptBatch(f"batch of {header.size} bytes cut short at {len(buf) - pos}",
                           "RecordBatch.batch_length")
    return header


def check(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Header of the batch at pos after checking it is whole and its CRC is right."""
    header = check_whole(buf, pos)
    actual = crc_of(buf, pos, header.size)
    if actual != header.crc:
        raise CorruptBatch(f"CRC mismatch at offset {header.base_offset}: stored "
                           f"{header.crc:#010x}, computed {actual:#010x}", "RecordBatch.crc")
    return header


def crc_valid(buf: bytes | bytearray | memoryview, pos: int = 0) -> bool:
    try:
        check(buf, pos)
    except CorruptBatch:
        return False
    return True


def check_all(buf: bytes | bytearray | memoryview) -> list[BatchHeader]:
    """Every batch in buf, each checked; CorruptBatch unless buf is whole batches end to end."""
    headers = []
    pos = 0
    end = len(buf)
    while pos < end:
        header = check(buf, pos)
        headers.append(header)
        pos += header.size
    return headers


def iter_headers(buf: bytes | bytearray | memoryview, pos: int = 0,
                 end: int | None = None) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch from pos; stops before a cut-short tail.
    Does not check CRCs (use check for that)."""
    end = len(buf) if end is None else end
    while end - pos >= BATCH_HEADER_BYTES:
        header = read_header(buf, pos)
        if end - pos < header.size:
            return
        yield pos, header
        pos += header.size


def stamp(buf: bytearray | memoryview, pos: int, base_offset: int,
          partition_leader_epoch: int) -> None:
    """Set base_offset and partition_leader_epoch in place. Both lie outside the CRC."""
    _I64.pack_into(buf, pos, base_offset)
    _I32.pack_into(buf, pos + 12, partition_leader_epoch)


def set_log_append_time(buf: bytearray | memoryview, pos: int, header: BatchHeader,
                        now_ms: int) -> BatchHeader:
    """Mark the batch at pos LogAppendTime with max_timestamp now_ms, as a leader does for a
    topic with message.timestamp.type=LogAppendTime, and recompute its CRC (both fields lie
    inside it); the header as it now is. Consumers take every record's timestamp from
    max_timestamp in such a batch."""
    attributes = header.attributes | TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, pos + 21, attributes)
    _I64.pack_into(buf, pos + 35, now_ms)
    crc = crc_of(buf, pos, header.size)
    _U32.pack_into(buf, pos + 17, crc)
    return header._replace(attributes=attributes, max_timestamp=now_ms, crc=crc)


def shift_offsets(buf: bytearray, first_offset: int, partition_leader_epoch: int) -> int:
    """Stamp every batch in buf with consecutive offsets from first_offset; return the next one."""
    offset = first_offset
    for pos, header in list(iter_headers(buf)):
        stamp(buf, pos, offset, partition_leader_epoch)
        offset += header.last_offset_delta + 1
    return offset
