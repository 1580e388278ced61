"""Size-prefixed frames: feed bytes as they arrive, take whole frames out.

Each frame is an int32 size followed by that many bytes. The size is checked against
`frame_bytes_max` as soon as its four bytes are in, before anything is allocated for the frame,
so a peer cannot make us buffer more than one frame's limit (plus one read) by lying about a size.

Two readers of the same stream format:
- `FrameBuffer.feed(data)`: for bytes that already exist (a StreamReader's reads); each frame is
  copied out as `bytes`.
- `FrameReceiver`: for a receiver that can read into memory we choose (asyncio's BufferedProtocol:
  `get_buffer()` then `buffer_updated(n)`). Small frames arrive in a fixed scratch buffer and are
  copied out; a large frame gets its own bytearray and the rest of it is received straight into
  that, so a 1 MiB Produce request is copied by the kernel and by nobody else. Frames come out as
  bytearrays the caller owns (mutable: a broker stamps offsets into its records in place). Memory
  held per receiver: the scratch buffer, plus the frame being received, allocated up to
  `FRAME_PREALLOC_BYTES_MAX` at first and grown (doubling) as its bytes really arrive, so a peer
  that announces a large frame and sends nothing costs no more than that. A caller done with a
  large frame (and with every view of it) may hand it back with `recycle()`: the next large frame
  is received into it, which spares the allocation and the page faults of fresh memory (measured:
  ~10% of a broker's ingest time with 1 MiB requests). One spare is kept.
"""

from __future__ import annotations

import struct

from .errors import DecodeError, FrameTooLarge

_SIZE = struct.Struct(">i")
# A TLS record header (content type 22, handshake; version 3.x) read as a frame size: a TLS
# client talking to a plaintext listener, said as such rather than as an absurd size.
_TLS_HANDSHAKE_MASK, _TLS_HANDSHAKE = 0xFFFF0000, 0x16030000


def too_large(size: int, frame_bytes_max: int) -> str:
    hint = " (its first bytes are a TLS handshake: a TLS client on a plaintext listener?)" \
        if size & _TLS_HANDSHAKE_MASK == _TLS_HANDSHAKE else ""
    return f"frame of {size} bytes is over the limit of {frame_bytes_max} bytes{hint}"
FRAME_BYTES_MAX_DEFAULT = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default


class FrameBuffer:
    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT) -> None:
        if frame_bytes_max <= 0:
            raise ValueError("frame_bytes_max must be positive")
        self.frame_bytes_max = frame_bytes_max
        self._buf = bytearray()
        self._need = -1  # size of the frame being read, -1 while the size is not yet known

    def __len__(self) -> int:
        """Bytes held that are not yet part of a returned frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Add bytes; return every frame now complete (possibly none)."""
        self._buf += data
        frames: list[bytes] = []
        buf = self._buf
        start = 0
        while True:
            if self._need < 0:
                if len(buf) - start < 4:
                    break
                size, = _SIZE.unpack_from(buf, start)
                if size < 0:
                    raise DecodeError(f"negative frame size {size}", "frame.size")
                if size > self.frame_bytes_max:
                    raise FrameTooLarge(too_large(size, self.frame_bytes_max))
                self._need = size
                start += 4
            if len(buf) - start < self._need:
                break
            frames.append(bytes(buf[start:start + self._need]))
            start += self._need
            self._need = -1
        if start:
            del buf[:start]
        return frames


SCRATCH_BYTES = 32 * 1024  # FrameReceiver: small frames and size prefixes land here
FRAME_PREALLOC_BYTES_MAX = 4 << 20  # a large frame's buffer starts at most this big


class FrameReceiver:
    """Frames received into buffers it hands out: `get_buffer()`, receive into it,
    `buffer_updated(n)` -> the frames now complete (bytearrays, in order)."""

    def __init__(self, frame_bytes_max: int = FRAME_BYTES_MAX_DEFAULT,
                 scratch_bytes: int = SCRATCH_BYTES,
                 prealloc_bytes_max: int = FRAME_PREALLOC_BYTES_MAX) -> None:
        if frame_bytes_max <= 0 or scratch_bytes <= 4 or prealloc_bytes_max <= 0:
            raise ValueError("frame_bytes_max and prealloc_bytes_max must be positive and "
                             "scratch_bytes above 4")
        self.frame_bytes_max = frame_bytes_max
        self.prealloc_bytes_max = prealloc_bytes_max
        self._spare: bytearray | None = None  # a recycled large frame
        self._scratch = bytearray(scratch_bytes)
        self._view = memoryview(self._scratch)
        self._start = 0  # scratch[_start:_end] is received and not yet returned
        self._end = 0
        self._big: bytearray | None = None  # the large frame being received, if any
        self._big_size = 0  # its full size (len(_big) may still be smaller: see _grow)
        self._big_filled = 0

    @property
    def pending_bytes(self) -> int:
        """Bytes received that are not yet part of a returned frame."""
        return self._end - self._start + self._big_filled

    def get_buffer(self) -> memoryview:
        """Where the next received bytes go (never empty); valid until buffer_updated."""
        big = self._big
        if big is not None:
            if self._big_filled == len(big):
                self._grow(big)
            return memoryview(big)[self._big_filled:]
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> list[bytearray]:
        """nbytes were written at the start of the last get_buffer(); the frames now whole.
        DecodeError (negative size) or FrameTooLarge end the stream: the caller closes it."""
        big = self._big
        if big is not None:
            self._big_filled += nbytes
            if self._big_filled < self._big_size:
                return []
            self._big, self._big_filled = None, 0
            return [big]
        self._end += nbytes
        return self._parse()

    def _parse(self) -> list[bytearray]:
        frames: list[bytearray] = []
        scratch, start, end = self._scratch, self._start, self._end
        while end - start >= 4:
            size, = _SIZE.unpack_from(scratch, start)
            if size < 0:
                raise DecodeError(f"negative frame size {size}", "frame.size")
            if size > self.frame_bytes_max:
                raise FrameTooLarge(too_large(size, self.frame_bytes_max))
            if end - start - 4 >= size:
                frames.append(scratch[start + 4:start + 4 + size])  # a copy: a new bytearray
                start += 4 + size
            elif 4 + size > len(scratch):  # will not fit: give it its own buffer
                have = end - start - 4
                big = self._big_buffer(min(size, max(self.prealloc_bytes_max, have)))
                big[:have] = self._view[start + 4:end]
                self._big, self._big_size, self._big_filled = big, size, have
                start = end = 0
                break
            else:
                break
        if start == end:
            start = end = 0
        elif start > 0 and len(scratch) - end < 4096:  # move the partial frame to the front
            scratch[:end - start] = self._view[start:end]
            start, end = 0, end - start
        self._start, self._end = start, end
        return frames

    def _grow(self, big: bytearray) -> None:
        big.extend(bytes(min(len(big), self._big_size - len(big))))

    def _big_buffer(self, size: int) -> bytearray:
        spare, self._spare = self._spare, None
        if spare is None or spare.__alloc__() <= size:  # (__alloc__ counts a trailing NUL)
            # Room for later frames a little larger than this one (their sizes vary).
            fresh = bytearray(size + (size >> 3))
            del fresh[size:]
            return fresh
        if len(spare) > size:
            del spare[size:]  # CPython keeps the allocation unless it halves
        elif len(spare) < size:
            spare.extend(bytes(size - len(spare)))  # within the allocation: no copy
        return spare

    def recycle(self, frame: bytearray) -> None:
        """Hand back a large frame returned earlier, once nothing refers to it any more (the
        caller checks: a live memoryview of it would see the next frame's bytes)."""
        if len(frame) > len(self._scratch) and frame is not self._big:
            self._spare = frame


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its int32 size."""
    return _SIZE.pack(len(payload)) + payload
