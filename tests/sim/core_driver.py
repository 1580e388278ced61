"""`CoreDriver`: what the group and transaction simulations do alike to drive a broker's real
coordinator core (broker/groups/core.py, broker/txn/core.py) on one broker, for one process life,
as broker/coordinator_driver.py does in the broker.

A request becomes one of the core's events under a fresh token (`ask`); the core's `Resolve` of
that token sends the answer; its other actions are the subclass's to carry out (`perform`: an
append to the simulated log, a load, markers). After every piece of the node's work the core's
`next_deadline_ms()` is looked at and its `tick` scheduled then (a timer of this life: a crash
drops it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from epochlog.broker.coordinator_shards import Resolve

from .scheduler import Node


class CoreDriver:
    def __init__(self, node: Node) -> None:
        self.node = node
        self._answers: dict[int, Callable[[Any], None]] = {}  # token -> the reply
        self._next_token = 0
        self._tick_at = -1

    # ------------------------------------------------------------------ for the subclass
    def next_deadline_ms(self) -> int | None:
        raise NotImplementedError

    def tick(self) -> Sequence[Any]:
        raise NotImplementedError

    def perform(self, action: Any) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------------------- driving
    def now(self) -> int:
        return self.node.sim.now_ms

    def ask(self, reply: Callable[[Any], None], event: Callable[[int], Sequence[Any]]) -> None:
        """A request as the core's event under a fresh token; reply once it is resolved."""
        self._next_token += 1
        self._answers[self._next_token] = reply
        self.run(event(self._next_token))

    def run(self, actions: Sequence[Any]) -> None:
        for action in actions:
            if isinstance(action, Resolve):
                reply = self._answers.pop(action.token, None)
                if reply is not None:
                    reply(action.result)
            else:
                self.perform(action)

    def after_event(self) -> None:
        deadline = self.next_deadline_ms()
        now = self.now()
        if deadline is not None and (self._tick_at < now or deadline < self._tick_at):
            self._tick_at = deadline
            self.node.timer(deadline - now, self._ticked)

    def _ticked(self) -> None:
        self._tick_at = -1
        self.run(self.tick())
