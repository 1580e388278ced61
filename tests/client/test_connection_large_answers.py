"""The connection's read path with answers larger than its receive scratch buffer.

A real TCP server on 127.0.0.1 answers pipelined requests with a Fetch answer of a few megabytes
written in uneven pieces, immediately followed by a small answer in the same write, so frames
straddle reads both ways: the large frame is received into its own buffer, the small one into the
scratch buffer. What the caller gets must be byte for byte what was sent, in order. Each Fetch
answer's records differ (derived from its correlation id, which the answer carries as its
session id), so an answer received into the memory of one still in use would show.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from epochlog.client.connection import Connection, ConnectionClosed
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.fetch import (
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    FetchTopic,
    PartitionData,
)
from epochlog.protocol.apis.metadata import MetadataRequest, MetadataResponse
from epochlog.protocol.frames import FrameBuffer, frame
from epochlog.protocol.headers import encode_response_header, peek_request_header
from epochlog.protocol.registry import APIS

FETCH, METADATA = APIS[ApiKey.FETCH], APIS[ApiKey.METADATA]
RECORDS_BYTES = 3 * 1024 * 1024 + 17


def records_for(correlation_id: int) -> bytes:
    """Opaque to the connection: any bytes will do, different for each answer."""
    return random.Random(correlation_id).randbytes(RECORDS_BYTES - correlation_id)


def answer_to(request: bytes) -> bytes:
    key, version, correlation_id = peek_request_header(request)
    api = APIS[key]
    header = encode_response_header(correlation_id, api.response_header_version(version))
    if key == ApiKey.FETCH:
        body = FetchResponse(session_id=correlation_id, responses=[FetchableTopicResponse(
            topic="t", partitions=[PartitionData(partition_index=0,
                                                 records=records_for(correlation_id))])])
    else:
        body = MetadataResponse(controller_id=correlation_id)
    return frame(header + api.encode_response(body, version))


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    frames = FrameBuffer(1 << 20)
    rng = random.Random(7)
    try:
        while data := await reader.read(65536):
            requests = frames.feed(data)
            if not requests:
                continue
            out = b"".join(answer_to(r) for r in requests)
            pos = 0
            while pos < len(out):  # uneven pieces, each flushed on its own
                step = rng.choice((1, 3, 4, 5, 4093, 65536, 300_000))
                writer.write(out[pos:pos + step])
                await writer.drain()
                pos += step
    finally:
        writer.close()


def fetch_request() -> FetchRequest:
    return FetchRequest(topics=[FetchTopic(topic="t", partitions=[
        FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 30)])])


async def test_large_and_small_answers_arrive_whole_and_in_order() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = Connection("127.0.0.1", port, frame_bytes_max=8 << 20)
    try:
        await conn.connect(negotiate=False)
        calls = []
        for _ in range(3):
            calls.append(conn.request(FETCH, 12, fetch_request()))
            calls.append(conn.request(METADATA, 9, MetadataRequest(topics=[])))
        answers = await asyncio.wait_for(asyncio.gather(*calls), 60)
        for fetched, metadata in zip(answers[::2], answers[1::2], strict=True):
            records = fetched.responses[0].partitions[0].records
            assert bytes(records) == records_for(fetched.session_id)
            assert isinstance(metadata.controller_id, int)
        ids = [m.controller_id for m in answers[1::2]]
        assert ids == sorted(ids) and len(set(ids)) == 3
    finally:
        await conn.close()
        server.close()


async def test_a_frame_is_reused_only_once_nothing_refers_to_it() -> None:
    """One request at a time: an answer dropped before the next request frees its frame for
    the next answer; a view kept across requests keeps its bytes."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = Connection("127.0.0.1", port, frame_bytes_max=8 << 20)
    try:
        await conn.connect(negotiate=False)
        kept = []
        for i in range(6):
            answer = await asyncio.wait_for(conn.request(FETCH, 12, fetch_request()), 60)
            records = answer.responses[0].partitions[0].records
            assert bytes(records) == records_for(answer.session_id)
            if i % 3 == 1:
                kept.append((answer.session_id, records))
            del answer, records
        for correlation_id, records in kept:
            assert bytes(records) == records_for(correlation_id)
    finally:
        await conn.close()
        server.close()


async def test_an_answer_over_the_frame_limit_closes_the_connection() -> None:
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    conn = Connection("127.0.0.1", port, frame_bytes_max=1 << 20)
    try:
        await conn.connect(negotiate=False)
        with pytest.raises(ConnectionClosed, match="FrameTooLarge"):
            await asyncio.wait_for(conn.request(FETCH, 12, fetch_request()), 60)
        assert conn.closed
    finally:
        await conn.close()
        server.close()
