"""How API messages are declared: typed classes whose annotations carry the wire layout.

Theory of operation
-------------------
Every request, response and nested struct is a `Message` (a msgspec.Struct). Its annotations say
two things at once: the Python type a handler or client sees, and the wire layout. Integers name
their width through the aliases below (`i32`, `i64`, ...); anything else is inferred (`str` is a
string, `bytes` bytes, `bool` a boolean, `uuid.UUID` a uuid, `list[X]` an array, a Message
subclass a nested struct). A `V(...)` marker says in which versions the field exists, in which it
may be null, and whether it is a tagged field. Field order is wire order.

    class Partition(Message):
        partition_index: i32 = 0
        leader_epoch: Annotated[i32, V("7+")] = -1

`layout(cls)` turns the annotations into `FieldSpec` records once per class; the fast codec
(`codegen`) and the construct reference codec (`reference`) are both built from those records, so
the declaration is the single source of truth. Every field has a default, as in Kafka's generated
messages: a field absent from a version decodes to its default and is not written.
"""

from __future__ import annotations

import typing
import uuid
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

ZERO_UUID = uuid.UUID(int=0)


class Wire:
    """Wire type names. Fixed-width types carry their struct format character."""

    INT8 = "b"
    INT16 = "h"
    INT32 = "i"
    INT64 = "q"
    UINT16 = "H"
    UINT32 = "I"
    FLOAT64 = "d"
    BOOL = "?"
    UUID = "uuid"
    STRING = "string"
    BYTES = "bytes"
    RECORDS = "records"
    ARRAY = "array"
    STRUCT = "struct"

    FIXED_SIZE = {"b": 1, "h": 2, "i": 4, "q": 8, "H": 2, "I": 4, "d": 8, "?": 1, "uuid": 16}


@dataclass(frozen=True)
class _WireMark:
    wire: str


i8 = Annotated[int, _WireMark(Wire.INT8)]
i16 = Annotated[int, _WireMark(Wire.INT16)]
i32 = Annotated[int, _WireMark(Wire.INT32)]
i64 = Annotated[int, _WireMark(Wire.INT64)]
u16 = Annotated[int, _WireMark(Wire.UINT16)]
u32 = Annotated[int, _WireMark(Wire.UINT32)]
f64 = Annotated[float, _WireMark(Wire.FLOAT64)]
# Record batches travel as opaque (nullable) bytes; protocol.records reads them.
Records = Annotated[bytes | None, _WireMark(Wire.RECORDS)]


Versions = tuple[int, int]  # inclusive range; ALL = every version
ALL: Versions = (0, 1 << 15)
NONE: Versions = (1, 0)


def parse_versions(text: str | None) -> Versions:
    """'3+' -> (3, ALL), '2-5' -> (2, 5), '4' -> (4, 4), 'none' or None -> an empty range."""
    if text is None or text == "none":
        return NONE
    if text.endswith("+"):
        return (int(text[:-1]), ALL[1])
    if "-" in text:
        lo, hi = text.split("-")
        return (int(lo), int(hi))
    return (int(text), int(text))


def in_range(version: int, versions: Versions) -> bool:
    return versions[0] <= version <= versions[1]


@dataclass(frozen=True)
class V:
    """Field metadata: versions it exists in, versions it may be null in, tag if tagged."""

    versions: str = "0+"
    nullable: str | None = None
    tag: int | None = None
    tagged: str | None = None  # versions in which it travels as a tagged field


class Message(msgspec.Struct, gc=False, repr_omit_defaults=True):
    """Base of every declared message and nested struct."""


@dataclass(frozen=True)
class TypeSpec:
    """The wire shape of a value: a primitive, an array of a TypeSpec, or a nested struct."""

    wire: str
    item: TypeSpec | None = None  # for arrays
    struct: type[Message] | None = None  # for structs

    def describe(self) -> str:
        if self.wire == Wire.ARRAY:
            assert self.item is not None
            return f"[]{self.item.describe()}"
        if self.wire == Wire.STRUCT:
            assert self.struct is not None
            return self.struct.__name__
        return _WIRE_NAMES.get(self.wire, self.wire)


_WIRE_NAMES = {"b": "int8", "h": "int16", "i": "int32", "q": "int64", "H": "uint16",
               "I": "uint32", "d": "float64", "?": "bool"}


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: TypeSpec
    versions: Versions
    nullable: Versions
    tag: int | None
    tagged: Versions
    default: Any  # the default value; for a mutable default, the factory that makes one
    index: int  # position in the struct, for positional construction
    factory: bool = False  # default is a factory (list, or a nested Message class)

    def present(self, version: int) -> bool:
        return in_range(version, self.versions)

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and in_range(version, self.tagged)

    def is_nullable(self, version: int) -> bool:
        return in_range(version, self.nullable)

    def default_value(self) -> Any:
        return self.default() if self.factory else self.default


def _type_spec(tp: Any, owner: str, name: str) -> TypeSpec:
    marks = []
    if typing.get_origin(tp) is Annotated:
        marks = [m for m in tp.__metadata__ if isinstance(m, _WireMark)]
        tp = tp.__origin__
    if marks:
        return TypeSpec(marks[-1].wire)
    args = typing.get_args(tp)
    if args and type(None) in args:  # X | None: nullability is declared with V(nullable=...)
        rest = [a for a in args if a is not type(None)]
        assert len(rest) == 1, f"{owner}.{name}: only X | None unions are allowed"
        return _type_spec(rest[0], owner, name)
    if typing.get_origin(tp) is list:
        return TypeSpec(Wire.ARRAY, item=_type_spec(args[0], owner, name))
    if isinstance(tp, type) and issubclass(tp, Message):
        return TypeSpec(Wire.STRUCT, struct=tp)
    simple = {str: Wire.STRING, bytes: Wire.BYTES, bool: Wire.BOOL, uuid.UUID: Wire.UUID}
    if tp in simple:
        return TypeSpec(simple[tp])
    raise TypeError(f"{owner}.{name}: cannot tell the wire type of {tp!r}; use i8/i16/i32/i64")


_LAYOUTS: dict[type, tuple[FieldSpec, ...]] = {}


def layout(cls: type[Message]) -> tuple[FieldSpec, ...]:
    """The wire layout of a message class, in declaration order (cached)."""
    cached = _LAYOUTS.get(cls)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(cls, include_extras=True)
    defaults = dict(zip(cls.__struct_fields__[-len(cls.__struct_defaults__):],
                        cls.__struct_defaults__, strict=True)) if cls.__struct_defaults__ else {}
    specs = []
    for index, name in enumerate(cls.__struct_fields__):
        hint = hints[name]
        meta = next((m for m in getattr(hint, "__metadata__", ()) if isinstance(m, V)), V())
        if name not in defaults:
            raise TypeError(f"{cls.__name__}.{name}: every message field needs a default")
        default = defaults[name]
        factory = type(default).__name__ == "Factory"  # msgspec's wrapper for [] and factories
        if factory:
            default = default.factory
        specs.append(FieldSpec(
            name=name,
            type=_type_spec(hint, cls.__name__, name),
            versions=parse_versions(meta.versions),
            nullable=parse_versions(meta.nullable),
            tag=meta.tag,
            tagged=parse_versions(meta.tagged) if meta.tag is not None else NONE,
            default=default,
            index=index,
            factory=factory,
        ))
    result = tuple(specs)
    _LAYOUTS[cls] = result
    return result


def walk_structs(cls: type[Message]) -> list[type[Message]]:
    """cls and every struct class nested in it, depth first, each once."""
    seen: list[type[Message]] = []

    def visit(c: type[Message]) -> None:
        if c in seen:
            return
        seen.append(c)
        for f in layout(c):
            t = f.type
            while t.wire == Wire.ARRAY:
                assert t.item is not None
                t = t.item
            if t.wire == Wire.STRUCT:
                assert t.struct is not None
                visit(t.struct)

    visit(cls)
    return seen
