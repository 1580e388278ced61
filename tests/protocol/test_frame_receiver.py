"""FrameReceiver (the broker's zero-copy frame reader) gives back exactly the frames sent, however
the bytes arrive and whatever their sizes relative to its scratch buffer, recycling or not; and
it refuses bad sizes before allocating for them, as FrameBuffer does."""

from __future__ import annotations

import struct
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog.protocol.errors import DecodeError, FrameTooLarge
from epochlog.protocol.frames import FrameReceiver, frame

SIZES = st.one_of(st.integers(0, 40), st.integers(60, 70), st.integers(200, 3000))


@settings(max_examples=200, deadline=None)
@given(sizes=st.lists(SIZES, max_size=8), reads=st.lists(st.integers(1, 4000), min_size=1),
       scratch=st.sampled_from([5, 64, 1024]), prealloc=st.sampled_from([1, 100, 1 << 20]),
       recycle=st.lists(st.booleans(), min_size=1))
def test_frames_come_out_whole_however_the_bytes_arrive(sizes, reads, scratch, prealloc,
                                                        recycle) -> None:
    payloads = [bytes((i + j) % 251 for j in range(n)) for i, n in enumerate(sizes)]
    stream = b"".join(frame(p) for p in payloads)
    receiver = FrameReceiver(1 << 20, scratch_bytes=scratch, prealloc_bytes_max=prealloc)
    out: list[bytes] = []
    pos = 0
    while pos < len(stream):
        buf = receiver.get_buffer()
        assert len(buf) > 0
        n = min(len(buf), reads[len(out) % len(reads)], len(stream) - pos)
        buf[:n] = stream[pos:pos + n]
        pos += n
        del buf  # as the event loop does: the view is gone before buffer_updated
        for got in receiver.buffer_updated(n):
            assert isinstance(got, bytearray)
            out.append(bytes(got))
            if recycle[len(out) % len(recycle)]:
                receiver.recycle(got)  # the next large frame may land in the same memory
    assert out == payloads
    assert receiver.pending_bytes == 0


def test_oversize_frame_is_refused_before_any_allocation() -> None:
    receiver = FrameReceiver(frame_bytes_max=1 << 20)
    tracemalloc.start()
    try:
        buf = receiver.get_buffer()
        data = struct.pack(">i", 0x7FFFFFFF) + b"x" * 10
        buf[:len(data)] = data
        del buf
        with pytest.raises(FrameTooLarge, match="over the limit"):
            receiver.buffer_updated(len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024, f"refusing an oversize frame allocated {peak} bytes"


def test_a_large_frame_announced_but_not_sent_costs_at_most_the_preallocation() -> None:
    receiver = FrameReceiver(frame_bytes_max=1 << 30, prealloc_bytes_max=1 << 16)
    buf = receiver.get_buffer()
    buf[:4] = struct.pack(">i", 1 << 29)
    del buf
    assert receiver.buffer_updated(4) == []
    assert len(receiver.get_buffer()) == 1 << 16


def test_negative_frame_size_is_an_error() -> None:
    receiver = FrameReceiver()
    buf = receiver.get_buffer()
    buf[:4] = struct.pack(">i", -5)
    del buf
    with pytest.raises(DecodeError, match="negative frame size"):
        receiver.buffer_updated(4)
