"""An API as data: key, name, version range, first flexible version, and its message classes.

Each module in protocol.apis declares one API's messages and ends with `API = Api(...)`;
protocol.registry collects them. Encoders and decoders for a version are generated on first use
(protocol.codegen) and cached here, so importing the package stays cheap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from . import codegen
from .api_keys import ApiKey
from .errors import DecodeError, EncodeError, UnsupportedVersion
from .schema import Message


@dataclass(eq=False)
class Api:
    key: ApiKey
    name: str
    min_version: int
    max_version: int
    flexible_from: int | None  # first flexible version, None if no version in range is
    request: type[Message]
    response: type[Message]
    _decoders: dict[tuple[bool, int], codegen.Decoder] = field(default_factory=dict, repr=False)
    _encoders: dict[tuple[bool, int], codegen.Encoder] = field(default_factory=dict, repr=False)

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version

    def is_flexible(self, version: int) -> bool:
        return self.flexible_from is not None and version >= self.flexible_from

    def request_header_version(self, version: int) -> int:
        return 2 if self.is_flexible(version) else 1

    def response_header_version(self, version: int) -> int:
        # ApiVersions answers with header v0 always, so a client that asked for a version the
        # broker does not know can still read the error and the broker's ranges (KIP-511).
        if self.key == ApiKey.API_VERSIONS:
            return 0
        return 1 if self.is_flexible(version) else 0

    def _check(self, version: int) -> None:
        if not self.supports(version):
            raise UnsupportedVersion(self.key, version, f"{self.name} v{version} is not supported "
                                     f"(supported: {self.min_version}-{self.max_version})")

    def decoder(self, is_request: bool, version: int) -> codegen.Decoder:
        fn = self._decoders.get((is_request, version))
        if fn is None:
            self._check(version)
            cls = self.request if is_request else self.response
            fn = codegen.build_decoder(cls, version, self.is_flexible(version))
            self._decoders[(is_request, version)] = fn
        return fn

    def encoder(self, is_request: bool, version: int) -> codegen.Encoder:
        fn = self._encoders.get((is_request, version))
        if fn is None:
            self._check(version)
            cls = self.request if is_request else self.response
            fn = codegen.build_encoder(cls, version, self.is_flexible(version))
            self._encoders[(is_request, version)] = fn
        return fn

    def decode_request(self, buf: bytes, version: int, pos: int = 0, *,
                       strict: bool = True) -> Any:
        """strict=False ignores bytes after the last field, as Kafka's brokers do: librdkafka
        2.x sends three stray bytes after an all-topics Metadata v12 request."""
        return self._decode(True, buf, version, pos, strict)

    def decode_response(self, buf: bytes, version: int, pos: int = 0) -> Any:
        return self._decode(False, buf, version, pos)

    def encode_request(self, msg: Message, version: int) -> bytes:
        return self._encode(True, msg, version)

    def encode_response(self, msg: Message, version: int) -> bytes:
        return self._encode(False, msg, version)

    def _decode(self, is_request: bool, buf: bytes, version: int, pos: int,
                strict: bool = True) -> Any:
        fn = self.decoder(is_request, version)  # outside the try: a codegen bug is no bad input
        try:
            msg, end = fn(buf, pos)
        except DecodeError as exc:
            if exc.field:
                raise
            raise self._diagnose_decode(is_request, buf, version, pos, exc) from exc
        except Exception as exc:  # a low-level failure: find the field it happened in
            raise self._diagnose_decode(is_request, buf, version, pos, exc) from exc
        if end != len(buf) and strict:
            cls = self.request if is_request else self.response
            raise DecodeError(f"{len(buf) - end} bytes left over after {cls.__name__} "
                              f"v{version}", f"{cls.__name__}.<end>")
        return msg

    def _encode(self, is_request: bool, msg: Message, version: int) -> bytes:
        expected = self.request if is_request else self.response
        if type(msg) is not expected:
            raise EncodeError(f"expected {expected.__name__}, got {type(msg).__name__}")
        out: list[bytes] = []
        fn = self.encoder(is_request, version)
        try:
            fn(msg, out)
        except EncodeError:
            raise
        except DecodeError as exc:  # raised by shared helpers for a null that is not allowed
            raise EncodeError(str(exc), exc.field) from exc
        except Exception as exc:
            raise self._diagnose_encode(is_request, msg, version, exc) from exc
        return b"".join(out)

    def _diagnose_decode(self, is_request: bool, buf: bytes, version: int, pos: int,
                         exc: Exception) -> DecodeError:
        from . import reference

        cls = self.request if is_request else self.response
        path = reference.failing_path_decode(cls, version, self.is_flexible(version), buf[pos:])
        return DecodeError(f"malformed {cls.__name__} v{version}: {exc}", path or cls.__name__)

    def _diagnose_encode(self, is_request: bool, msg: Message, version: int,
                         exc: Exception) -> EncodeError:
        from . import reference

        cls = type(msg)
        path = reference.failing_path_encode(cls, version, self.is_flexible(version), msg)
        return EncodeError(f"cannot write {cls.__name__} v{version}: {exc}", path or cls.__name__)
