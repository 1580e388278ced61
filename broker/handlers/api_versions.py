"""ApiVersions (key 18), versions 0-3.

The answer lists every API a handler is registered for, with the handler's range. A request for
a version beyond 3 is answered by the server itself (before decoding, since its body layout is
unknown) with UNSUPPORTED_VERSION and these ranges in a v0 body, as KIP-511 requires; every
erroring answer uses a v0 body because clients such as kafka-python read errors that way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse
from epochlog.protocol.error_codes import ErrorCode

from . import REGISTRY, register

if TYPE_CHECKING:
    from ._context import RequestContext


def supported() -> list[ApiVersion]:
    return [ApiVersion(key, r.min_version, r.max_version) for key, r in sorted(REGISTRY.items())]


def unsupported_version_answer() -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=supported())


async def handle(ctx: RequestContext, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return ApiVersionsResponse(api_keys=supported())


register(ApiKey.API_VERSIONS, 0, 3, handle)
