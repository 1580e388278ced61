"""The reference codec: every declared message built from construct primitives.

It reads the same layouts as the fast codec (protocol.schema.layout) but shares none of its code,
so the two check each other in tests. At run time it has one job: when the fast codec meets bad
input, it decodes (or encodes) the same bytes again slowly and reports the path of the field where
construct gave up, e.g. "MetadataResponse.topics.partitions.isr_nodes".
"""

from __future__ import annotations

from typing import Any

import construct as c

from . import primitives as p
from .schema import Message, TypeSpec, Wire, layout

_FIXED = {Wire.INT8: p.Int8, Wire.INT16: p.Int16, Wire.INT32: p.Int32, Wire.INT64: p.Int64,
          Wire.UINT16: p.UInt16, Wire.UINT32: p.UInt32, Wire.FLOAT64: p.Float64,
          Wire.BOOL: p.Bool, Wire.UUID: p.Uuid}
_TAGS = "_tagged_fields"


class _NullableStruct(c.Construct):  # type: ignore[misc]
    """A nullable nested struct: a presence byte (-1 absent, 1 present), then the struct."""

    def __init__(self, sub: c.Construct) -> None:
        super().__init__()
        self.sub = sub

    def _parse(self, stream: Any, context: Any, path: str) -> Any:
        if p.Int8._parsereport(stream, context, path) < 0:
            return None
        return self.sub._parsereport(stream, context, path)

    def _build(self, obj: Any, stream: Any, context: Any, path: str) -> Any:
        p.Int8._build(-1 if obj is None else 1, stream, context, path)
        if obj is not None:
            self.sub._build(obj, stream, context, path)
        return obj


class _MessageAdapter(c.Adapter):  # type: ignore[misc]
    """Turns construct's containers into our Message objects and back."""

    def __init__(self, sub: c.Construct, cls: type[Message], version: int, flexible: bool) -> None:
        super().__init__(sub)
        self.cls = cls
        self.fields = [f for f in layout(cls) if f.present(version)]
        self.tagged = [f for f in self.fields if flexible and f.is_tagged(version)]

    def _decode(self, obj: Any, context: Any, path: str) -> Message:
        values = {f.name: obj[f.name] for f in self.fields if f not in self.tagged}
        if self.tagged:
            values.update(obj[_TAGS])
        return self.cls(**values)

    def _encode(self, obj: Message, context: Any, path: str) -> dict[str, Any]:
        values = {f.name: getattr(obj, f.name) for f in self.fields if f not in self.tagged}
        tags = {f.name: getattr(obj, f.name) for f in self.tagged
                if getattr(obj, f.name) != f.default_value()}
        values[_TAGS] = tags
        return values


_CACHE: dict[tuple[type[Message], int, bool], c.Construct] = {}


def message_construct(cls: type[Message], version: int, flexible: bool) -> c.Construct:
    key = (cls, version, flexible)
    if key not in _CACHE:
        fields = [f for f in layout(cls) if f.present(version)]
        subs = [f.name / _type_construct(f.type, f.is_nullable(version), version, flexible)
                for f in fields if not (flexible and f.is_tagged(version))]
        if flexible:
            known = {f.tag: (f.name, _type_construct(f.type, f.is_nullable(version), version,
                                                     flexible))
                     for f in fields if f.is_tagged(version) and f.tag is not None}
            subs.append(_TAGS / p.TaggedFields(known))
        _CACHE[key] = _MessageAdapter(c.Struct(*subs), cls, version, flexible)
    return _CACHE[key]


def _type_construct(t: TypeSpec, nullable: bool, version: int, flexible: bool) -> c.Construct:
    if t.wire in _FIXED:
        return _FIXED[t.wire]
    if t.wire == Wire.STRING:
        return p.String(flexible, nullable)
    if t.wire in (Wire.BYTES, Wire.RECORDS):
        return p.Bytes(flexible, nullable or t.wire == Wire.RECORDS)
    if t.wire == Wire.ARRAY:
        assert t.item is not None
        return p.Array(_type_construct(t.item, False, version, flexible), flexible, nullable)
    assert t.wire == Wire.STRUCT and t.struct is not None
    sub = message_construct(t.struct, version, flexible)
    return _NullableStruct(sub) if nullable else sub


def decode(cls: type[Message], version: int, flexible: bool, data: bytes) -> Message:
    return message_construct(cls, version, flexible).parse(data)  # type: ignore[no-any-return]


def encode(msg: Message, version: int, flexible: bool) -> bytes:
    return message_construct(type(msg), version, flexible).build(msg)  # type: ignore[no-any-return]


def _path(cls: type[Message], exc: c.ConstructError) -> str:
    raw = getattr(exc, "path", None) or ""
    parts = [s.strip() for s in raw.split("->")]
    names = [s for s in parts if s and not s.startswith("(") and s != _TAGS]
    return ".".join([cls.__name__, *names])


def failing_path_decode(cls: type[Message], version: int, flexible: bool,
                        data: bytes) -> str | None:
    """Path of the field where decoding `data` fails, or None if the reference decodes it."""
    try:
        decode(cls, version, flexible, data)
    except c.ConstructError as exc:
        return _path(cls, exc)
    except (UnicodeDecodeError, ValueError, OverflowError):
        return None
    return None


def failing_path_encode(cls: type[Message], version: int, flexible: bool,
                        msg: Message) -> str | None:
    try:
        encode(msg, version, flexible)
    except c.ConstructError as exc:
        return _path(cls, exc)
    except Exception:  # noqa: BLE001 - a diagnosis is best effort; the caller has the cause
        return None
    return None
