"""What the transaction handlers share."""

from __future__ import annotations

from epochlog.protocol.error_codes import ErrorCode


def fenced_as(error: int, version: int, fenced_from: int) -> int:
    """PRODUCER_FENCED (KIP-588) as a request of this version understands it: versions below
    fenced_from know only INVALID_PRODUCER_EPOCH."""
    if error == ErrorCode.PRODUCER_FENCED and version < fenced_from:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return error
