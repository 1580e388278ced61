"""Fast encoders and decoders, generated as Python source from message layouts.

Theory of operation
-------------------
A pure interpreter over the layout would spend most of its time deciding what to do next. Instead,
for each (message class, version, flexible) we write out the straight-line Python a careful person
would write by hand: consecutive fixed-width fields read with one precompiled `struct.Struct`,
arrays of integers read with one unpack, nested structs inlined, fields absent from the version
replaced by their default, and the result built with a positional constructor call. The source is
compiled once, on first use, and cached.

Rules the generated code keeps:
- a decoder never allocates more than the input allows: every length is checked against the bytes
  that remain before a slice or a list is made;
- anything wrong raises DecodeError / EncodeError; a low-level exception (struct.error, a bad
  UTF-8 sequence, ...) is turned into one by `codec`, which asks the reference codec for the path
  of the field that broke;
- unknown tagged fields are skipped by their declared size.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from .errors import DecodeError
from .schema import FieldSpec, Message, TypeSpec, Wire, layout
from .varint import encode_uvarint, read_uvarint

Decoder = Callable[[bytes, int], tuple[Any, int]]
Encoder = Callable[[Any, list[bytes]], None]


def _read_compact_len(buf: bytes, pos: int) -> tuple[int, int]:
    n, pos = read_uvarint(buf, pos)
    return n - 1, pos


def _raise(message: str, field: str) -> None:
    raise DecodeError(message, field)


_ENV_BASE: dict[str, Any] = {
    "_uvarint": read_uvarint,
    "_clen": _read_compact_len,
    "_uv": encode_uvarint,
    "_UUID": uuid.UUID,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_raise": _raise,
    "_I16": struct.Struct(">h"),
    "_I32": struct.Struct(">i"),
    "_NULL16": b"\xff\xff",
    "_NULL32": b"\xff\xff\xff\xff",
}


class _Writer:
    """Collects generated lines with indentation, unique names and constants."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 1
        self.counter = 0
        self.env: dict[str, Any] = dict(_ENV_BASE)

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def name(self, hint: str) -> str:
        self.counter += 1
        return f"{hint}{self.counter}"

    def const(self, value: Any, hint: str = "_c") -> str:
        for k, v in self.env.items():
            if v is value:
                return k
        key = self.name(hint)
        self.env[key] = value
        return key

    def indent(self) -> None:
        self.depth += 1

    def dedent(self) -> None:
        self.depth -= 1


def _default_expr(w: _Writer, f: FieldSpec) -> str:
    d = f.default
    if f.factory:
        return "[]" if d is list else f"{w.const(d, '_D')}()"
    if isinstance(d, (bool, int, float, str, bytes)) or d is None:
        return repr(d)
    return w.const(d, "_d")


def _fixed_groups(fields: list[FieldSpec]) -> list[list[FieldSpec]]:
    """Split fields into runs: consecutive fixed-width primitives share one run."""
    runs: list[list[FieldSpec]] = []
    for f in fields:
        fixed = f.type.wire in Wire.FIXED_SIZE
        if fixed and runs and runs[-1][0].type.wire in Wire.FIXED_SIZE:
            runs[-1].append(f)
        else:
            runs.append([f])
    return runs


def _format_char(wire: str) -> str:
    return "16s" if wire == Wire.UUID else wire


def _struct_format(fields: list[FieldSpec]) -> str:
    return ">" + "".join(_format_char(f.type.wire) for f in fields)


# --------------------------------------------------------------------------------------------
# decoding


class _DecodeGen:
    def __init__(self, version: int, flexible: bool) -> None:
        self.v = version
        self.flex = flexible
        self.w = _Writer()

    def struct(self, cls: type[Message], out: str, path: str) -> None:
        """Emit code that decodes one `cls` at `pos` into variable `out`."""
        w = self.w
        fields = [f for f in layout(cls) if f.present(self.v)]
        plain = [f for f in fields if not f.is_tagged(self.v)]
        tagged = [f for f in fields if f.is_tagged(self.v)]
        names: dict[str, str] = {}
        for run in _fixed_groups(plain):
            if run[0].type.wire in Wire.FIXED_SIZE:
                self._fixed_run(run, names)
            else:
                f = run[0]
                names[f.name] = w.name("v")
                self.value(f.type, f.is_nullable(self.v), names[f.name], f"{path}.{f.name}")
        if self.flex:
            for f in tagged:
                names[f.name] = w.name("t")
                w.line(f"{names[f.name]} = {_default_expr(w, f)}")
            self._tagged_section(tagged, names, path)
        args = [names.get(f.name) or _default_expr(w, f) for f in layout(cls)]
        w.line(f"{out} = {w.const(cls, '_C')}({', '.join(args)})")

    def _fixed_run(self, run: list[FieldSpec], names: dict[str, str]) -> None:
        w = self.w
        fmt = _struct_format(run)
        s = w.const(struct.Struct(fmt), "_S")
        targets = [w.name("v") for _ in run]
        for f, t in zip(run, targets, strict=True):
            names[f.name] = t
        w.line(f"{', '.join(targets)}, = {s}.unpack_from(buf, pos)")
        w.line(f"pos += {struct.calcsize(fmt)}")
        for f, t in zip(run, targets, strict=True):
            if f.type.wire == Wire.UUID:
                w.line(f"{t} = _UUID(bytes={t})")

    def _length(self, kind: str, target: str) -> None:
        """Read a length prefix: kind 'string' (int16), 'bytes'/'array' (int32), compact if
        flexible."""
        w = self.w
        if self.flex:
            w.line(f"{target} = buf[pos] - 1")
            w.line(f"if {target} < 127:")
            w.line("    pos += 1")
            w.line("else:")
            w.line(f"    {target}, pos = _clen(buf, pos)")
        elif kind == "string":
            w.line(f"{target}, = _I16.unpack_from(buf, pos)")
            w.line("pos += 2")
        else:
            w.line(f"{target}, = _I32.unpack_from(buf, pos)")
            w.line("pos += 4")

    def _null_or_fail(self, n: str, nullable: bool, out: str, path: str) -> None:
        """After a length read: -1 is null where allowed; any other negative is an error."""
        w = self.w
        w.line(f"if {n} < 0:")
        w.indent()
        if nullable:
            w.line(f"if {n} != -1: _raise('negative length %d' % {n}, {path!r})")
            w.line(f"{out} = None")
        else:
            w.line(f"_raise('null or negative length %d where null is not allowed' % {n}, "
                   f"{path!r})")
        w.dedent()

    def value(self, t: TypeSpec, nullable: bool, out: str, path: str) -> None:
        w = self.w
        wire = t.wire
        if wire in Wire.FIXED_SIZE:
            fmt = ">" + _format_char(wire)
            w.line(f"{out}, = {w.const(struct.Struct(fmt), '_S')}.unpack_from(buf, pos)")
            w.line(f"pos += {struct.calcsize(fmt)}")
            if wire == Wire.UUID:
                w.line(f"{out} = _UUID(bytes={out})")
            return
        if wire == Wire.STRUCT:
            assert t.struct is not None
            if nullable:  # nullable structs carry a presence byte (-1 absent, 1 present)
                w.line("pos += 1")
                w.line(f"if buf[pos - 1] == 255: {out} = None")
                w.line("else:")
                w.indent()
                self.struct(t.struct, out, path)
                w.dedent()
            else:
                self.struct(t.struct, out, path)
            return
        n = w.name("n")
        self._length("string" if wire == Wire.STRING else wire, n)
        self._null_or_fail(n, nullable or wire == Wire.RECORDS, out, path)
        w.line("else:")
        w.indent()
        if wire == Wire.ARRAY:
            assert t.item is not None
            self._array_items(t.item, n, out, path)
        else:
            e = w.name("e")
            w.line(f"{e} = pos + {n}")
            w.line(f"if {e} > end: _raise('length %d runs past the end' % {n}, {path!r})")
            if wire == Wire.STRING:
                w.line(f"{out} = str(buf[pos:{e}], 'utf-8')")
            else:
                w.line(f"{out} = buf[pos:{e}]")
            w.line(f"pos = {e}")
        w.dedent()

    def _array_items(self, item: TypeSpec, n: str, out: str, path: str) -> None:
        w = self.w
        w.line(f"if {n} > end - pos: _raise('array length %d exceeds the bytes left' % {n}, "
               f"{path!r})")
        if item.wire in Wire.FIXED_SIZE and item.wire != Wire.UUID:
            size = Wire.FIXED_SIZE[item.wire]
            w.line(f"{out} = list(_unpack_from('>%d{item.wire}' % {n}, buf, pos))")
            w.line(f"pos += {n} * {size}")
            return
        w.line(f"{out} = []")
        x = w.name("x")
        w.line(f"for _ in range({n}):")
        w.indent()
        self.value(item, False, x, f"{path}[]")
        w.line(f"{out}.append({x})")
        w.dedent()

    def _tagged_section(self, tagged: list[FieldSpec], names: dict[str, str], path: str) -> None:
        w = self.w
        w.line("if buf[pos] == 0:")
        w.line("    pos += 1")
        w.line("else:")
        w.indent()
        count, tag, size, stop = w.name("nt"), w.name("tag"), w.name("sz"), w.name("stop")
        w.line(f"{count}, pos = _uvarint(buf, pos)")
        w.line(f"if {count} > end - pos: "
               f"_raise('tagged field count %d exceeds the bytes left' % {count}, "
               f"{path + '.<tags>'!r})")
        w.line(f"for _ in range({count}):")
        w.indent()
        w.line(f"{tag}, pos = _uvarint(buf, pos)")
        w.line(f"{size}, pos = _uvarint(buf, pos)")
        w.line(f"{stop} = pos + {size}")
        w.line(f"if {stop} > end: _raise('tagged field %d runs past the end' % {tag}, "
               f"{path + '.<tags>'!r})")
        keyword = "if"
        for f in sorted(tagged, key=lambda f: f.tag or 0):
            w.line(f"{keyword} {tag} == {f.tag}:")
            w.indent()
            fpath = f"{path}.{f.name}"
            self.value(f.type, f.is_nullable(self.v), names[f.name], fpath)
            w.line(f"if pos != {stop}: "
                   f"_raise('tagged field size does not match its value', {fpath!r})")
            w.dedent()
            keyword = "elif"
        w.line(f"pos = {stop}")
        w.dedent()
        w.dedent()


def build_decoder(cls: type[Message], version: int, flexible: bool) -> Decoder:
    gen = _DecodeGen(version, flexible)
    gen.struct(cls, "result", cls.__name__)
    body = "\n".join(gen.w.lines)
    src = f"def decode(buf, pos):\n    end = len(buf)\n{body}\n    return result, pos\n"
    decode: Decoder = _compile(src, gen.w.env, "decode", f"decode_{cls.__name__}_v{version}")
    return decode


# --------------------------------------------------------------------------------------------
# encoding


class _EncodeGen:
    def __init__(self, version: int, flexible: bool) -> None:
        self.v = version
        self.flex = flexible
        self.w = _Writer()

    def struct(self, cls: type[Message], obj: str, path: str, out: str = "out") -> None:
        w = self.w
        fields = [f for f in layout(cls) if f.present(self.v)]
        plain = [f for f in fields if not f.is_tagged(self.v)]
        tagged = sorted((f for f in fields if f.is_tagged(self.v)), key=lambda f: f.tag or 0)
        for run in _fixed_groups(plain):
            if run[0].type.wire in Wire.FIXED_SIZE:
                s = w.const(struct.Struct(_struct_format(run)), "_S")
                args = [f"{obj}.{f.name}.bytes" if f.type.wire == Wire.UUID else f"{obj}.{f.name}"
                        for f in run]
                w.line(f"{out}.append({s}.pack({', '.join(args)}))")
            else:
                f = run[0]
                x = w.name("x")
                w.line(f"{x} = {obj}.{f.name}")
                self.value(f.type, f.is_nullable(self.v), x, f"{path}.{f.name}", out)
        if self.flex:
            self._tagged_section(tagged, obj, path, out)

    def _tagged_section(self, tagged: list[FieldSpec], obj: str, path: str, out: str) -> None:
        w = self.w
        if not tagged:
            w.line(f"{out}.append(b'\\x00')")
            return
        tags = w.name("tags")
        w.line(f"{tags} = []")
        for f in tagged:
            x = w.name("x")
            w.line(f"{x} = {obj}.{f.name}")
            default = w.const(f.default_value(), "_dv")  # compared by value, never mutated
            w.line(f"if {x} != {default}:")
            w.indent()
            sub = w.name("sub")
            w.line(f"{sub} = []")
            self.value(f.type, f.is_nullable(self.v), x, f"{path}.{f.name}", sub)
            w.line(f"{sub} = b''.join({sub})")
            w.line(f"{tags}.append(_uv({f.tag}) + _uv(len({sub})) + {sub})")
            w.dedent()
        w.line(f"{out}.append(_uv(len({tags})))")
        w.line(f"{out}.extend({tags})")

    def _length(self, kind: str, n: str, out: str) -> None:
        if self.flex:
            self.w.line(f"{out}.append(_uv({n} + 1))")
        elif kind == "string":
            self.w.line(f"{out}.append(_I16.pack({n}))")
        else:
            self.w.line(f"{out}.append(_I32.pack({n}))")

    def _null(self, wire: str, out: str) -> None:
        if self.flex:
            self.w.line(f"{out}.append(b'\\x00')")
        else:
            self.w.line(f"{out}.append({'_NULL16' if wire == Wire.STRING else '_NULL32'})")

    def value(self, t: TypeSpec, nullable: bool, x: str, path: str, out: str) -> None:
        w = self.w
        wire = t.wire
        if wire in Wire.FIXED_SIZE:
            fmt = ">" + _format_char(wire)
            arg = f"{x}.bytes" if wire == Wire.UUID else x
            w.line(f"{out}.append({w.const(struct.Struct(fmt), '_S')}.pack({arg}))")
            return
        if wire == Wire.STRUCT:
            assert t.struct is not None
            if nullable:
                w.line(f"if {x} is None: {out}.append(b'\\xff')")
                w.line("else:")
                w.indent()
                w.line(f"{out}.append(b'\\x01')")
            self.struct(t.struct, x, path, out)
            if nullable:
                w.dedent()
            return
        if nullable or wire == Wire.RECORDS:
            w.line(f"if {x} is None:")
            w.indent()
            self._null(wire, out)
            w.dedent()
            w.line("else:")
        else:
            w.line(f"if {x} is None: _raise('null where the version does not allow it', {path!r})")
            w.line("if True:")
        w.indent()
        if wire == Wire.ARRAY:
            assert t.item is not None
            self._array(t.item, x, path, out)
        else:
            b = w.name("b")
            w.line(f"{b} = {x}.encode('utf-8')" if wire == Wire.STRING else f"{b} = {x}")
            self._length("string" if wire == Wire.STRING else "bytes", f"len({b})", out)
            w.line(f"{out}.append({b})")
        w.dedent()

    def _array(self, item: TypeSpec, x: str, path: str, out: str) -> None:
        w = self.w
        self._length("array", f"len({x})", out)
        if item.wire in Wire.FIXED_SIZE and item.wire != Wire.UUID:
            w.line(f"if {x}: {out}.append(_pack('>%d{item.wire}' % len({x}), *{x}))")
            return
        y = w.name("y")
        w.line(f"for {y} in {x}:")
        w.indent()
        self.value(item, False, y, f"{path}[]", out)
        w.dedent()


def build_encoder(cls: type[Message], version: int, flexible: bool) -> Encoder:
    gen = _EncodeGen(version, flexible)
    gen.struct(cls, "obj", cls.__name__)
    body = "\n".join(gen.w.lines) or "    pass"
    src = f"def encode(obj, out):\n{body}\n"
    encode: Encoder = _compile(src, gen.w.env, "encode", f"encode_{cls.__name__}_v{version}")
    return encode


def _compile(src: str, env: dict[str, Any], fname: str, label: str) -> Any:
    code = compile(src, f"<epochlog codegen {label}>", "exec")
    namespace = dict(env)
    exec(code, namespace)  # noqa: S102 - source generated above from our own declarations
    fn = namespace[fname]
    fn.__source__ = src
    return fn
