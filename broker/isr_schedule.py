"""`IsrSchedule`: when a leader asks the controller for its ISR changes (sans-IO).

Theory of operation
-------------------
`isr.IsrManager` decides what to propose; this machine decides when the ISR task
(isr_task.py) asks it and sends the proposals (AlterPartition, docs/control-plane.md), and
holds them to one request in flight:

- a run every `tick_ms` (replica_lag_time_max_ms / 2, at least TICK_MS_MIN) counted from the end
  of the previous one, sooner when a retry of the manager's is due (`next_retry_ms`) or when
  woken (a follower outside the ISR caught up: `wake`);
- runs start at least WAKE_GAP_MS apart, so a follower fetching often cannot make it spin;
- a run's proposals go out in requests of at most PROPOSALS_PER_REQUEST_MAX, one after the
  other, each answer applied (isr_task.apply_answer) before the next is sent; a wake meanwhile
  waits for the run's end.

    events in                   actions out
    start(now)                  SendAlterPartition(proposals)   build, send, apply the answer,
    wake(now)                                                   then answered()
    tick(now, partitions)       (at next_deadline_ms(): the partitions we hold, for the manager)
    answered(now)

isr_task.IsrTask drives it on asyncio; tests/sim/broker_node.py on the simulated network.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .isr import IsrManager, IsrProposal
from .partition import Partition

TICK_MS_MIN = 100
WAKE_GAP_MS = 50  # runs start at least this far apart (a follower caught up wakes one early)
PROPOSALS_PER_REQUEST_MAX = 1000


@dataclass(frozen=True)
class SendAlterPartition:
    proposals: tuple[IsrProposal, ...]


Action = SendAlterPartition


class IsrSchedule:
    def __init__(self, manager: IsrManager) -> None:
        self.manager = manager
        self.tick_ms = max(TICK_MS_MIN, manager.lag_time_max_ms // 2)
        self._wait_from_ms = -1  # when the wait for the next run began; -1: not started
        self._woken = False
        self._run_started_ms = 0
        self._left: list[tuple[IsrProposal, ...]] = []  # this run's requests not yet sent
        self._running = False  # a run's request is in flight

    def start(self, now_ms: int) -> None:
        assert self._wait_from_ms < 0, "started twice"
        self._wait_from_ms = now_ms

    def wake(self, now_ms: int) -> None:
        """A follower outside the ISR may join: run as soon as the gap allows."""
        self._woken = True

    def next_deadline_ms(self) -> int | None:
        if self._running or self._wait_from_ms < 0:
            return None
        if self._woken:
            return self._wait_from_ms
        due = self._wait_from_ms + self.tick_ms
        retry = self.manager.next_retry_ms()
        if retry is not None:
            due = max(self._wait_from_ms, min(due, retry))
        return due

    def tick(self, now_ms: int, partitions: Iterable[Partition]) -> list[Action]:
        deadline = self.next_deadline_ms()
        if deadline is None or now_ms < deadline:
            return []
        self._woken = False
        self._run_started_ms = now_ms
        proposals = self.manager.due(partitions)
        self._left = [tuple(proposals[start:start + PROPOSALS_PER_REQUEST_MAX])
                      for start in range(0, len(proposals), PROPOSALS_PER_REQUEST_MAX)]
        return self._next(now_ms)

    def answered(self, now_ms: int) -> list[Action]:
        """The last request's answer (or its failure) was applied to the manager."""
        assert self._running, "an AlterPartition answer that nothing waits for"
        return self._next(now_ms)

    def _next(self, now_ms: int) -> list[Action]:
        self._running = bool(self._left)
        if self._left:
            return [SendAlterPartition(self._left.pop(0))]
        self._wait_from_ms = max(now_ms, self._run_started_ms + WAKE_GAP_MS)
        return []
