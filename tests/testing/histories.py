"""Small helpers that write histories by hand, as a client would have recorded them."""

from __future__ import annotations

from collections.abc import Iterable

from epochlog.testing import History
from epochlog.testing.history import Polled


class StepClock:
    """A monotonic clock that moves 1 ms per reading: histories built in tests are ordered."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        self.ns += 1_000_000
        return self.ns


def new_history() -> History:
    return History(monotonic_ns=StepClock(), wall_ns=lambda: 1_700_000_000_000_000_000)


def ack(h: History, value: bytes, offset: int, *, producer: str = "p", topic: str = "t",
        partition: int = 0, epoch: int | None = 0) -> None:
    op = h.send_started(producer, topic, value, partition=partition)
    h.send_acked(op, partition, offset, epoch)


def poll(h: History, records: Iterable[tuple[int, bytes]], *, consumer: str = "c",
         topic: str = "t", partition: int = 0, epoch: int | None = 0,
         group: str | None = None) -> None:
    h.record_poll(consumer, [Polled(topic=topic, partition=partition, offset=o, leader_epoch=epoch,
                                    key=None, value=v) for o, v in records], group=group)
