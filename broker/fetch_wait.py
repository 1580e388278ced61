"""`ParkedFetch`: whether a Fetch is answered now or waits, and for what (sans-IO).

Theory of operation
-------------------
Fetch's long poll (handlers/fetch.py): after each read of its partitions a request is answered
at once when there is something to say at once (an error, a divergence, a preferred replica, a
follower that has not been told the high watermark), when min_bytes are there, or when its
max wait is over; otherwise it waits until a watched position moves (each partition's
readable end, leader epoch, role and, for a follower, high watermark) or the max wait passes,
and is then read again, and answered as that read decides. When the max wait passes with
nothing moved, the last read is the answer.

    events in                            answer
    read(now, bytes, must_answer)        True: answer this read now; False: park(positions)
    moved(positions)  (a poke)           True: a watched position moved: read again

The deadline (`next_deadline_ms`) is fixed when the request arrives: max_wait_ms, capped by the
broker's fetch_wait_ms_max. The fetch purgatory wakes the asyncio handler on pokes
(handlers/fetch.py); the simulation re-checks its parked fetches after every event.
One object per waiting request, a few fields: the fetch path pays no more than it did.
"""

from __future__ import annotations


class ParkedFetch:
    __slots__ = ("deadline_ms", "min_bytes", "seen")

    def __init__(self, now_ms: int, wait_ms: int, min_bytes: int) -> None:
        self.deadline_ms = now_ms + max(0, wait_ms)
        self.min_bytes = min_bytes
        self.seen: object = None  # the positions it waits on, from the last park()

    def next_deadline_ms(self) -> int:
        return self.deadline_ms

    def read(self, now_ms: int, bytes_read: int, must_answer: bool) -> bool:
        """After a read: answer it now (True), or park with what it waits on (False)."""
        return must_answer or bytes_read >= self.min_bytes or now_ms >= self.deadline_ms

    def park(self, positions: object) -> None:
        self.seen = positions

    def moved(self, positions: object) -> bool:
        """Re-checked on a poke: True when a watched position moved since the last park."""
        return positions != self.seen
