"""The broker's Kafka-protocol TCP server: frames in, handlers called, answers out in order.

Theory of operation
-------------------
Each connection is served by one coroutine that reads a frame, answers it, then reads the next,
so answers leave in request order and a client that pipelines requests simply finds them waiting
in the socket: the socket itself is the queue, and a slow handler (a long-polling Fetch) holds
back only its own connection, as in Kafka. The frame size is checked before the frame is read.

Bad input never takes the process down: an unknown API key, a version no handler serves, a
frame that does not decode, or a handler that fails closes that one connection with one log line
naming the peer and the reason. ApiVersions at an unknown version is the exception: it is
answered with UNSUPPORTED_VERSION and our ranges in a v0 body (KIP-511).

Limits: `frame_bytes_max` (Kafka's socket.request.max.bytes), `connections_max`, and
`idle_ms_max` (connections.max.idle.ms), enforced by a sweeper rather than a timer per read.

One server serves one listener (EXTERNAL or INTERNAL, see config.py); a broker with two listeners
runs two. Each request's context names the listener it arrived on, so that Metadata can answer
with that listener's addresses (Kafka's rule). Limits apply per listener.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from protocol.errors import DecodeError, UnsupportedVersion
from protocol.frames import frame
from protocol.headers import (RequestHeader, decode_request_header, encode_response_header,
                              peek_request_header)

from .config import EXTERNAL_LISTENER
from .handlers import REGISTRY
from .handlers import api_versions as api_versions_handler

log = logging.getLogger("epochlog.server")

_SIZE = struct.Struct(">i")
_API_VERSIONS = 18


@dataclass(frozen=True)
class ServerLimits:
    frame_bytes_max: int = 100 * 1024 * 1024
    connections_max: int = 4096
    idle_ms_max: int = 600_000
    write_buffer_bytes_max: int = 4 * 1024 * 1024  # answers queue to the socket up to this


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""

    header: RequestHeader
    version: int
    peer: str
    app: Any  # the broker's state, owned by the broker package
    listener: str = EXTERNAL_LISTENER  # the listener name the request arrived on


class _Closing(Exception):
    """Close this connection; the message says why (logged once)."""


@dataclass(eq=False)  # identity, so connections can live in a set
class _Conn:
    peer: str
    writer: asyncio.StreamWriter
    last_active: float = field(default_factory=time.monotonic)


# Called with (api key, version, answer or None) after each request is handled (metrics).
Observer = Callable[[int, int, Any], None]


class KafkaServer:
    def __init__(self, app: Any, limits: ServerLimits | None = None,
                 observer: Observer | None = None, listener: str = EXTERNAL_LISTENER) -> None:
        self.app = app
        self.listener = listener
        self.limits = limits or ServerLimits()
        self.observer = observer
        self.bytes_in_total = 0
        self.bytes_out_total = 0
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[_Conn] = set()
        self._sweeper: asyncio.Task[None] | None = None
        self.requests_total = 0

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, host, port)
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_idle())
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.writer.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _sweep_idle(self) -> None:
        period = max(self.limits.idle_ms_max / 10_000, 0.05)
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - self.limits.idle_ms_max / 1000
            for conn in [c for c in self._conns if c.last_active < cutoff]:
                log.info("closing idle connection from %s", conn.peer)
                conn.writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peername = writer.get_extra_info("peername")
        peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        if len(self._conns) >= self.limits.connections_max:
            log.warning("refusing connection from %s: %d connections open (limit)", peer,
                        len(self._conns))
            writer.close()
            return
        conn = _Conn(peer, writer)
        self._conns.add(conn)
        try:
            while True:
                size, = _SIZE.unpack(await reader.readexactly(4))
                if size < 0 or size > self.limits.frame_bytes_max:
                    raise _Closing(f"frame of {size} bytes (limit {self.limits.frame_bytes_max})")
                request = await reader.readexactly(size)
                self.bytes_in_total += 4 + size
                conn.last_active = time.monotonic()
                answer = await self._answer(request, peer)
                if writer.is_closing():  # closed while the handler ran (stop(), idle sweep)
                    break
                if answer is not None:
                    self.bytes_out_total += len(answer)
                    writer.write(answer)
                    if writer.transport.get_write_buffer_size() > self.limits.write_buffer_bytes_max:
                        await writer.drain()
                conn.last_active = time.monotonic()
        except _Closing as exc:
            log.warning("closing connection from %s: %s", peer, exc)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except Exception:  # a bug in this layer: lose the connection, never the process
            log.exception("connection from %s failed", peer)
        finally:
            self._conns.discard(conn)
            writer.close()

    async def _answer(self, request: bytes, peer: str) -> bytes | None:
        try:
            key, version, correlation_id = peek_request_header(request)
        except DecodeError as exc:
            raise _Closing(str(exc)) from exc
        registration = REGISTRY.get(key)
        if registration is None:
            raise _Closing(f"unknown API key {key}")
        api = registration.api
        if not registration.min_version <= version <= registration.max_version:
            if key == _API_VERSIONS:
                body = api.encode_response(api_versions_handler.unsupported_version_answer(), 0)
                return frame(encode_response_header(correlation_id, 0) + body)
            raise _Closing(f"{api.name} v{version} is not supported "
                           f"(v{registration.min_version}-{registration.max_version})")
        try:
            header, pos = decode_request_header(request, api.request_header_version(version))
            message = api.decode_request(request, version, pos, strict=False)  # as Kafka
        except (DecodeError, UnsupportedVersion) as exc:
            raise _Closing(f"malformed {api.name} v{version} request: {exc}") from exc
        self.requests_total += 1
        ctx = RequestContext(header, version, peer, self.app, self.listener)
        try:
            result = await registration.handle(ctx, message)
        except Exception as exc:  # a handler bug: this connection only, loudly
            log.exception("%s v%d from %s failed", api.name, version, peer)
            raise _Closing(f"internal error in {api.name}: {exc}") from exc
        if self.observer is not None:
            self.observer(key, version, result)
        if result is None:
            return None
        header_bytes = encode_response_header(correlation_id, api.response_header_version(version))
        return frame(header_bytes + api.encode_response(result, version))
