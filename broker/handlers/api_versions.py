"""ApiVersions (key 18), versions 0-3.

The answer lists every API a handler is registered for, with the handler's range. A request for
a version beyond 3 is answered by the server itself (before decoding, since its body layout is
unknown) with UNSUPPORTED_VERSION and these ranges in a v0 body, as KIP-511 requires; every
erroring answer uses a v0 body because clients such as kafka-python read errors that way.
"""

from __future__ import annotations

from typing import Any

from protocol.apis.api_versions import ApiVersion, ApiVersionsRequest, ApiVersionsResponse

from . import REGISTRY, register


def supported() -> list[ApiVersion]:
    return [ApiVersion(key, r.min_version, r.max_version) for key, r in sorted(REGISTRY.items())]


def unsupported_version_answer() -> ApiVersionsResponse:
    return ApiVersionsResponse(error_code=35, api_keys=supported())


async def handle(ctx: Any, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return ApiVersionsResponse(api_keys=supported())


register(18, 0, 3, handle)
