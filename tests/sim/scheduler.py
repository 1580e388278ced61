"""The simulated clock and event heap, and `Node`: something that can crash, restart and pause.

Theory of operation
-------------------
`Scheduler` is a heap of (time_ms, seq, fn, args); `run_until(t)` pops events in order and sets
`now_ms` before calling each. `seq` breaks ties in insertion order, so given one seed everything
happens in the same order every time. Nothing in the simulation reads wall time or any other
randomness than `Scheduler.rng`.

A `Node` runs every piece of its work through `execute(life, fn, ...)`:
- `life` counts process starts. Work scheduled by an earlier life (a timer, an RPC answer) is
  dropped when it comes due: the process that asked for it is gone (a crash loses everything in
  memory; only files and, for the controller, the durable record list survive).
- A paused node (SIGSTOP) runs nothing: work that comes due is queued in order and runs when the
  pause ends, all at the resume time, as a stopped process finds its sockets and timers when it is
  continued. Its peers meanwhile see no answers and its sessions may expire (a zombie).
`after_event()` runs after each piece of work (checkers, waking parked requests).
"""

from __future__ import annotations

import heapq
import random
from collections import deque
from collections.abc import Callable
from typing import Any

EVENTS_MAX = 2_000_000  # a run that needs more is looping: stop it loudly


class Scheduler:
    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now_ms = 0
        self.events = 0
        self._heap: list[tuple[int, int, Callable[..., Any], tuple[Any, ...]]] = []
        self._seq = 0
        self.trace: Callable[[str], None] | None = None

    def clock(self) -> int:
        return self.now_ms

    def at(self, time_ms: int, fn: Callable[..., Any], *args: Any) -> None:
        assert time_ms >= self.now_ms, (time_ms, self.now_ms)
        self._seq += 1
        heapq.heappush(self._heap, (time_ms, self._seq, fn, args))

    def after(self, delay_ms: int, fn: Callable[..., Any], *args: Any) -> None:
        self.at(self.now_ms + max(0, delay_ms), fn, *args)

    def run_until(self, end_ms: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= end_ms:
            time_ms, _, fn, args = heapq.heappop(heap)
            self.now_ms = time_ms
            self.events += 1
            if self.events > EVENTS_MAX:
                raise RuntimeError(f"more than {EVENTS_MAX} events: the simulation is looping")
            fn(*args)
        self.now_ms = max(self.now_ms, end_ms)

    def log(self, text: str) -> None:
        if self.trace is not None:
            self.trace(f"{self.now_ms:>7}ms {text}")


class Node:
    def __init__(self, sim: Scheduler, node_id: int, name: str) -> None:
        self.sim = sim
        self.node_id = node_id
        self.name = name
        self.up = False
        self.life = 0
        self.paused_until = -1
        self._inbox: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()

    # ------------------------------------------------------------------------- lifecycle
    def boot(self) -> None:
        assert not self.up, self
        self.up = True
        self.life += 1
        self.paused_until = -1
        self._inbox.clear()
        self.sim.log(f"{self.name}: start (life {self.life})")
        self.on_start()

    def crash(self) -> None:
        if not self.up:
            return
        self.sim.log(f"{self.name}: CRASH")
        self.on_crash()
        self.up = False
        self.life += 1  # everything scheduled by the dead process is dropped
        self.paused_until = -1
        self._inbox.clear()

    def pause(self, duration_ms: int) -> None:
        if not self.up or self.paused:
            return
        self.sim.log(f"{self.name}: PAUSE for {duration_ms}ms")
        self.paused_until = self.sim.now_ms + duration_ms
        self.sim.at(self.paused_until, self._resume, self.life)

    @property
    def paused(self) -> bool:
        return self.paused_until >= 0

    def resume_now(self) -> None:
        if self.paused:
            self._resume(self.life)

    def _resume(self, life: int) -> None:
        if life != self.life or not self.paused:
            return
        self.sim.log(f"{self.name}: resume ({len(self._inbox)} queued)")
        self.paused_until = -1
        while self._inbox and not self.paused and self.up and life == self.life:
            fn, args = self._inbox.popleft()
            fn(*args)
            self.after_event()

    # --------------------------------------------------------------------------- running
    def execute(self, life: int, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn now, later (paused) or never (the life that wanted it is over)."""
        if life != self.life or not self.up:
            return
        if self.paused:
            self._inbox.append((fn, args))
            return
        fn(*args)
        self.after_event()

    def timer(self, delay_ms: int, fn: Callable[..., Any], *args: Any) -> None:
        self.sim.after(delay_ms, self.execute, self.life, fn, *args)

    # ------------------------------------------------------------------------- overrides
    def on_start(self) -> None:
        pass

    def on_crash(self) -> None:
        pass

    def after_event(self) -> None:
        pass

    def serve(self, key: int, version: int, request: Any, reply: Callable[[Any], None],
              source: int, conn: Any = None) -> None:
        raise NotImplementedError

    def connection_closed(self, conn: Any) -> None:
        """The other end of a network.Conn closed it (see network.py)."""

    def __repr__(self) -> str:
        return f"{self.name}(life {self.life}{', up' if self.up else ''})"
