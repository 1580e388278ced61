"""Request handlers, one module per API key, each registering the versions it serves.

A handler module opens with its version range and per-version notes and ends with
`register(KEY, MIN, MAX, handle)`. The broker answers ApiVersions from this registry, so a client
is only ever offered what a handler really serves (which may be narrower than what protocol/
declares). Handlers are `async def handle(ctx, request) -> response`; a handler that must not
answer (Produce with acks=0) returns None.

`load_all()` imports every handler module here (names starting with "_" are helpers), which
registers them; the server alone imports only ApiVersions.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from epochlog.protocol.api import Api
from epochlog.protocol.registry import APIS

Handle = Callable[[Any, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Registration:
    api: Api
    min_version: int
    max_version: int
    handle: Handle


REGISTRY: dict[int, Registration] = {}


def register(key: int, min_version: int, max_version: int, handle: Handle) -> None:
    api = APIS[key]
    if not (api.min_version <= min_version <= max_version <= api.max_version):
        raise ValueError(f"{api.name}: handler range {min_version}-{max_version} is outside "
                         f"the declared {api.min_version}-{api.max_version}")
    if key in REGISTRY:
        raise ValueError(f"{api.name}: two handlers registered")
    REGISTRY[key] = Registration(api, min_version, max_version, handle)


def load_all() -> dict[int, Registration]:
    """Import (and so register) every handler module of this package."""
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")
    return REGISTRY
