"""What the coordinator cores' tests (test_group_core.py, test_txn_core.py) do with the actions a
core gives: a stand-in driver that answers nothing by itself. Answers are kept by token (a token
answered twice fails the test); every other action is listed by its kind, in order."""

from __future__ import annotations

import itertools
from typing import Any

from epochlog.broker.coordinator_shards import Append, Resolve


class Recorder:
    def __init__(self, now_ms: int = 1000) -> None:
        self.now = now_ms
        self.tokens = itertools.count(1)
        self.answers: dict[int, Any] = {}
        self.actions: list[Any] = []  # the rest, in order

    def run(self, actions: list[Any]) -> list[Any]:
        for action in actions:
            if isinstance(action, Resolve):
                self._answered(action.token, action.result)
            else:
                self.actions.append(action)
        return actions

    def _answered(self, token: int, result: Any) -> None:
        assert token not in self.answers, f"token {token} answered twice"
        self.answers[token] = result

    def taken(self, kind: type) -> list[Any]:
        """The actions of that kind not taken yet, taken now."""
        found = [a for a in self.actions if isinstance(a, kind)]
        self.actions = [a for a in self.actions if not isinstance(a, kind)]
        return found

    @property
    def appends(self) -> list[Append]:
        """The appends in flight (not yet ended with `appended`), oldest first."""
        return [a for a in self.actions if isinstance(a, Append)]

    def next_append(self) -> Append:
        a = self.appends[0]
        self.actions.remove(a)
        return a
