"""Admin requests the broker relays to the controller unchanged (docs/control-plane.md).

The request is sent at the client's own version (the controller serves the same ranges) and the
controller's answer is returned as it is. When the controller cannot be reached in time, each
handler builds its answer with REQUEST_TIMED_OUT (retriable) for every item it was asked about.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar, cast

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.schema import Message

from ..controller_link import ControllerUnavailable
from ._context import controller_of

if TYPE_CHECKING:
    from ._context import RequestContext

log = logging.getLogger("epochlog.broker")
UNAVAILABLE = ErrorCode.REQUEST_TIMED_OUT

Request = TypeVar("Request", bound=Message)
Response = TypeVar("Response")


async def forward(ctx: RequestContext, key: ApiKey, request: Request,
                  failed: Callable[[Request, int], Response]) -> Response:
    """The controller's answer to request (the same API, so the same response type), or
    failed(request, UNAVAILABLE) when the controller cannot be reached in time."""
    try:
        return cast(Response, await controller_of(ctx.app).forward(key, ctx.version, request))
    except ControllerUnavailable as exc:
        log.warning("forwarding %s v%d from %s failed: %s", key.name, ctx.version, ctx.peer, exc)
        return failed(request, UNAVAILABLE)
