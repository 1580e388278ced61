"""The layouts of the request hooks' control API (test only): what a broker's hook control
(broker/request_hooks.py) takes and answers, and what `epochlog.testing.hooks` sends and reads.

JSON over plain HTTP/1.1 on the broker's `request_hooks_listen` address:

    POST   /hooks  a HookSpec     -> the Hook installed
    GET    /hooks                 -> every Hook installed, in order
    DELETE /hooks                 -> {"removed": n}

Declared once here so that the two sides cannot drift apart; both decode with msgspec.
"""

from __future__ import annotations

from typing import Literal

import msgspec

Action = Literal["drop", "delay", "error"]


class HookSpec(msgspec.Struct, forbid_unknown_fields=True):
    """What POST /hooks takes: api is an ApiKey name, Kafka's name or the key; error an error
    code's name or number."""

    api: int | str
    action: Action
    times: int = 1
    delay_ms: int = 0
    error: int | str | None = None
    client_id: str | None = None


class Hook(msgspec.Struct, kw_only=True):
    """One installed hook, as POST and GET /hooks answer it."""

    id: int
    api: str  # Kafka's name of the API
    api_key: int
    action: Action
    times: int
    remaining: int
    fired: int = 0
    delay_ms: int = 0
    error: str | None = None  # the error code's name
    error_code: int = 0
    client_id: str | None = None

    def describe(self) -> str:
        """One line: what the hook does."""
        what = {"drop": "drop", "delay": f"delay by {self.delay_ms} ms",
                "error": f"answer {self.error}"}[self.action]
        who = f" from client {self.client_id!r}" if self.client_id is not None else ""
        return f"{what} the next {self.times} {self.api} request(s){who}"
