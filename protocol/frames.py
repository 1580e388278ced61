"""Size-prefixed frames: feed bytes as they arrive, take whole frames out.

Each frame is an int32 size followed by that many bytes. The size is checked against
`frame_bytes_max` as soon as its four bytes are in, before anything is allocated for the frame,
so a peer cannot make us buffer more than one frame's limit (plus one read) by lying about a size.
"""

from __future__ import annotations

import struct

from .errors import DecodeError, FrameTooLarge

_SIZE = struct.Struct(">i")
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
                    raise FrameTooLarge(f"frame of {size} bytes is over the limit of "
                                        f"{self.frame_bytes_max} bytes")
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


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its int32 size."""
    return _SIZE.pack(len(payload)) + payload
