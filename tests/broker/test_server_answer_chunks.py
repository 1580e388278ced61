"""The broker writes an answer as a few buffers (broker.server.framed_chunks): joined, they must be
exactly the frame the codec makes, and a large records field must be passed on, not copied."""

from __future__ import annotations

import os

import pytest

from epochlog.broker.server import CHUNK_JOIN_BYTES_MAX, framed_chunks
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from epochlog.protocol.apis.metadata import MetadataResponse
from epochlog.protocol.errors import EncodeError
from epochlog.protocol.frames import frame
from epochlog.protocol.headers import encode_response_header
from epochlog.protocol.registry import APIS

FETCH, METADATA = APIS[ApiKey.FETCH], APIS[ApiKey.METADATA]


def fetch_answer(*records: bytes | None) -> FetchResponse:
    return FetchResponse(session_id=5, responses=[FetchableTopicResponse(topic="t", partitions=[
        PartitionData(partition_index=i, high_watermark=9, records=r)
        for i, r in enumerate(records)])])


@pytest.mark.parametrize("version", [4, 11, 12])
def test_chunks_join_to_the_codecs_frame(version: int) -> None:
    big, small = os.urandom(3 * CHUNK_JOIN_BYTES_MAX), os.urandom(100)
    answer = fetch_answer(big, None, small, memoryview(big)[7:CHUNK_JOIN_BYTES_MAX + 9])
    header = encode_response_header(77, FETCH.response_header_version(version))
    chunks = framed_chunks(header, FETCH, answer, version)
    assert b"".join(chunks) == frame(header + FETCH.encode_response(answer, version))
    assert any(c is big for c in chunks)  # the records themselves, not a copy
    assert len(chunks) <= 5  # small pieces are joined


def test_a_small_answer_is_one_buffer() -> None:
    answer = MetadataResponse(controller_id=3)
    header = encode_response_header(1, METADATA.response_header_version(9))
    chunks = framed_chunks(header, METADATA, answer, 9)
    assert chunks == [frame(header + METADATA.encode_response(answer, 9))]


def test_an_answer_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(EncodeError):
        framed_chunks(b"\0\0\0\1", FETCH, MetadataResponse(), 12)
