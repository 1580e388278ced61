"""The broker's server meets bad input by closing that one connection; others keep working.

These run the server in-process on 127.0.0.1 with only the handlers that need no cluster
(ApiVersions); whole-broker tests on real processes come with the broker process itself. The last
ones check the framing around it: pipelined requests of every size (below and above the receive
scratch buffer, cut anywhere) answered in order, a half-closed peer still answered, and the
requests before a bad frame answered before the connection closes.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from epochlog.broker.server import KafkaServer, ServerLimits
from epochlog.client.connection import Connection
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.frames import frame
from epochlog.protocol.headers import RequestHeader
from epochlog.protocol.registry import APIS


@pytest.fixture
async def server():
    srv = KafkaServer(app=None, limits=ServerLimits(frame_bytes_max=1 << 20, idle_ms_max=500))
    host, port = await srv.start("127.0.0.1", 0)
    yield srv, port
    await srv.stop()


async def _closed_after(port: int, payload: bytes) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(payload)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(100), 5)
    writer.close()
    return data == b""


async def test_api_versions_lists_registered_handlers(server) -> None:
    _, port = server
    conn = await Connection("127.0.0.1", port).connect()
    assert conn.server_versions[18] == (0, 3)
    await conn.close()


async def test_unknown_api_versions_version_gets_kip511_answer(server) -> None:
    _, port = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(frame(RequestHeader(18, 99, 7, "x").encode(2) + b"\x00\x00\x00"))
    size, = struct.unpack(">i", await reader.readexactly(4))
    body = await reader.readexactly(size)
    assert struct.unpack_from(">i", body)[0] == 7
    answer = APIS[ApiKey.API_VERSIONS].decode_response(body, 0, 4)
    assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION and (18, 0, 3) in [
        (k.api_key, k.min_version, k.max_version) for k in answer.api_keys]
    writer.close()


@pytest.mark.parametrize("payload", [
    b"\x00\x00\x00\x03abc",                               # shorter than a request header
    frame(RequestHeader(999, 0, 1, "x").encode(1)),         # unknown API key
    frame(RequestHeader(3, 99, 1, "x").encode(1)),          # version no handler serves
    struct.pack(">i", 1 << 30) + b"x" * 100,                # over the frame limit
    frame(RequestHeader(18, 3, 1, "x").encode(2) + b"\xff\xff\xff\xff\xff\xff"),  # bad body
])
async def test_bad_input_closes_only_that_connection(server, payload: bytes) -> None:
    _, port = server
    healthy = await Connection("127.0.0.1", port).connect()
    assert await _closed_after(port, payload)
    # The other connection is untouched and the server still accepts new ones.
    await healthy.negotiate_versions()
    again = await Connection("127.0.0.1", port).connect()
    await again.close()
    await healthy.close()


async def test_idle_connections_are_closed(server) -> None:
    _, port = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    assert await asyncio.wait_for(reader.read(1), 5) == b""
    writer.close()


# ---------------------------------------------------------------- framing and order of answers
def _api_versions(correlation_id: int, name_bytes: int) -> bytes:
    """An ApiVersions v3 request frame; a long client_software_name makes it large (the server
    receives frames over its 32 KiB scratch buffer into their own buffers)."""
    from epochlog.protocol.apis.api_versions import ApiVersionsRequest
    body = APIS[ApiKey.API_VERSIONS].encode_request(ApiVersionsRequest(
        client_software_name="x" * name_bytes, client_software_version="1"), 3)
    return frame(RequestHeader(18, 3, correlation_id, "t").encode(2) + body)


async def _correlation_ids(reader: asyncio.StreamReader, count: int) -> list[int]:
    ids = []
    for _ in range(count):
        size, = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 5))
        ids.append(struct.unpack(">i", (await reader.readexactly(size))[:4])[0])
    return ids


async def test_pipelined_requests_of_any_size_are_answered_in_order(server) -> None:
    _, port = server
    sizes = [10, 100_000, 20, 40_000, 300_000, 5, 33_000]
    stream = b"".join(_api_versions(i, n) for i, n in enumerate(sizes))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for start in range(0, len(stream), 7_777):  # cut across frame boundaries
        writer.write(stream[start:start + 7_777])
        await writer.drain()
    assert await _correlation_ids(reader, len(sizes)) == list(range(len(sizes)))
    writer.close()


async def test_a_half_closed_connection_still_gets_its_answers(server) -> None:
    _, port = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_api_versions(1, 10) + _api_versions(2, 50_000))
    writer.write_eof()
    assert await _correlation_ids(reader, 2) == [1, 2]
    assert await asyncio.wait_for(reader.read(1), 5) == b""  # then the server closes
    writer.close()


async def test_requests_before_a_bad_frame_are_answered_then_it_closes(server) -> None:
    _, port = server
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(_api_versions(1, 10) + _api_versions(2, 50_000) + struct.pack(">i", 1 << 30))
    assert await _correlation_ids(reader, 2) == [1, 2]
    assert await asyncio.wait_for(reader.read(1), 5) == b""
    writer.close()
