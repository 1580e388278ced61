"""`ControlHold`: control requests held until the controller confirms our generation (sans-IO).

Theory of operation
-------------------
docs/control-plane.md "Before the registration answer": a LeaderAndIsr, StopReplica or
UpdateMetadata that arrives while `ControlEpochs.must_wait()` (no registration answer yet, or the
last generation declared over) waits for the answer, at most `hold_ms_max`
(controller_request_timeout_ms), and is then judged (`ControlEpochs.admit`) against the
generation it gave, in arrival order. One that no answer releases in time is left unanswered:
the controller resends a request it got no answer to, never one it got an answer to.

    events in                    actions out
    arrived(now, request, what)  Judge(request)       judge it now (admit, then apply)
    confirmed(now)               Unanswered(request)  held too long: leave it unanswered
    tick(now)    (at next_deadline_ms())

The requests are the driver's tokens (app.py: a future the handler awaits; the simulation: the
request and its reply). The machine keeps them in arrival order; holding never deadlocks, since
registration travels on our connection to the controller and control requests on its
connection to us.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from .fencing import ControlEpochs

log = logging.getLogger("epochlog.broker")

T = TypeVar("T")


@dataclass(frozen=True)
class Judge(Generic[T]):
    request: T


@dataclass(frozen=True)
class Unanswered(Generic[T]):
    request: T


HoldAction = Judge[T] | Unanswered[T]


@dataclass(frozen=True)
class _Held(Generic[T]):
    request: T
    what: str
    until_ms: int


class ControlHold(Generic[T]):
    def __init__(self, epochs: ControlEpochs, hold_ms_max: int) -> None:
        assert hold_ms_max >= 0
        self.epochs = epochs
        self.hold_ms_max = hold_ms_max
        self._held: deque[_Held[T]] = deque()  # arrival order, so also deadline order

    def __len__(self) -> int:
        return len(self._held)

    def next_deadline_ms(self) -> int | None:
        return self._held[0].until_ms if self._held else None

    def arrived(self, now_ms: int, request: T, what: str) -> list[HoldAction[T]]:
        """A control request: judge it now, or (no action) hold it."""
        if not self.epochs.must_wait():
            assert not self._held, "confirmed() was not told of the registration answer"
            return [Judge(request)]
        self.epochs.held_total += 1
        log.info("broker %d: %s arrived before our registration answer: held (at most %d ms)",
                 self.epochs.broker_id, what, self.hold_ms_max)
        self._held.append(_Held(request, what, now_ms + self.hold_ms_max))
        return []

    def confirmed(self, now_ms: int) -> list[HoldAction[T]]:
        """A registration was answered: the held requests go on, in arrival order."""
        out: list[HoldAction[T]] = []
        while self._held and not self.epochs.must_wait():
            held = self._held.popleft()
            log.info("broker %d: %s held until our registration was answered, judged against "
                     "generation %d", self.epochs.broker_id, held.what, self.epochs.generation)
            out.append(Judge(held.request))
        return out

    def tick(self, now_ms: int) -> list[HoldAction[T]]:
        """Those held hold_ms_max with no answer: left unanswered."""
        out: list[HoldAction[T]] = []
        while self._held and self._held[0].until_ms <= now_ms:
            held = self._held.popleft()
            self.epochs.unanswered_total += 1
            log.warning("broker %d: %s held %d ms and still no registration answer: left "
                        "unanswered (the controller resends it)", self.epochs.broker_id,
                        held.what, self.hold_ms_max)
            out.append(Unanswered(held.request))
        return out
