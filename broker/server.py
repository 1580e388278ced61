"""The broker's Kafka-protocol TCP server: frames in, handlers called, answers out in order.

Theory of operation
-------------------
Each connection is an asyncio BufferedProtocol: the loop receives straight into buffers that a
`protocol.frames.FrameReceiver` hands out (a large frame, a Produce request, gets its own buffer,
so its bytes are copied by the kernel only), and the frames it completes go to that connection's
queue. One task per connection drains the queue in order: decode (the request keeps memoryview
slices of its frame: records are not copied), call the handler, write the answer (as a few
buffers in one vectored write: a Fetch answer's records leave in the buffer the log read them
into, never copied into a bigger bytes object; `framed_chunks`). So answers
leave in request order, and a slow handler (a long-polling Fetch) holds back only its own
connection, as in Kafka. The queue is bounded (`requests_queued_max`, `queued_bytes_max`): past
either, the connection stops reading until the task catches up, and the socket is the queue. The
frame size is checked before anything is allocated for the frame.

Bad input never takes the process down: an unknown API key, a version no handler serves, a
frame that does not decode, or a handler that fails closes that one connection with one log line
naming the peer and the reason (after answering the requests received before it). ApiVersions at
an unknown version is the exception: it is answered with UNSUPPORTED_VERSION and our ranges in a
v0 body (KIP-511). A peer that half-closes still gets the answers to what it sent (over plaintext:
TLS has no half-close).

Limits: `frame_bytes_max` (Kafka's socket.request.max.bytes), `connections_max`,
`idle_ms_max` (connections.max.idle.ms, enforced by a sweeper rather than a timer per read), the
queue bounds above, and `write_buffer_bytes_max` (answers waiting for the socket).

One server serves one listener (listeners.py); a broker with two listeners runs two. Each
request's context names the listener it arrived on, so that Metadata can answer with that
listener's addresses (Kafka's rule), and the connection's principal. Limits and byte counts are
per listener; the observer (metrics) is told the listener of each request.

TLS (an SSL listener, tls.py): the server accepts sockets itself and hands each to
`loop.connect_accepted_socket` with the TLS context, in a task of its own, bounded by the
handshake timeout; connections still in their handshake count against `connections_max` like
the others (asyncio's own TLS server would not say they exist). A peer that fails the handshake
(plaintext on this port, an untrusted or missing client certificate when one is required, no
handshake at all) is closed with one INFO line, at most one per HANDSHAKE_FAILURE_LOG_MS per
listener, the next one counting those left unsaid (Kafka logs each failed SSL authentication at
INFO; a flood of them must not flood the log). Once connected, the principal comes from the
client's certificate; a DN no mapping rule applies to is refused (closed), as Kafka refuses it.
A TLS client talking to a plaintext port sends what reads as a frame of absurd size, and is
closed like any bad frame.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import socket
import ssl
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.errors import DecodeError, ProtocolError, UnsupportedVersion
from epochlog.protocol.frames import FrameReceiver, frame
from epochlog.protocol.headers import (
    decode_request_header,
    encode_response_header,
    peek_request_header,
)

from .config import EXTERNAL_LISTENER
from .handlers import REGISTRY
from .handlers import api_versions as api_versions_handler
from .handlers._context import RequestContext
from .principal import ANONYMOUS, Rule
from .tls import NoMatchingRule, principal_of

if TYPE_CHECKING:
    from .handlers._context import BrokerApp
    from .request_hooks import RequestHooks

log = logging.getLogger("epochlog.server")

_SIZE = struct.Struct(">i")
BACKLOG = 100  # asyncio's create_server default, for the SSL listeners' own sockets


@dataclass(frozen=True)
class ServerLimits:
    frame_bytes_max: int = 100 * 1024 * 1024
    connections_max: int = 4096
    idle_ms_max: int = 600_000
    write_buffer_bytes_max: int = 4 * 1024 * 1024  # answers queue to the socket up to this
    requests_queued_max: int = 16  # whole requests read ahead of the one being handled
    queued_bytes_max: int = 16 * 1024 * 1024  # ... and their bytes (one bigger frame may pass)


@dataclass(frozen=True)
class TlsServing:
    """An SSL listener's TLS: its context, the handshake's bound, the principal mapping."""
    context: ssl.SSLContext
    handshake_timeout_ms: int
    rules: tuple[Rule, ...]


HANDSHAKE_FAILURE_LOG_MS = 1000  # at most one line per listener this often; the rest counted
ACCEPT_RETRY_MS = 100  # after accept() failed (out of descriptors): try again this much later


class _Closing(Exception):
    """Close this connection; the message says why (logged once)."""


_EOF = object()  # queued when the peer half-closes: answer what came before, then close

# Called with (listener, api key, version, answer or None) after each request is handled.
Observer = Callable[[str, int, int, Any], None]


class _Connection(asyncio.BufferedProtocol):
    """One client connection: receives frames into its queue; its task answers them."""

    def __init__(self, server: KafkaServer) -> None:
        self.server = server
        self.limits = server.limits
        self.peer = "?"
        self.principal = ANONYMOUS
        self.last_active = time.monotonic()
        self.transport: asyncio.Transport | None = None
        self._frames = FrameReceiver(self.limits.frame_bytes_max)
        self._queue: collections.deque[Any] = collections.deque()  # frames, _Closing, _EOF
        self._queued_bytes = 0
        self._reading_paused = False
        self._reading_ended = False  # after a bad frame: never resumed
        self._wakeup: asyncio.Future[None] | None = None  # the task waits here for the queue
        self._writable: asyncio.Future[None] | None = None  # set while writing is paused
        self._lost = False
        self.task: asyncio.Task[None] | None = None

    # ---- called by the event loop
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        peername = transport.get_extra_info("peername")
        self.peer = f"{peername[0]}:{peername[1]}" if peername else "?"
        conns = self.server.conns
        if len(conns) >= self.limits.connections_max:
            log.warning("refusing connection from %s: %d connections open (limit)", self.peer,
                        len(conns))
            self._lost = True
            transport.abort()
            return
        if self.server.tls is not None and not self._identify(transport):
            return
        conns.add(self)
        transport.set_write_buffer_limits(high=self.limits.write_buffer_bytes_max)
        self.task = asyncio.get_running_loop().create_task(self._serve())

    def _identify(self, transport: asyncio.Transport) -> bool:
        """The principal of a TLS connection; False (closed) if no mapping rule applies."""
        assert self.server.tls is not None
        try:
            self.principal = principal_of(transport, self.server.tls.rules)
        except NoMatchingRule as exc:
            log.warning("refusing TLS connection from %s on %s: %s", self.peer,
                        self.server.listener, exc)
            self._lost = True
            transport.abort()
            return False
        log.debug("TLS connection from %s on %s: principal %s", self.peer, self.server.listener,
                  self.principal)
        return True

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.server.bytes_in_total += nbytes
        self.last_active = time.monotonic()
        try:
            frames = self._frames.buffer_updated(nbytes)
        except ProtocolError as exc:  # a bad size: answer what came before, then close
            self._push(_Closing(str(exc)), 0)
            self._reading_ended = True
            self._pause_reading()
            return
        for request in frames:
            self._push(request, len(request))
        if (len(self._queue) >= self.limits.requests_queued_max
                or self._queued_bytes >= self.limits.queued_bytes_max):
            self._pause_reading()

    def eof_received(self) -> bool:
        self._push(_EOF, 0)
        # Keep the transport open to write the answers; TLS has no half-close (asyncio closes
        # a TLS transport at the peer's close_notify whatever this returns), so there: closed.
        return self.server.tls is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self.server.conns.discard(self)
        self._wake()
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def pause_writing(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # ---- the queue
    def _push(self, item: Any, size: int) -> None:
        self._queue.append(item)
        self._queued_bytes += size
        self._wake()

    def _wake(self) -> None:
        if self._wakeup is not None and not self._wakeup.done():
            self._wakeup.set_result(None)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    async def _next(self) -> Any:
        """The next queued item, or _EOF once the connection is gone."""
        while not self._queue:
            if self._lost:
                return _EOF
            self._wakeup = asyncio.get_running_loop().create_future()
            await self._wakeup
        item = self._queue.popleft()
        if isinstance(item, bytearray):
            self._queued_bytes -= len(item)
        if (self._reading_paused and not self._reading_ended and not self._lost
                and len(self._queue) <= self.limits.requests_queued_max // 2
                and self._queued_bytes <= self.limits.queued_bytes_max // 2):
            assert self.transport is not None
            self._reading_paused = False
            self.transport.resume_reading()
        return item

    # ---- the task
    async def _serve(self) -> None:
        assert self.transport is not None
        transport, server = self.transport, self.server
        try:
            while True:
                item = await self._next()
                if item is _EOF:
                    break
                if isinstance(item, _Closing):
                    raise item
                answer = await server.answer(memoryview(item), self.peer, self.principal)
                if sys.getrefcount(item) == 2:  # no view of it left (item, the argument):
                    self._frames.recycle(item)  # its memory takes the next large frame
                if self._lost or transport.is_closing():  # closed meanwhile (stop(), idle sweep)
                    break
                if answer is not None:
                    server.bytes_out_total += sum(map(len, answer))
                    transport.writelines(answer)
                    if self._writable is not None and not self._writable.done():
                        await self._writable
                self.last_active = time.monotonic()
        except _Closing as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
        except Exception:  # a bug in this layer: lose the connection, never the process
            log.exception("connection from %s failed", self.peer)
        finally:
            self.server.conns.discard(self)
            transport.close()

    def close(self, abort: bool = False) -> None:
        if self.transport is not None:
            if abort:
                self.transport.abort()
            else:
                self.transport.close()


class KafkaServer:
    def __init__(self, app: BrokerApp, limits: ServerLimits | None = None,
                 observer: Observer | None = None, listener: str = EXTERNAL_LISTENER,
                 tls: TlsServing | None = None) -> None:
        self.app = app
        self.listener = listener
        self.tls = tls
        self.limits = limits or ServerLimits()
        self.observer = observer
        self.bytes_in_total = 0
        self.bytes_out_total = 0
        self.requests_total = 0
        self.conns: set[_Connection] = set()
        self.hooks: RequestHooks | None = None  # test-only request hooks, when switched on
        self.handshakes: set[asyncio.Task[None]] = set()  # TLS handshakes under way
        self.handshake_failures_total = 0
        self._failures_unsaid = 0  # since the last line about them
        self._failure_said_at = -float("inf")  # monotonic seconds
        self._server: asyncio.base_events.Server | None = None
        self._tls_socket: socket.socket | None = None  # an SSL listener's, accepted by us
        self._acceptor: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        if self.tls is None:
            self._server = await loop.create_server(lambda: _Connection(self), host, port)
            bound = self._server.sockets[0].getsockname()
        else:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = self._tls_socket = socket.create_server((host, port), family=family,
                                                           backlog=BACKLOG)
            sock.setblocking(False)
            self._acceptor = loop.create_task(self._accept(sock))
            bound = sock.getsockname()
        self._sweeper = loop.create_task(self._sweep_idle())
        return bound[0], bound[1]

    async def _accept(self, sock: socket.socket) -> None:
        """An SSL listener's accept loop: each socket's handshake in a task of its own."""
        loop = asyncio.get_running_loop()
        while True:
            try:
                accepted, address = await loop.sock_accept(sock)
            except OSError as exc:  # out of descriptors: an operating limit, not a bug
                log.warning("accepting on %s failed: %s; trying again in %d ms", self.listener,
                            exc, ACCEPT_RETRY_MS)
                await asyncio.sleep(ACCEPT_RETRY_MS / 1000)
                continue
            peer = f"{address[0]}:{address[1]}"
            open_now = len(self.conns) + len(self.handshakes)
            if open_now >= self.limits.connections_max:
                log.warning("refusing connection from %s: %d connections open (limit)", peer,
                            open_now)
                accepted.close()
                continue
            task = loop.create_task(self._handshake(accepted, peer))
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    async def _handshake(self, sock: socket.socket, peer: str) -> None:
        tls = self.tls
        assert tls is not None
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: _Connection(self), sock, ssl=tls.context,
                ssl_handshake_timeout=tls.handshake_timeout_ms / 1000)
        except (OSError, TimeoutError) as exc:  # ssl.SSLError and ConnectionError are OSErrors
            sock.close()
            self.handshake_failed(peer, exc)

    def handshake_failed(self, peer: str, exc: BaseException) -> None:
        """One INFO line per HANDSHAKE_FAILURE_LOG_MS at most; the others are counted in it."""
        self.handshake_failures_total += 1
        now = time.monotonic()
        if now - self._failure_said_at < HANDSHAKE_FAILURE_LOG_MS / 1000:
            self._failures_unsaid += 1
            return
        more = f" ({self._failures_unsaid} more since the last such line)" \
            if self._failures_unsaid else ""
        log.info("TLS handshake from %s on %s failed: %s%s", peer, self.listener,
                 _reason(exc), more)
        self._failure_said_at, self._failures_unsaid = now, 0

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        if self._acceptor is not None:
            self._acceptor.cancel()
            await asyncio.gather(self._acceptor, return_exceptions=True)
        if self._tls_socket is not None:
            self._tls_socket.close()
        handshakes = list(self.handshakes)
        for handshake in handshakes:
            handshake.cancel()
        await asyncio.gather(*handshakes, return_exceptions=True)
        tasks = [c.task for c in self.conns if c.task is not None]
        for conn in list(self.conns):
            conn.close(abort=True)  # unsent answers are dropped: a peer that does not read
            # must not hold the stop (wait_closed waits for every connection to go)
        for task in tasks:  # a handler still waiting (a long poll) has no one to answer
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _sweep_idle(self) -> None:
        period = max(self.limits.idle_ms_max / 10_000, 0.05)
        while True:
            await asyncio.sleep(period)
            cutoff = time.monotonic() - self.limits.idle_ms_max / 1000
            for conn in [c for c in self.conns if c.last_active < cutoff]:
                log.info("closing idle connection from %s", conn.peer)
                conn.close()

    async def answer(self, frame_view: memoryview, peer: str,
                     principal: str = ANONYMOUS) -> list[Buffer] | None:
        """The framed answer to one request frame, as buffers to write in order, or None (no
        answer is due)."""
        # The codec reads through the buffer protocol: byte fields come out as views of the
        # frame (its annotations say bytes, the common case).
        request = cast(bytes, frame_view)
        try:
            key, version, correlation_id = peek_request_header(request)
        except DecodeError as exc:
            raise _Closing(str(exc)) from exc
        registration = REGISTRY.get(key)
        if registration is None:
            raise _Closing(f"unknown API key {key}")
        api = registration.api
        if not registration.min_version <= version <= registration.max_version:
            if key == ApiKey.API_VERSIONS:
                body = api.encode_response(api_versions_handler.unsupported_version_answer(), 0)
                return [frame(encode_response_header(correlation_id, 0) + body)]
            raise _Closing(f"{api.name} v{version} is not supported "
                           f"(v{registration.min_version}-{registration.max_version})")
        try:
            header, pos = decode_request_header(request, api.request_header_version(version))
            message = api.decode_request(request, version, pos, strict=False)  # as Kafka
        except (DecodeError, UnsupportedVersion) as exc:
            raise _Closing(f"malformed {api.name} v{version} request: {exc}") from exc
        self.requests_total += 1
        ctx = RequestContext(header, version, peer, self.app, self.listener, principal)
        hooks = self.hooks
        try:
            if hooks is not None and key in hooks.armed:
                result = await hooks.intercept(ctx, api, message, registration.handle)
            else:
                result = await registration.handle(ctx, message)
        except Exception as exc:  # a handler bug: this connection only, loudly
            log.exception("%s v%d from %s failed", api.name, version, peer)
            raise _Closing(f"internal error in {api.name}: {exc}") from exc
        if self.observer is not None:
            self.observer(self.listener, key, version, result)
        if result is None:
            return None
        header_bytes = encode_response_header(correlation_id, api.response_header_version(version))
        return framed_chunks(header_bytes, api, result, version)


def _reason(exc: BaseException) -> str:
    """An ssl error's reason ("TLSV13_ALERT_CERTIFICATE_REQUIRED"), else the exception."""
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return str(exc.reason)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


Buffer = bytes | bytearray | memoryview
CHUNK_JOIN_BYTES_MAX = 16 * 1024  # encoded pieces up to this size are joined, larger ones not


def framed_chunks(header: bytes, api: Any, result: Any, version: int) -> list[Buffer]:
    """The answer frame as a few buffers for one vectored write: the size prefix, the header
    and the small encoded fields joined, and every large field (a Fetch answer's records) passed
    as it is, so a megabyte of records is never copied into a bigger bytes object."""
    if type(result) is not api.response:
        return [frame(header + api.encode_response(result, version))]  # raises, naming it
    pieces: list[Buffer] = [b"", header]
    try:
        api.encoder(False, version)(result, pieces)
    except Exception:  # noqa: BLE001 - encode again below: the codec names what is wrong
        return [frame(header + api.encode_response(result, version))]
    size = sum(map(len, pieces))
    if size <= CHUNK_JOIN_BYTES_MAX:
        return [_SIZE.pack(size) + b"".join(pieces)]
    pieces[0] = _SIZE.pack(size)
    out: list[Buffer] = []
    small: list[Buffer] = []
    for piece in pieces:
        if len(piece) > CHUNK_JOIN_BYTES_MAX:
            if small:
                out.append(b"".join(small))
                small = []
            out.append(piece)
        else:
            small.append(piece)
    if small:
        out.append(b"".join(small))
    return out
