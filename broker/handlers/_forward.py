"""Admin requests the broker relays to the controller unchanged (docs/control-plane.md).

The request is sent at the client's own version (the controller serves the same ranges) and the
controller's answer is returned as it is. When the controller cannot be reached in time, each
handler builds its answer with REQUEST_TIMED_OUT (retriable) for every item it was asked about.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from protocol.error_codes import ErrorCode

from ..controller_link import ControllerUnavailable

log = logging.getLogger("epochlog.broker")
UNAVAILABLE = ErrorCode.REQUEST_TIMED_OUT


async def forward(ctx: Any, key: int, request: Any, failed: Callable[[Any, int], Any]) -> Any:
    try:
        return await ctx.app.controller.forward(key, ctx.version, request)
    except ControllerUnavailable as exc:
        log.warning("forwarding API %d v%d from %s failed: %s", key, ctx.version, ctx.peer, exc)
        return failed(request, UNAVAILABLE)
