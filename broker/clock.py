"""Time in the broker: integer milliseconds, from one of two clocks (docs/design.md, "Time").

`monotonic_ms` for deadlines, intervals and sessions; `wall_clock_ms` where time is compared with
record timestamps or written into a log (retention, segment.ms, LogAppendTime, committed
offsets, transaction timeouts). A part that reads time is given one of them as a `Clock` when
it is built (the simulation gives its own), and a sans-IO machine reads none: each of its events
takes `now_ms`. Names carry the unit: `now_ms`, `deadline_ms`, `..._ms_max`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

Clock = Callable[[], int]  # milliseconds


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000
