"""Kafka's variable-length integers: unsigned LEB128 and zigzag, for 32 and 64 bits.

Readers take (buffer, position) and return (value, new position). They refuse an encoding longer
than the type allows (5 bytes for 32 bits, 10 for 64), so a stream of 0x80 bytes cannot make a
reader loop or build a huge number.
"""

from __future__ import annotations

from .errors import DecodeError

UVARINT32_BYTES_MAX = 5
UVARINT64_BYTES_MAX = 10
_TABLE_SIZE = 1 << 14


def _encode_uvarint_slow(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_UVARINT_TABLE = [_encode_uvarint_slow(i) for i in range(_TABLE_SIZE)]


def encode_uvarint(value: int) -> bytes:
    """Unsigned varint of a non-negative value below 2**64."""
    if 0 <= value < _TABLE_SIZE:
        return _UVARINT_TABLE[value]
    if value < 0 or value >= 1 << 64:
        raise ValueError(f"unsigned varint out of range: {value}")
    return _encode_uvarint_slow(value)


def encode_varint(value: int) -> bytes:
    """Zigzag varint of a signed value (int32 or int64 range)."""
    if -(1 << 63) <= value < (1 << 63):
        return encode_uvarint((value << 1) ^ (value >> 63))
    raise ValueError(f"varint out of range: {value}")


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int,
                 bytes_max: int = UVARINT32_BYTES_MAX) -> tuple[int, int]:
    """Read an unsigned varint at pos; DecodeError if cut short or longer than bytes_max."""
    result = 0
    shift = 0
    end = len(buf)
    for _ in range(bytes_max):
        if pos >= end:
            raise DecodeError("varint cut short by the end of the buffer")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
    raise DecodeError(f"varint longer than {bytes_max} bytes")


def read_varint(buf: bytes | bytearray | memoryview, pos: int,
                bytes_max: int = UVARINT32_BYTES_MAX) -> tuple[int, int]:
    """Read a zigzag varint (bytes_max 5 for int32, 10 for int64)."""
    raw, pos = read_uvarint(buf, pos, bytes_max)
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    return read_varint(buf, pos, UVARINT64_BYTES_MAX)
