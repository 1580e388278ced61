"""The shared connection layer against a small Kafka-protocol server on 127.0.0.1.

The server here is a real TCP server that decodes requests with our codec; it stands in for a
broker only to drive the connection's edge cases (answer order, KIP-511 fallback, silence,
oversize answers) that a healthy broker would not produce on demand.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any

import pytest

from epochlog.client.connection import (
    Connection,
    ConnectionClosed,
    ConnectionSetupTimedOut,
    RequestTimedOut,
)
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.api_versions import ApiVersion, ApiVersionsResponse
from epochlog.protocol.apis.metadata import MetadataRequest, MetadataResponse
from epochlog.protocol.frames import FrameBuffer, frame
from epochlog.protocol.headers import (
    decode_request_header,
    encode_response_header,
    peek_request_header,
)
from epochlog.protocol.registry import APIS


class Server:
    """Answers ApiVersions (v0-2 only, like an older broker) and Metadata (echoing the
    correlation id as controller_id); modes make it misbehave on purpose."""

    def __init__(self, mode: str = "normal") -> None:
        self.mode = mode
        self.server: asyncio.base_events.Server | None = None
        self.port = 0

    async def __aenter__(self) -> Server:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        self.server.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameBuffer(1 << 20)
        held: list[bytes] = []
        try:
            while data := await reader.read(65536):
                for request in frames.feed(data):
                    answer = self.answer(request)
                    if self.mode == "silent-metadata" and answer is None:
                        continue
                    if self.mode == "reversed" and peek_request_header(request)[0] == 3:
                        held.append(answer)
                        if len(held) == 2:
                            writer.write(held[1] + held[0])
                        continue
                    writer.write(answer)
        finally:
            writer.close()

    def answer(self, request: bytes) -> bytes | None:
        key, version, correlation_id = peek_request_header(request)
        api = APIS[key]
        if key == ApiKey.API_VERSIONS:
            body = ApiVersionsResponse(api_keys=[ApiVersion(18, 0, 2), ApiVersion(3, 1, 9)])
            if version > 2:  # KIP-511: a version we "do not know" gets an error in a v0 body
                body.error_code, version = 35, 0
            return frame(encode_response_header(correlation_id, 0)
                         + api.encode_response(body, version))
        header, pos = decode_request_header(request, api.request_header_version(version))
        api.decode_request(request, version, pos)
        if self.mode == "silent-metadata":
            return None
        if self.mode == "oversize":
            return struct.pack(">i", 1 << 30)
        body = MetadataResponse(controller_id=correlation_id)
        return frame(encode_response_header(correlation_id, api.response_header_version(version))
                     + api.encode_response(body, version))


async def test_version_negotiation_steps_down_after_unsupported_version() -> None:
    async with Server() as server:
        conn = await Connection("127.0.0.1", server.port).connect()
        assert conn.server_versions == {18: (0, 2), 3: (1, 9)}
        assert conn.version_for(APIS[ApiKey.METADATA]) == 9
        await conn.close()


async def test_pipelined_requests_get_their_own_answers() -> None:
    async with Server() as server:
        conn = await Connection("127.0.0.1", server.port).connect()
        answers = await asyncio.gather(*(conn.request(APIS[ApiKey.METADATA], 9,
                                                      MetadataRequest(topics=[]))
                                         for _ in range(50)))
        ids = [a.controller_id for a in answers]
        assert ids == sorted(ids) and len(set(ids)) == 50
        await conn.close()


async def test_out_of_order_answer_closes_the_connection() -> None:
    async with Server("reversed") as server:
        conn = await Connection("127.0.0.1", server.port).connect()
        results = await asyncio.gather(conn.request(APIS[ApiKey.METADATA], 9, MetadataRequest()),
                                       conn.request(APIS[ApiKey.METADATA], 9, MetadataRequest()),
                                       return_exceptions=True)
        assert all(isinstance(r, ConnectionClosed) for r in results), results
        assert "correlation id" in str(results[0])
        assert conn.closed


async def test_timeout_closes_the_connection_and_fails_waiters() -> None:
    async with Server("silent-metadata") as server:
        conn = await Connection("127.0.0.1", server.port, request_timeout_ms=200).connect()
        with pytest.raises(RequestTimedOut):
            await conn.request(APIS[ApiKey.METADATA], 9, MetadataRequest())
        with pytest.raises(ConnectionClosed):
            await conn.request(APIS[ApiKey.METADATA], 9, MetadataRequest())


async def test_oversize_answer_is_refused_before_reading_it() -> None:
    async with Server("oversize") as server:
        conn = await Connection("127.0.0.1", server.port, frame_bytes_max=1 << 20).connect()
        with pytest.raises(ConnectionClosed, match="FrameTooLarge"):
            await conn.request(APIS[ApiKey.METADATA], 9, MetadataRequest())


async def test_connect_never_swallows_a_cancellation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cancellation arriving as the connection attempt ends must cancel. Python 3.11's
    wait_for raised the attempt's outcome instead: a broker's follower fetcher, cancelled at
    stop as its leader refused a connection, went on retrying and the broker never stopped."""
    loop = asyncio.get_running_loop()
    attempt: asyncio.Future[Any] = loop.create_future()
    monkeypatch.setattr(loop, "create_connection", lambda *args, **kwargs: attempt)
    task = loop.create_task(Connection("127.0.0.1", 9, connect_timeout_ms=5000).connect())
    for _ in range(3):
        await asyncio.sleep(0)  # parked on the attempt
    attempt.set_exception(ConnectionRefusedError(111, "refused"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_setup_timeout_bounds_api_versions_too() -> None:
    """A frozen broker's kernel still completes the TCP handshake, so only ApiVersions shows
    it is not answering: the setup timeout (KIP-601) covers both steps, whatever the request
    timeout (issue 29: a producer waited 30 s on ApiVersions to a paused leader). The socket
    here is accepted by the kernel and never read, as a SIGSTOPped broker's is."""
    frozen = socket.create_server(("127.0.0.1", 0))  # listening; nobody ever accepts
    try:
        port = frozen.getsockname()[1]
        conn = Connection("127.0.0.1", port, connect_timeout_ms=200, request_timeout_ms=60_000)
        with pytest.raises(ConnectionSetupTimedOut, match="no further than ApiVersions"):
            async with asyncio.timeout(10):  # far below the request timeout
                await conn.connect()
        assert conn.closed
    finally:
        frozen.close()
