"""One TCP connection to a Kafka-protocol server: framed, pipelined, answered in order.

Theory of operation
-------------------
Kafka answers the requests of one connection in the order they were sent, each answer carrying
the request's correlation id. So a connection keeps a FIFO of waiting futures; one reader task takes
whole frames off the socket and resolves the head of the queue, checking the correlation id. A
request that gets no answer in time leaves the stream in an unknown state, so a timeout closes the
connection and fails everything still waiting on it (what Kafka's own clients do).

Reading: the connection is an asyncio BufferedProtocol. The loop receives straight into buffers a
`protocol.frames.FrameReceiver` hands out: small answers land in its scratch buffer, and a large
one (a Fetch answer of a megabyte) gets its own bytearray that the kernel fills, so its bytes are
copied once by the kernel and by nobody else (a StreamReader copied them twice more: into its
buffer, then out of it). Once nothing refers to a large frame any more (no answer, no view of
it: its reference count says so), its memory takes the next large answer, which spares a
megabytes-large allocation, its zero-fill and page faults per Fetch. Answers are resolved from
the protocol callback itself, with no reader task in between. A Fetch answer is decoded from a
memoryview of its frame, so its record sets come out as views of that frame (the consumer makes its
one copy; a follower writes them out as they are); every other answer is decoded from bytes, so its
byte fields are plain bytes.
Writing: header and body leave in one writelines call (no concatenation of a large Produce
body), and a sender waits while the transport's buffer is above its high-water mark.

Limits: at most `in_flight_max` requests wait at once (senders queue behind a semaphore), and no
answer frame may exceed `frame_bytes_max` (checked before it is read).

Setup: `connect_timeout_ms` bounds the whole setup, the TCP connect *and* the ApiVersions
exchange: a connection is usable only once both are done (KIP-601's
socket.connection.setup.timeout.ms). Java's client stops that clock at the TCP connect and lets
ApiVersions wait request.timeout.ms; we do not, because the kernel of a frozen (SIGSTOPped) or
wedged broker still completes the TCP handshake from its listen backlog, so only the ApiVersions
answer can tell a live broker from a frozen one, and a 30 s request timeout there is what made a
producer facing a frozen leader miss its failover (issue 29). librdkafka bounds the same
exchange with api.version.request.timeout.ms (10 s).

Brokers and the controller reuse this layer to talk to each other (a follower's fetcher, the
controller's requests to brokers); it is the only part of `client` they import.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import ssl
import struct
import sys
import time
from dataclasses import dataclass
from typing import Any

from epochlog.protocol.api import Api
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.api_versions import ApiVersionsRequest
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.errors import DecodeError, ProtocolError
from epochlog.protocol.frames import SCRATCH_BYTES, FrameReceiver
from epochlog.protocol.headers import RequestHeader, decode_response_header
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import Message

log = logging.getLogger("epochlog.connection")

_SIZE = struct.Struct(">i")
FRAME_BYTES_MAX_DEFAULT = 100 * 1024 * 1024
IN_FLIGHT_MAX_DEFAULT = 16
REQUEST_TIMEOUT_MS_DEFAULT = 30_000
CONNECT_TIMEOUT_MS_DEFAULT = 10_000
CLIENT_SOFTWARE_NAME = "epochlog"
CLIENT_SOFTWARE_VERSION = "0.1.0"


class ConnectionClosed(ConnectionError):
    """The connection is closed (by either side, or after a failure); the request may or may not
    have reached the server."""


class RequestTimedOut(TimeoutError):
    """No answer within the request timeout; the connection was closed."""


class ConnectionSetupTimedOut(TimeoutError):
    """The TCP connect and ApiVersions did not both finish within the setup timeout."""


class NoCommonVersion(Exception):
    """The server speaks no version of an API that we speak."""


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


@dataclass
class _Pending:
    correlation_id: int
    api: Api
    version: int
    future: asyncio.Future[Any]
    sent_s: float  # time.monotonic() when it was queued to be sent
    timer: asyncio.TimerHandle | None = None


FETCH_KEY = 1  # answers decoded from a view of their frame (see the module docstring)


class _Stream(asyncio.BufferedProtocol):
    """The transport's callbacks: frames into Connection._deliver, loss into Connection._fail."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.frames = FrameReceiver(conn.frame_bytes_max)
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.writable: asyncio.Future[None] | None = None  # set while writing is paused
        self.last_large: bytearray | None = None  # the last frame received into its own buffer

    def get_buffer(self, sizehint: int) -> memoryview:
        last = self.last_large
        # References: the attribute, `last`, getrefcount's argument; a view would add one.
        if last is not None and sys.getrefcount(last) == 3:
            # Nobody holds the last large answer's frame or a view of it any more: the next
            # large answer is received into its memory (no allocation, no page faults).
            self.frames.recycle(last)
            self.last_large = None
        return self.frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        conn = self.conn
        try:
            for data in self.frames.buffer_updated(nbytes):
                if len(data) > SCRATCH_BYTES:
                    self.last_large = data
                conn._deliver(data)
        except ProtocolError as exc:  # DecodeError, FrameTooLarge: the stream is unusable
            conn._fail(f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug in decoding: this connection only, never the loop
            log.exception("%s: failed to take an answer", conn)
            conn._fail(f"{type(exc).__name__}: {exc}")

    def eof_received(self) -> bool:
        if self.conn._stream is self:
            self.conn._fail(self._closed_by_server())
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn._stream is self:
            self.conn._fail(self._closed_by_server() if exc is None
                            else f"{type(exc).__name__}: {exc}")
        if not self.closed.done():
            self.closed.set_result(None)
        self.resume_writing()

    def _closed_by_server(self) -> str:
        """Over TLS 1.3 a broker that refuses our certificate (or its absence) does so after
        our side of the handshake ended: we see the connection close before any answer."""
        if self.conn.ssl_context is not None and not self.conn.server_versions:
            return ("closed by the server before any answer (over TLS: does it require a "
                    "client certificate, or not trust ours?)")
        return "closed by the server"

    def pause_writing(self) -> None:
        if self.writable is None or self.writable.done():
            self.writable = asyncio.get_running_loop().create_future()

    def resume_writing(self) -> None:
        if self.writable is not None and not self.writable.done():
            self.writable.set_result(None)


class Connection:
    def __init__(self, host: str, port: int, *, client_id: str = "epochlog",
                 frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT,
                 in_flight_max: int = IN_FLIGHT_MAX_DEFAULT,
                 request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
                 connect_timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.ssl_context = ssl_context  # TLS when set (security.py); the handshake is bounded
        # by connect_timeout_ms with the connection itself
        self.port = port
        self.client_id = client_id
        self.frame_bytes_max = frame_bytes_max
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.server_versions: dict[int, tuple[int, int]] = {}
        self._slots = asyncio.Semaphore(in_flight_max)
        self._pending: collections.deque[_Pending] = collections.deque()
        self._ids = itertools.count(1)
        self._transport: asyncio.Transport | None = None
        self._stream: _Stream | None = None
        self._closed_reason: str | None = None
        self._answered_s = 0.0  # time.monotonic() of the latest answer

    def __repr__(self) -> str:
        return f"Connection({self.host}:{self.port})"

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None or self._transport is None

    @property
    def in_flight(self) -> int:
        """Requests sent and not yet answered."""
        return len(self._pending)

    def silent_s(self) -> float:
        """Seconds the oldest waiting request has waited with no answer to any request since
        (0 when none waits): how long the server has shown no sign of life to us."""
        if not self._pending:
            return 0.0
        return max(0.0, time.monotonic() - max(self._pending[0].sent_s, self._answered_s))

    def abort(self, reason: str) -> None:
        """Give up on the connection now: each waiting request fails with ConnectionClosed, as
        after a request timeout, and the socket is dropped without flushing."""
        transport = self._transport
        self._fail(reason)
        if transport is not None:
            transport.abort()

    async def connect(self, negotiate: bool = True) -> Connection:
        """Open the socket and, unless told not to, learn the server's API versions; both
        within connect_timeout_ms (the setup timeout: see the module's notes), else
        ConnectionSetupTimedOut and the socket is closed."""
        timeout_s = self.connect_timeout_ms / 1000
        # asyncio.timeout, not wait_for: on Python 3.11 wait_for returns (or raises) the
        # connection's outcome when a cancellation arrives as the attempt ends, and swallows
        # the cancellation; a broker's follower fetcher then never stopped and its stop hung
        setup = asyncio.timeout(timeout_s)
        try:
            async with setup:
                await self._set_up(negotiate)
        except TimeoutError as exc:
            if not setup.expired():  # ApiVersions' own request timeout came first
                raise
            step = "ApiVersions" if self._transport is not None else \
                "TCP connect and TLS handshake" if self.ssl_context is not None else "TCP connect"
            reason = f"connection setup got no further than {step} in {timeout_s:.1f}s"
            self._fail(reason)
            if self._transport is not None:
                self._transport.abort()  # nothing of ours is worth sending to it
            raise ConnectionSetupTimedOut(f"{self}: {reason}") from exc
        except asyncio.CancelledError:  # the caller gave up (a client closing): no socket left
            self._fail("cancelled during setup")
            raise
        return self

    async def _set_up(self, negotiate: bool) -> None:
        loop = asyncio.get_running_loop()
        if self.ssl_context is None:
            transport, stream = await loop.create_connection(lambda: _Stream(self), self.host,
                                                             self.port)
        else:  # the handshake is part of the setup, under its timeout
            transport, stream = await loop.create_connection(
                lambda: _Stream(self), self.host, self.port, ssl=self.ssl_context,
                ssl_handshake_timeout=self.connect_timeout_ms / 1000)
        self._transport, self._stream = transport, stream
        self._closed_reason = None
        if negotiate:
            await self.negotiate_versions()

    async def negotiate_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions at our highest version; a server that does not know it answers with
        UNSUPPORTED_VERSION and its ranges in a v0 body (KIP-511), and we ask again at the best
        version it has."""
        api = APIS[ApiKey.API_VERSIONS]
        request = ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                     client_software_version=CLIENT_SOFTWARE_VERSION)
        answer = await self.request(api, api.max_version, request)
        if answer.error_code == ErrorCode.UNSUPPORTED_VERSION:
            theirs = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
            low, high = theirs.get(18, (0, 0))
            answer = await self.request(api, min(high, api.max_version), request)
        if answer.error_code != 0:
            raise ConnectionError(f"ApiVersions failed with error {answer.error_code}")
        self.server_versions = {k.api_key: (k.min_version, k.max_version)
                                for k in answer.api_keys}
        return self.server_versions

    def version_for(self, api: Api) -> int:
        """The highest version of api both sides speak."""
        theirs = self.server_versions.get(api.key)
        if theirs is None:
            raise NoCommonVersion(f"{self} does not offer {api.name}")
        high = min(theirs[1], api.max_version)
        if high < max(theirs[0], api.min_version):
            raise NoCommonVersion(f"{self} offers {api.name} v{theirs[0]}-{theirs[1]}, "
                                  f"we speak v{api.min_version}-{api.max_version}")
        return high

    async def request(self, api: Api, version: int, message: Message, *,
                      timeout_ms: int | None = None, expect_response: bool = True) -> Any:
        """Send one request and wait for its answer (or only send, for acks=0 produce)."""
        if self.closed:
            raise ConnectionClosed(f"{self} is closed: {self._closed_reason or 'not connected'}")
        timeout = (timeout_ms if timeout_ms is not None else self.request_timeout_ms) / 1000
        async with self._slots:
            if self.closed:  # while we waited for a slot
                raise ConnectionClosed(f"{self} is closed: {self._closed_reason}")
            correlation_id = next(self._ids) & 0x7FFFFFFF
            header = RequestHeader(api.key, version, correlation_id, self.client_id)
            head = header.encode(api.request_header_version(version))
            body = api.encode_request(message, version)
            pending = None
            loop = asyncio.get_running_loop()
            if expect_response:
                pending = _Pending(correlation_id, api, version, loop.create_future(),
                                   time.monotonic())
                # A caller cancelled while waiting leaves the future to be failed at close with
                # nobody to read the error: mark it read so asyncio does not log it.
                pending.future.add_done_callback(_retrieve)
                self._pending.append(pending)
            transport, stream = self._transport, self._stream
            assert transport is not None and stream is not None
            try:
                if transport.is_closing():
                    raise RuntimeError("the transport is closing")
                transport.writelines((_SIZE.pack(len(head) + len(body)), head, body))
            except RuntimeError as exc:  # uvloop: the peer closed before connection_lost ran
                self._fail(f"closed while sending: {exc}")
                raise ConnectionClosed(f"{self}: {self._closed_reason}") from None
            if stream.writable is not None and not stream.writable.done():
                await stream.writable  # the transport's buffer is full: wait for it to drain
                if self._closed_reason is not None and pending is None:
                    raise ConnectionClosed(f"{self}: {self._closed_reason}")
            if pending is None:
                return None
            if not pending.future.done():
                pending.timer = loop.call_later(timeout, self._timed_out, pending, timeout)
            try:
                return await pending.future
            finally:
                if pending.timer is not None:
                    pending.timer.cancel()

    def _timed_out(self, pending: _Pending, timeout: float) -> None:
        api, version = pending.api, pending.version
        if not pending.future.done():
            pending.future.set_exception(RequestTimedOut(
                f"{self}: {api.name} got no answer in {timeout:.1f}s"))
        self._fail(f"{api.name} v{version} got no answer in {timeout:.1f}s")

    def _deliver(self, data: bytearray) -> None:
        if not self._pending:
            raise DecodeError("an answer arrived that no request is waiting for", "connection")
        pending = self._pending[0]  # popped only once the answer is known to be its own
        api, version = pending.api, pending.version
        buf: Any = memoryview(data) if api.key == FETCH_KEY else bytes(data)
        correlation_id, pos = decode_response_header(buf, api.response_header_version(version))
        if correlation_id != pending.correlation_id:
            raise DecodeError(f"answer for correlation id {correlation_id} where "
                              f"{pending.correlation_id} was next", "ResponseHeader")
        self._pending.popleft()
        self._answered_s = time.monotonic()
        try:
            answer = self._decode_answer(api, version, buf, pos)
        except DecodeError as exc:
            if not pending.future.done():
                pending.future.set_exception(ConnectionClosed(f"{self}: bad answer: {exc}"))
            raise
        if not pending.future.done():
            pending.future.set_result(answer)

    @staticmethod
    def _decode_answer(api: Api, version: int, data: Any, pos: int) -> Any:
        try:
            return api.decode_response(data, version, pos)
        except DecodeError:
            if api.key != 18 or version == 0:
                raise
            return api.decode_response(data, 0, pos)  # KIP-511: an error answer in a v0 body

    def _fail(self, reason: str) -> None:
        if self._closed_reason is None:
            self._closed_reason = reason
            log.debug("%s closed: %s", self, reason)
        while self._pending:
            pending = self._pending.popleft()
            if not pending.future.done():
                pending.future.set_exception(ConnectionClosed(f"{self}: {reason}"))
        if self._transport is not None:
            self._transport.close()

    async def close(self) -> None:
        self._fail("closed")
        stream = self._stream
        if stream is not None:
            try:  # transport.close() sends what is buffered first; a peer may not take it
                async with asyncio.timeout(self.connect_timeout_ms / 1000):  # (see connect)
                    await asyncio.shield(stream.closed)
            except TimeoutError:
                assert self._transport is not None
                self._transport.abort()
