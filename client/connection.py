"""One TCP connection to a Kafka-protocol server: framed, pipelined, answered in order.

Theory of operation
-------------------
Kafka answers the requests of one connection in the order they were sent, each answer carrying
the request's correlation id. So a connection keeps a FIFO of waiting futures; one reader task takes
whole frames off the socket and resolves the head of the queue, checking the correlation id. A
request that gets no answer in time leaves the stream in an unknown state, so a timeout closes the
connection and fails everything still waiting on it (what Kafka's own clients do).

Limits: at most `in_flight_max` requests wait at once (senders queue behind a semaphore), and no
answer frame may exceed `frame_bytes_max` (checked before it is read).

Brokers and the controller reuse this layer to talk to each other (a follower's fetcher, the
controller's requests to brokers); it is the only part of `client` they import.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import struct
from dataclasses import dataclass
from typing import Any

from protocol.api import Api
from protocol.apis.api_versions import ApiVersionsRequest
from protocol.error_codes import ErrorCode
from protocol.errors import DecodeError, FrameTooLarge
from protocol.frames import frame
from protocol.headers import RequestHeader, decode_response_header
from protocol.registry import APIS
from protocol.schema import Message

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


class NoCommonVersion(Exception):
    """The server speaks no version of an API that we speak."""


@dataclass
class _Pending:
    correlation_id: int
    api: Api
    version: int
    future: asyncio.Future[Any]


class Connection:
    def __init__(self, host: str, port: int, *, client_id: str = "epochlog",
                 frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT,
                 in_flight_max: int = IN_FLIGHT_MAX_DEFAULT,
                 request_timeout_ms: int = REQUEST_TIMEOUT_MS_DEFAULT,
                 connect_timeout_ms: int = CONNECT_TIMEOUT_MS_DEFAULT) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.frame_bytes_max = frame_bytes_max
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.server_versions: dict[int, tuple[int, int]] = {}
        self._slots = asyncio.Semaphore(in_flight_max)
        self._pending: collections.deque[_Pending] = collections.deque()
        self._ids = itertools.count(1)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._read_task: asyncio.Task[None] | None = None
        self._closed_reason: str | None = None

    def __repr__(self) -> str:
        return f"Connection({self.host}:{self.port})"

    @property
    def closed(self) -> bool:
        return self._closed_reason is not None or self._writer is None

    async def connect(self, negotiate: bool = True) -> Connection:
        """Open the socket and, unless told not to, learn the server's API versions."""
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port),
            self.connect_timeout_ms / 1000)
        self._closed_reason = None
        self._read_task = asyncio.get_running_loop().create_task(self._read_loop())
        if negotiate:
            await self.negotiate_versions()
        return self

    async def negotiate_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions at our highest version; a server that does not know it answers with
        UNSUPPORTED_VERSION and its ranges in a v0 body (KIP-511), and we ask again at the best
        version it has."""
        api = APIS[18]
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
            correlation_id = next(self._ids) & 0x7FFFFFFF
            header = RequestHeader(api.key, version, correlation_id, self.client_id)
            payload = header.encode(api.request_header_version(version)) + \
                api.encode_request(message, version)
            pending = None
            if expect_response:
                pending = _Pending(correlation_id, api, version,
                                   asyncio.get_running_loop().create_future())
                self._pending.append(pending)
            assert self._writer is not None
            self._writer.write(frame(payload))
            await self._writer.drain()
            if pending is None:
                return None
            try:
                return await asyncio.wait_for(asyncio.shield(pending.future), timeout)
            except asyncio.TimeoutError:
                self._fail(f"{api.name} v{version} got no answer in {timeout:.1f}s")
                raise RequestTimedOut(f"{self}: {api.name} got no answer in {timeout:.1f}s") from None

    async def _read_loop(self) -> None:
        assert self._reader is not None
        reason = "closed by the server"
        try:
            while True:
                size, = _SIZE.unpack(await self._reader.readexactly(4))
                if size < 0 or size > self.frame_bytes_max:
                    raise FrameTooLarge(f"answer frame of {size} bytes (limit "
                                        f"{self.frame_bytes_max})")
                self._deliver(await self._reader.readexactly(size))
        except asyncio.IncompleteReadError:
            pass
        except (OSError, DecodeError, FrameTooLarge) as exc:
            reason = f"{type(exc).__name__}: {exc}"
        except asyncio.CancelledError:
            reason = "closed"
        self._fail(reason)

    def _deliver(self, data: bytes) -> None:
        if not self._pending:
            raise DecodeError("an answer arrived that no request is waiting for", "connection")
        pending = self._pending[0]  # popped only once the answer is known to be its own
        api, version = pending.api, pending.version
        correlation_id, pos = decode_response_header(data, api.response_header_version(version))
        if correlation_id != pending.correlation_id:
            raise DecodeError(f"answer for correlation id {correlation_id} where "
                              f"{pending.correlation_id} was next", "ResponseHeader")
        self._pending.popleft()
        try:
            answer = self._decode_answer(api, version, data, pos)
        except DecodeError as exc:
            if not pending.future.done():
                pending.future.set_exception(ConnectionClosed(f"{self}: bad answer: {exc}"))
            raise
        if not pending.future.done():
            pending.future.set_result(answer)

    @staticmethod
    def _decode_answer(api: Api, version: int, data: bytes, pos: int) -> Any:
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
        if self._writer is not None:
            self._writer.close()

    async def close(self) -> None:
        task, self._read_task = self._read_task, None
        self._fail("closed")
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self._writer is not None:
            try:
                await self._writer.wait_closed()
            except OSError:
                pass

