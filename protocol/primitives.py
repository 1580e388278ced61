"""Kafka's primitive wire types as construct declarations.

These are the readable, declarative form of every type the protocol uses. They are slow next to
the generated codec (docs/design.md: construct measured at ~20x hand-written struct code), so they
serve where speed does not matter: the reference codec (protocol.reference) that names the field
where bad input broke and cross-checks the fast codec in tests, and file formats read once.

Nullable forms use length -1 (classic) or 0 (compact, where lengths are stored plus one).
Compact lengths and tagged fields use unsigned varints; records use zigzag varints.
"""

from __future__ import annotations

import uuid
from typing import Any

import construct as c

Int8 = c.Int8sb
Int16 = c.Int16sb
Int32 = c.Int32sb
Int64 = c.Int64sb
UInt16 = c.Int16ub
UInt32 = c.Int32ub
Float64 = c.Float64b
Bool = c.Flag


class _UuidAdapter(c.Adapter):  # type: ignore[misc]
    def _decode(self, obj: bytes, context: Any, path: str) -> uuid.UUID:
        return uuid.UUID(bytes=obj)

    def _encode(self, obj: uuid.UUID, context: Any, path: str) -> bytes:
        return obj.bytes


Uuid = _UuidAdapter(c.Bytes(16))


class UnsignedVarInt(c.Construct):  # type: ignore[misc]
    """Unsigned LEB128, refusing encodings longer than bytes_max."""

    def __init__(self, bytes_max: int) -> None:
        super().__init__()
        self.bytes_max = bytes_max

    def _parse(self, stream: Any, context: Any, path: str) -> int:
        result = 0
        for i in range(self.bytes_max):
            b = c.stream_read(stream, 1, path)[0]
            result |= (b & 0x7F) << (7 * i)
            if b < 0x80:
                return int(result)
        raise c.ExplicitError(f"varint longer than {self.bytes_max} bytes", path=path)

    def _build(self, obj: int, stream: Any, context: Any, path: str) -> int:
        if obj < 0 or obj >= 1 << (7 * self.bytes_max):
            raise c.ExplicitError(f"unsigned varint out of range: {obj}", path=path)
        value = obj
        out = bytearray()
        while value >= 0x80:
            out.append((value & 0x7F) | 0x80)
            value >>= 7
        out.append(value)
        c.stream_write(stream, bytes(out), len(out), path)
        return obj


class ZigZagVarInt(c.Adapter):  # type: ignore[misc]
    """Signed varint: zigzag-mapped, then unsigned LEB128."""

    def __init__(self, bits: int) -> None:
        super().__init__(UnsignedVarInt(5 if bits == 32 else 10))
        self.bits = bits

    def _decode(self, obj: int, context: Any, path: str) -> int:
        return (obj >> 1) ^ -(obj & 1)

    def _encode(self, obj: int, context: Any, path: str) -> int:
        return (obj << 1) ^ (obj >> (self.bits - 1))


UnsignedVarInt32 = UnsignedVarInt(5)
UnsignedVarInt64 = UnsignedVarInt(10)
VarInt = ZigZagVarInt(32)
VarLong = ZigZagVarInt(64)


class _Sized(c.Construct):  # type: ignore[misc]
    """A length-prefixed value: string, bytes or array, classic or compact, nullable or not."""

    def __init__(self, kind: str, compact: bool, nullable: bool, item: Any = None) -> None:
        super().__init__()
        self.kind = kind
        self.compact = compact
        self.nullable = nullable
        self.item = item

    def _read_length(self, stream: Any, context: Any, path: str) -> int:
        if self.compact:
            return int(UnsignedVarInt32._parsereport(stream, context, path)) - 1
        prefix = Int16 if self.kind == "string" else Int32
        return int(prefix._parsereport(stream, context, path))

    def _write_length(self, n: int, stream: Any, context: Any, path: str) -> None:
        if self.compact:
            UnsignedVarInt32._build(n + 1, stream, context, path)
        else:
            (Int16 if self.kind == "string" else Int32)._build(n, stream, context, path)

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        n = self._read_length(stream, context, path)
        if n < 0:
            if n == -1 and self.nullable:
                return None
            raise c.ExplicitError(f"length {n} where null is not allowed", path=path)
        if self.kind == "array":
            return [self.item._parsereport(stream, context, path) for _ in range(n)]
        raw = c.stream_read(stream, n, path)
        return raw.decode("utf-8") if self.kind == "string" else raw

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        if obj is None:
            if not self.nullable:
                raise c.ExplicitError("null where the version does not allow it", path=path)
            self._write_length(-1, stream, context, path)
            return obj
        if self.kind == "array":
            self._write_length(len(obj), stream, context, path)
            for item in obj:
                self.item._build(item, stream, context, path)
            return obj
        raw = obj.encode("utf-8") if self.kind == "string" else bytes(obj)
        self._write_length(len(raw), stream, context, path)
        c.stream_write(stream, raw, len(raw), path)
        return obj


def String(compact: bool = False, nullable: bool = False) -> c.Construct:
    return _Sized("string", compact, nullable)


def Bytes(compact: bool = False, nullable: bool = False) -> c.Construct:
    return _Sized("bytes", compact, nullable)


def Array(item: c.Construct, compact: bool = False, nullable: bool = False) -> c.Construct:
    return _Sized("array", compact, nullable, item)


class TaggedFields(c.Construct):  # type: ignore[misc]
    """A tagged-field section: count, then (tag, size, value) each. Known tags decode with their
    construct into a dict keyed by field name; unknown tags are skipped by their size."""

    def __init__(self, known: dict[int, tuple[str, c.Construct]]) -> None:
        super().__init__()
        self.known = known

    def _parse(self, stream: Any, context: Any, path: str) -> dict[str, Any]:
        values: dict[str, Any] = {}
        for _ in range(UnsignedVarInt32._parsereport(stream, context, path)):
            tag = UnsignedVarInt32._parsereport(stream, context, path)
            size = UnsignedVarInt32._parsereport(stream, context, path)
            raw = c.stream_read(stream, size, path)
            if tag in self.known:
                name, sub = self.known[tag]
                values[name] = sub.parse(raw)
        return values

    def _build(self, obj: dict[str, Any], stream: Any, context: Any, path: str) -> Any:
        entries = []
        for tag in sorted(self.known):
            name, sub = self.known[tag]
            if name in obj:
                entries.append((tag, sub.build(obj[name])))
        UnsignedVarInt32._build(len(entries), stream, context, path)
        for tag, raw in entries:
            UnsignedVarInt32._build(tag, stream, context, path)
            UnsignedVarInt32._build(len(raw), stream, context, path)
            c.stream_write(stream, raw, len(raw), path)
        return obj
