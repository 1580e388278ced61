"""What a chaos run shows while it runs: on a terminal (stderr a TTY), a live `rich` panel with
the elapsed time, ops/s (operations recorded in the History per second), the faults so far and
the fault now active; otherwise one plain line per fault and per phase, for logs and CI.

Times count from the workload's start, as the schedule and the report do; what happens before it
(the cluster starting) is marked "setup".
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..history import History
from .scenarios import Window

if TYPE_CHECKING:
    from .runner import RunConfig

REFRESH_S = 0.5


class Lines:
    """One line on stderr per phase and per fault, with the seconds since the workload started
    ("setup" before it). clock is time.monotonic, or a test's."""

    def __init__(self, stream: Any = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.origin: float | None = None  # the workload's start, on clock
        self.faults = 0

    def since_origin(self) -> str:
        """"12.3s" since the workload started, or "setup" before it."""
        if self.origin is None:
            return "setup"
        return f"{self.clock() - self.origin:.1f}s"

    def _say(self, text: str) -> None:
        print(f"[{self.since_origin():>8}] {text}", file=self.stream, flush=True)

    def workload_started(self, monotonic_s: float) -> None:
        self.origin = monotonic_s

    def started(self, history: History) -> None:
        pass

    def phase(self, text: str) -> None:
        self._say(text)

    def window(self, window: Window | None) -> None:
        pass

    def fault(self, kind: str, targets: tuple[int | str, ...], detail: str) -> None:
        self.faults += 1
        self._say(f"fault {self.faults}: {kind} {','.join(map(str, targets))}: {detail}")


class Panel(Lines):
    """The live panel: refreshed from a thread of its own, reading counters the run updates."""

    def __init__(self, config: RunConfig, schedule: list[Window]) -> None:
        super().__init__()
        self.config, self.schedule = config, schedule
        self.current: Window | None = None
        self.state = "starting"
        self.last_fault = ""
        self.history_len: Any = None  # set by the runner: a callable giving len(history)
        self._rate = 0.0
        self._last = (self.clock(), 0)

    def started(self, history: History) -> None:
        self.history_len = history.__len__

    def phase(self, text: str) -> None:
        self.state = text

    def window(self, window: Window | None) -> None:
        self.current = window

    def fault(self, kind: str, targets: tuple[int | str, ...], detail: str) -> None:
        self.faults += 1
        self.last_fault = f"{kind} {','.join(map(str, targets))}: {detail}"

    def render(self) -> Any:
        from rich.table import Table

        now = self.clock()
        ops = self.history_len() if self.history_len is not None else 0
        then, before = self._last
        if now - then >= 1.0:
            self._rate = (ops - before) / (now - then)
            self._last = (now, ops)
        c = self.config
        table = Table.grid(padding=(0, 2))
        table.add_row("scenario", f"{c.scenario.name} (seed {c.seed}, client {c.client})")
        elapsed = ("setting up the cluster" if self.origin is None else
                   f"{now - self.origin:.0f}s since the workload started")
        table.add_row("elapsed", f"{elapsed} (the workload runs {c.duration_s:g}s under faults, "
                      "then heals and is read back)")
        table.add_row("phase", self.state)
        table.add_row("ops/s", f"{self._rate:.0f} ({ops} recorded)")
        table.add_row("faults", f"{self.faults} applied; last: {self.last_fault or '-'}")
        table.add_row("now", self.current.describe() if self.current else "no fault active")
        return table


@contextmanager
def display(config: RunConfig, schedule: list[Window]) -> Iterator[Lines]:
    """The observer for a run: the live panel on a terminal, else plain lines."""
    if not sys.stderr.isatty():
        yield Lines()
        return
    from rich.console import Console
    from rich.live import Live

    panel = Panel(config, schedule)
    done = threading.Event()
    with Live(panel.render(), console=Console(stderr=True), refresh_per_second=4,
              transient=False) as live:
        def refresh() -> None:
            while not done.wait(REFRESH_S):
                live.update(panel.render())
        thread = threading.Thread(target=refresh, daemon=True, name="chaos-live")
        thread.start()
        try:
            yield panel
        finally:
            done.set()
            thread.join(5)
            live.update(panel.render())
