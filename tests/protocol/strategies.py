"""Hypothesis strategies for any declared message at any version, derived from its layout."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from epochlog.protocol.schema import Message, TypeSpec, Wire, layout

_INTS = {Wire.INT8: 8, Wire.INT16: 16, Wire.INT32: 32, Wire.INT64: 64}


def value_strategy(t: TypeSpec, nullable: bool, version: int) -> st.SearchStrategy[Any]:
    s: st.SearchStrategy[Any]
    if t.wire in _INTS:
        bits = _INTS[t.wire]
        s = st.integers(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    elif t.wire == Wire.UINT16:
        s = st.integers(0, 0xFFFF)
    elif t.wire == Wire.UINT32:
        s = st.integers(0, 0xFFFFFFFF)
    elif t.wire == Wire.FLOAT64:
        s = st.floats(allow_nan=False)
    elif t.wire == Wire.BOOL:
        s = st.booleans()
    elif t.wire == Wire.UUID:
        s = st.uuids()
    elif t.wire == Wire.STRING:
        s = st.text(max_size=12)
    elif t.wire == Wire.BYTES:
        s = st.binary(max_size=12)
    elif t.wire == Wire.RECORDS:
        return st.none() | st.binary(max_size=40)
    elif t.wire == Wire.ARRAY:
        assert t.item is not None
        s = st.lists(value_strategy(t.item, False, version), max_size=3)
    else:
        assert t.struct is not None
        s = message_strategy(t.struct, version)
    return st.none() | s if nullable else s


def message_strategy(cls: type[Message], version: int) -> st.SearchStrategy[Message]:
    fields = {f.name: value_strategy(f.type, f.is_nullable(version), version)
              for f in layout(cls) if f.present(version)}
    return st.builds(cls, **fields)


def project(msg: Any, version: int) -> Any:
    """The message as a decoder of `version` sees it: absent fields back to their defaults."""
    if not isinstance(msg, Message):
        return msg
    values = {}
    for f in layout(type(msg)):
        if not f.present(version):
            values[f.name] = f.default_value()
            continue
        v = getattr(msg, f.name)
        values[f.name] = ([project(x, version) for x in v] if isinstance(v, list)
                          else project(v, version))
    return type(msg)(**values)
