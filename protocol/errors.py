"""The codec's own exceptions. Kafka's error codes live in protocol.error_codes."""

from __future__ import annotations


class ProtocolError(Exception):
    """Base of every error this package raises on bad input."""


class DecodeError(ProtocolError):
    """Bytes that do not decode as the declared layout; `field` names where it broke."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{message} (at {field})" if field else message)


class EncodeError(ProtocolError):
    """A message that cannot be written in the requested version; `field` names which value."""

    def __init__(self, message: str, field: str | None = None) -> None:
        self.field = field
        super().__init__(f"{message} (at {field})" if field else message)


class FrameTooLarge(ProtocolError):
    """A size prefix beyond the frame limit; raised before anything is allocated for it."""


class UnsupportedVersion(ProtocolError):
    """An API key or version this codec does not declare."""

    def __init__(self, api_key: int, version: int, message: str) -> None:
        self.api_key = api_key
        self.version = version
        super().__init__(message)
