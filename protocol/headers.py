"""Request and response headers.

Request header v1: api_key int16, api_version int16, correlation_id int32, client_id nullable
string (int16 length, never compact). v2 adds a tagged-field section. Response header v0 is the
correlation id alone; v1 adds a tagged-field section. Which version applies follows from the API
and its version (Api.request_header_version / response_header_version).
"""

from __future__ import annotations

import struct

from .errors import DecodeError
from .varint import read_uvarint

_FIXED = struct.Struct(">hhi")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
CLIENT_ID_BYTES_MAX = 32767


class RequestHeader:
    __slots__ = ("api_key", "api_version", "correlation_id", "client_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int,
                 client_id: str | None = None) -> None:
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id

    def __repr__(self) -> str:
        return (f"RequestHeader(api_key={self.api_key}, api_version={self.api_version}, "
                f"correlation_id={self.correlation_id}, client_id={self.client_id!r})")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RequestHeader) and all(
            getattr(self, s) == getattr(other, s) for s in self.__slots__)

    def encode(self, header_version: int) -> bytes:
        parts = [_FIXED.pack(self.api_key, self.api_version, self.correlation_id)]
        if self.client_id is None:
            parts.append(b"\xff\xff")
        else:
            raw = self.client_id.encode("utf-8")
            parts.append(_I16.pack(len(raw)))
            parts.append(raw)
        if header_version >= 2:
            parts.append(b"\x00")
        return b"".join(parts)


def peek_request_header(frame: bytes) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id) from a request frame, without reading further:
    enough to answer even a request whose API or version is unknown."""
    if len(frame) < 8:
        raise DecodeError(f"request of {len(frame)} bytes is shorter than a header",
                          "RequestHeader")
    key, version, correlation_id = _FIXED.unpack_from(frame, 0)
    return key, version, correlation_id


def decode_request_header(frame: bytes, header_version: int) -> tuple[RequestHeader, int]:
    """Decode a request header; returns it and the offset where the body starts."""
    key, version, correlation_id = peek_request_header(frame)
    pos = 8
    if len(frame) < pos + 2:
        raise DecodeError("header cut short before client_id", "RequestHeader.client_id")
    n, = _I16.unpack_from(frame, pos)
    pos += 2
    client_id: str | None = None
    if n >= 0:
        if pos + n > len(frame):
            raise DecodeError(f"client_id length {n} runs past the end", "RequestHeader.client_id")
        try:
            client_id = str(frame[pos:pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise DecodeError(f"client_id is not UTF-8: {exc}", "RequestHeader.client_id") from exc
        pos += n
    elif n != -1:
        raise DecodeError(f"negative client_id length {n}", "RequestHeader.client_id")
    if header_version >= 2:
        pos = skip_tagged_fields(frame, pos, "RequestHeader.<tags>")
    return RequestHeader(key, version, correlation_id, client_id), pos


def encode_response_header(correlation_id: int, header_version: int) -> bytes:
    return _I32.pack(correlation_id) + (b"\x00" if header_version >= 1 else b"")


def decode_response_header(frame: bytes, header_version: int) -> tuple[int, int]:
    """(correlation_id, offset of the body)."""
    if len(frame) < 4:
        raise DecodeError("response shorter than its correlation id", "ResponseHeader")
    correlation_id, = _I32.unpack_from(frame, 0)
    pos = 4
    if header_version >= 1:
        pos = skip_tagged_fields(frame, pos, "ResponseHeader.<tags>")
    return correlation_id, pos


def skip_tagged_fields(buf: bytes, pos: int, where: str) -> int:
    """Skip a tagged-field section; headers define no tags we read."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        if pos + size > len(buf):
            raise DecodeError(f"tagged field of {size} bytes runs past the end", where)
        pos += size
    return pos
