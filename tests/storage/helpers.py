"""Shared helpers for the storage tests: batches built by the project's builder, a fake clock."""

from __future__ import annotations

from epochlog.broker.storage import Log, LogConfig
from epochlog.protocol.records import build_batch

SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=256, segment_index_bytes=64,
                  flush_ms=2**63 - 1)


class FakeClock:
    def __init__(self, now_ms: int = 1_000_000) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def make_batch(count: int = 1, *, value_bytes: int = 50, timestamp_ms: int = 1000,
               tag: int = 0, base_offset: int = 0, epoch: int = -1, producer_id: int = -1,
               producer_epoch: int = -1, base_sequence: int = -1) -> bytes:
    """A batch of count records; each value says which tag and record it is, padded."""
    records = [(f"k{i}".encode(), f"{tag}:{i}:".encode().ljust(value_bytes, b"x"), None,
                timestamp_ms + i) for i in range(count)]
    return build_batch(records, base_offset=base_offset, partition_leader_epoch=epoch,
                       producer_id=producer_id, producer_epoch=producer_epoch,
                       base_sequence=base_sequence)


def open_log(path: str, config: LogConfig = SMALL, clock: FakeClock | None = None,
             **kwargs: object) -> Log:
    return Log.open(str(path), config, clock or FakeClock(), **kwargs)  # type: ignore[arg-type]


def read_all(log: Log, bytes_max: int = 1 << 20) -> list[tuple[int, bytes]]:
    """(base_offset, bytes) of every batch from the log start, read through Log.read."""
    from epochlog.protocol.batch import check_all, iter_headers

    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, bytes_max)
        if not data:
            break
        check_all(data)
        for pos, header in iter_headers(data):
            out.append((header.base_offset, bytes(data[pos:pos + header.size])))
            offset = header.next_offset
    return out
