"""Bad bytes get a clear error and never make the codec allocate more than the frame allows."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic
from epochlog.protocol.errors import DecodeError, FrameTooLarge, UnsupportedVersion
from epochlog.protocol.frames import FrameBuffer, frame
from epochlog.protocol.headers import (
    RequestHeader,
    decode_request_header,
    decode_response_header,
    encode_response_header,
    peek_request_header,
)
from epochlog.protocol.registry import APIS, api_for
from epochlog.protocol.varint import (
    encode_uvarint,
    encode_varint,
    read_uvarint,
    read_varint,
    read_varlong,
)


@settings(max_examples=200, deadline=None)
@given(payloads=st.lists(st.binary(max_size=300), max_size=8), cuts=st.lists(st.integers(1, 50)))
def test_frames_come_out_whole_however_the_bytes_arrive(payloads, cuts) -> None:
    stream = b"".join(frame(p) for p in payloads)
    buf = FrameBuffer(frame_bytes_max=1024)
    out, pos = [], 0
    for cut in cuts + [len(stream)]:
        out += buf.feed(stream[pos:pos + cut])
        pos += cut
    assert out == payloads
    assert len(buf) == 0


def test_oversize_frame_is_refused_before_any_allocation() -> None:
    buf = FrameBuffer(frame_bytes_max=1 << 20)
    tracemalloc.start()
    try:
        with pytest.raises(FrameTooLarge, match="over the limit"):
            buf.feed(struct.pack(">i", 0x7FFFFFFF) + b"x" * 10)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"refusing an oversize frame allocated {peak} bytes"


def test_negative_frame_size_is_an_error() -> None:
    with pytest.raises(DecodeError, match="negative frame size"):
        FrameBuffer().feed(struct.pack(">i", -5))


def test_request_header_round_trips_and_matches_kafka_python() -> None:
    api_header = pytest.importorskip("kafka.protocol.api_header")
    for version, flexible in ((1, False), (2, True)):
        ours = RequestHeader(3, 12 if flexible else 8, 77, "épochlog-client")
        wire = ours.encode(version)
        back, pos = decode_request_header(wire, version)
        assert (back, pos) == (ours, len(wire))
        theirs = api_header.RequestHeader(request_api_key=3, request_api_version=ours.api_version,
                                          correlation_id=77, client_id="épochlog-client")
        assert theirs.encode(flexible=flexible) == wire


def test_response_header_versions() -> None:
    assert decode_response_header(encode_response_header(9, 0), 0) == (9, 4)
    assert decode_response_header(encode_response_header(9, 1), 1) == (9, 5)


@pytest.mark.parametrize("wire,field", [
    (b"\x00\x03", "RequestHeader"),  # shorter than the fixed part
    (b"\x00\x03\x00\x01\x00\x00\x00\x07\x00\x50abc", "RequestHeader.client_id"),  # runs past end
    (b"\x00\x03\x00\x01\x00\x00\x00\x07\xff\xf0", "RequestHeader.client_id"),  # negative length
])
def test_malformed_request_headers(wire: bytes, field: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_request_header(wire, 1)
    assert info.value.field == field


def test_peek_reads_key_version_and_correlation_of_any_request() -> None:
    # Enough to answer a request whose API or version we do not know with the right error.
    assert peek_request_header(struct.pack(">hhi", 999, 42, 1234) + b"junk") == (999, 42, 1234)


def test_unknown_api_key_and_version() -> None:
    with pytest.raises(UnsupportedVersion, match="unknown API key 999"):
        api_for(999)
    with pytest.raises(UnsupportedVersion,
                       match=r"Metadata v99 is not supported \(supported: 0-12\)"):
        APIS[ApiKey.METADATA].decode_request(b"", 99)


def test_over_long_varints_are_refused() -> None:
    with pytest.raises(DecodeError, match="longer than 5 bytes"):
        read_uvarint(b"\x80" * 6 + b"\x01", 0)
    with pytest.raises(DecodeError, match="cut short"):
        read_uvarint(b"\x80\x80", 0)
    # An over-long compact length inside a flexible message names the field it was reading.
    body = b"\x80\x80\x80\x80\x80\x80\x01"
    with pytest.raises(DecodeError) as info:
        APIS[ApiKey.METADATA].decode_request(body, 12)
    assert info.value.field == "MetadataRequest.topics"


@given(st.integers(-(1 << 63), (1 << 63) - 1))
def test_varints_round_trip(value: int) -> None:
    wire = encode_varint(value)
    assert read_varlong(wire, 0) == (value, len(wire))
    if -(1 << 31) <= value < (1 << 31):
        assert read_varint(wire, 0) == (value, len(wire))
    if value >= 0:
        assert read_uvarint(encode_uvarint(value), 0, 10) == (value, len(encode_uvarint(value)))


@pytest.mark.parametrize("flexible", [False, True])
def test_huge_array_length_allocates_nothing(flexible: bool) -> None:
    """A 12-byte request claiming two billion topics is refused without building the list."""
    version = 12 if flexible else 8
    length = encode_uvarint(0x7FFFFFFF) if flexible else struct.pack(">i", 0x7FFFFFFF)
    wire = length + b"\x00" * 12
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError, match="exceeds the bytes left") as info:
            APIS[ApiKey.METADATA].decode_request(wire, version)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert info.value.field == "MetadataRequest.topics"
    assert peak < 256 * 1024, f"decoding allocated {peak} bytes"


def test_string_length_past_the_end_is_named() -> None:
    wire = struct.pack(">i", 1) + struct.pack(">h", 30000) + b"abc" + b"\x01\x00\x00"
    with pytest.raises(DecodeError, match="runs past the end") as info:
        APIS[ApiKey.METADATA].decode_request(wire, 8)
    assert info.value.field == "MetadataRequest.topics[].name"


def test_null_where_not_allowed_on_encode_names_the_field() -> None:
    request = MetadataRequest(topics=[MetadataRequestTopic(name=None)])
    from epochlog.protocol.errors import EncodeError
    with pytest.raises(EncodeError) as info:
        APIS[ApiKey.METADATA].encode_request(request, 9)  # names become nullable only from v10
    assert info.value.field == "MetadataRequest.topics[].name"
    assert APIS[ApiKey.METADATA].decode_request(
        APIS[ApiKey.METADATA].encode_request(request, 10), 10) == request


def test_trailing_bytes_are_an_error() -> None:
    wire = APIS[ApiKey.METADATA].encode_request(MetadataRequest(topics=None), 9) + b"\x00"
    with pytest.raises(DecodeError, match="1 bytes left over") as info:
        APIS[ApiKey.METADATA].decode_request(wire, 9)
    assert info.value.field == "MetadataRequest.<end>"
