"""Test-only request hooks (franz-go kfake's idea): for API K, drop, delay, or answer with error E
the next n requests this broker receives, to reach the rare branches of clients and brokers.

Off unless the broker is started with `request_hooks_listen` (HOST:PORT): then, and only then,
this module serves a small HTTP control on that address and the Kafka servers consult the hooks.
Without the setting nothing listens and the servers' only cost is one `hooks is not None` test
per request (server.py).

    POST   /hooks  {"api": "PRODUCE", "action": "error", "error": "NOT_LEADER_OR_FOLLOWER",
                    "times": 2}                      -> 200, the hook (with its id)
           {"api": 1, "action": "drop"}              (api: an ApiKey name, Kafka's name or key)
           {"api": "Metadata", "action": "delay", "delay_ms": 1500, "client_id": "my-app"}
    GET    /hooks                                    -> 200, every hook installed, with counts
    DELETE /hooks                                    -> 200, {"removed": n}

Actions, on a request the hook matches (its API and, if given, the client id in its header):
- drop: no answer at all; the connection stays open (answers to later requests on it still go,
  so a client matching answers strictly in order sees the next one as out of place);
- delay: the request is handled delay_ms late (and, answers leaving in order, so is every
  request behind it on that connection);
- error: not handled at all; answered with error E in every entry the request named and at the
  top level (error_answers.py), a valid answer of its API at its version.
Hooks of one API are used in the order installed, each `times` times. Every install is logged
as a warning, every use at debug level.

The hook table is owned by the broker's event loop: the control server runs on it, so neither
side needs a lock. Limits: HOOKS_MAX installed at once, TIMES_MAX and DELAY_MS_MAX per hook,
CONTROL_HEAD_BYTES_MAX and CONTROL_BODY_BYTES_MAX per control request, CONTROL_REQUEST_S to
send one, CONTROL_CONNECTIONS_MAX at once.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from epochlog.protocol.api import Api
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.request_hooks import Hook, HookSpec

from .error_answers import SHAPES, error_answer

log = logging.getLogger("epochlog.broker.hooks")

HOOKS_MAX = 256
TIMES_MAX = 1_000_000
DELAY_MS_MAX = 600_000
CONTROL_HEAD_BYTES_MAX = 8192
CONTROL_BODY_BYTES_MAX = 64 * 1024
CONTROL_REQUEST_S = 10.0
CONTROL_CONNECTIONS_MAX = 16

Handle = Callable[[Any, Any], Awaitable[Any]]


class HookRefused(ValueError):
    """A hook that cannot be installed; the message says why."""


def _names(enum: type[ApiKey] | type[ErrorCode]) -> dict[str, int]:
    return {member.name.replace("_", ""): int(member) for member in enum}


_API_BY_NAME = _names(ApiKey)
_ERROR_BY_NAME = _names(ErrorCode)


def _by_name(value: int | str, table: dict[str, int], what: str) -> int:
    if isinstance(value, int):
        return value
    found = table.get(value.upper().replace("_", "").replace("-", ""))
    if found is None:
        raise HookRefused(f"unknown {what} {value!r}")
    return found


class RequestHooks:
    def __init__(self, served: dict[int, Api]) -> None:
        self.served = served  # API key -> Api, the APIs this broker's handlers serve
        self.hooks: list[Hook] = []  # installed, in order (used ones included)
        self.armed: dict[int, collections.deque[Hook]] = {}  # key -> hooks with uses left
        self._ids = itertools.count(1)

    # ---- the table
    def install(self, spec: HookSpec) -> Hook:
        key = _by_name(spec.api, _API_BY_NAME, "API")
        api = self.served.get(key)
        if api is None:
            raise HookRefused(f"this broker serves no API with key {key}")
        if not 1 <= spec.times <= TIMES_MAX:
            raise HookRefused(f"times must be 1 to {TIMES_MAX}, not {spec.times}")
        if len(self.hooks) >= HOOKS_MAX:
            raise HookRefused(f"{HOOKS_MAX} hooks installed already (HOOKS_MAX): DELETE /hooks")
        hook = Hook(id=next(self._ids), api=api.name, api_key=key, action=spec.action,
                    times=spec.times, remaining=spec.times, client_id=spec.client_id)
        if spec.action == "delay":
            if not 1 <= spec.delay_ms <= DELAY_MS_MAX:
                raise HookRefused(f"delay_ms must be 1 to {DELAY_MS_MAX}, not {spec.delay_ms}")
            hook.delay_ms = spec.delay_ms
        elif spec.delay_ms:
            raise HookRefused(f"delay_ms is for the delay action, not {spec.action}")
        if spec.action == "error":
            if spec.error is None:
                raise HookRefused("the error action needs an error (a name or a code)")
            code = _by_name(spec.error, _ERROR_BY_NAME, "error")
            if code == 0 or code not in ErrorCode._value2member_map_:
                raise HookRefused(f"{spec.error!r} is not an error code")
            if key not in SHAPES:
                raise HookRefused(f"no error answer is known for {api.name}")
            hook.error, hook.error_code = ErrorCode(code).name, code
        elif spec.error is not None:
            raise HookRefused(f"error is for the error action, not {spec.action}")
        self.hooks.append(hook)
        self.armed.setdefault(key, collections.deque()).append(hook)
        log.warning("request hook %d installed (test only): %s", hook.id, hook.describe())
        return hook

    def clear(self) -> int:
        removed = len(self.hooks)
        self.hooks.clear()
        self.armed.clear()
        if removed:
            log.warning("request hooks removed: %d", removed)
        return removed

    def take(self, key: int, client_id: str | None) -> Hook | None:
        """The first armed hook of key that matches client_id, counted as used."""
        queue = self.armed[key]
        for hook in queue:
            if hook.client_id is None or hook.client_id == client_id:
                hook.remaining -= 1
                hook.fired += 1
                if hook.remaining == 0:
                    queue.remove(hook)
                    if not queue:
                        del self.armed[key]
                return hook
        return None

    # ---- the servers' side
    async def intercept(self, ctx: Any, api: Api, message: Any, handle: Handle) -> Any:
        """What a request of a hooked API gets (server.py calls this only for keys in armed)."""
        hook = self.take(api.key, ctx.header.client_id)
        if hook is None:
            return await handle(ctx, message)
        log.debug("request hook %d: %s v%d from %s: %s", hook.id, api.name, ctx.version,
                  ctx.peer, hook.action)
        if hook.action == "drop":
            return None
        if hook.action == "delay":
            await asyncio.sleep(hook.delay_ms / 1000)
            return await handle(ctx, message)
        return error_answer(api, ctx.version, message, hook.error_code)

    # ---- the control server
    async def serve(self, host: str, port: int) -> asyncio.Server:
        open_connections = [0]

        async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            if open_connections[0] >= CONTROL_CONNECTIONS_MAX:
                writer.close()
                return
            open_connections[0] += 1
            try:
                await self._answer(reader, writer)
            finally:
                open_connections[0] -= 1
                writer.close()

        return await asyncio.start_server(connected, host, port, limit=CONTROL_HEAD_BYTES_MAX)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(CONTROL_REQUEST_S):
                method, path, body = await _read_http(reader)
            status, payload = self.control(method, path, body)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError,
                TimeoutError) as exc:
            status, payload = 400, {"error": f"bad control request: {exc}"}
        data = msgspec.json.encode(payload)
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}
        writer.write(f"HTTP/1.1 {status} {reason.get(status, '')}\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(data)}\r\nConnection: close"
                     "\r\n\r\n".encode() + data)
        try:
            await writer.drain()
        except ConnectionError:
            pass

    def control(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        """(HTTP status, JSON payload) for one control request."""
        if path.rstrip("/") != "/hooks":
            return 404, {"error": f"no {path}: the control has /hooks only"}
        if method == "GET":
            return 200, self.hooks
        if method == "DELETE":
            return 200, {"removed": self.clear()}
        if method != "POST":
            return 405, {"error": f"{method} /hooks: use GET, POST or DELETE"}
        try:
            return 200, self.install(msgspec.json.decode(body, type=HookSpec))
        except (msgspec.ValidationError, msgspec.DecodeError, HookRefused) as exc:
            return 400, {"error": str(exc)}


async def _read_http(reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
    """(method, path, body) of one HTTP/1.1 request, within the control's limits."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
    request_line, *header_lines = head.split("\r\n")
    parts = request_line.split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"not an HTTP/1.x request line: {request_line[:80]!r}")
    length = 0
    for line in header_lines:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    if not 0 <= length <= CONTROL_BODY_BYTES_MAX:
        raise ValueError(f"a body of {length} bytes (at most {CONTROL_BODY_BYTES_MAX})")
    body = await reader.readexactly(length) if length else b""
    return parts[0], parts[1], body

