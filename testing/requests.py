"""One Kafka request from synchronous code, and the one bounded `until` every wait uses.

The harness is synchronous on purpose, so that sync tests (kafka-python, confluent-kafka, kcat),
async tests and the `epochlog cluster` commands can all use it. `call()` sends one request on a
fresh connection from a worker thread with its own event loop, so it works from plain code and
from inside a running loop alike.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Callable
from typing import Any, TypeVar

from epochlog.client.connection import Connection
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import Message

T = TypeVar("T")
REQUEST_S = 20.0  # one request, connection included
POLL_S = 0.05  # between looks at another process's state, where no event exists to wait on


class WaitTimeout(AssertionError):
    """A bounded wait ran out; the message says what was awaited and the last thing seen."""


def call(host: str, port: int, key: ApiKey | int, message: Message, version: int | None = None,
         timeout_s: float = REQUEST_S) -> Any:
    """One request on a fresh connection; the decoded answer. version None: the highest both
    sides speak."""
    async def go() -> Any:
        conn = await Connection(host, port, connect_timeout_ms=int(timeout_s * 1000),
                                request_timeout_ms=int(timeout_s * 1000)).connect()
        try:
            api = APIS[key]
            return await conn.request(api, conn.version_for(api) if version is None else version,
                                      message)
        finally:
            await conn.close()

    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="epochlog-call") as pool:
        return pool.submit(asyncio.run, go()).result(timeout_s * 2 + 5)


def until(check: Callable[[], T | None], what: str, timeout_s: float,
          interval_s: float = POLL_S, *, detail: Callable[[], str] | None = None) -> T:
    """Ask `check` again until it returns something other than None or False (returned), for
    at most timeout_s; then WaitTimeout naming `what`, the last error check raised (OSError,
    TimeoutError, ConnectionError or AssertionError: asked again meanwhile) and, when given,
    detail() (what the test saw, for the failure message). Used only where no event exists to
    wait on (another process's state). The one bounded wait of the harness and of tests
    (`from epochlog.testing import until`)."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        try:
            result = check()
            if result is not None and result is not False:
                return result
        except (OSError, TimeoutError, ConnectionError, AssertionError) as exc:
            last = f"; last error: {type(exc).__name__}: {exc}"
        if time.monotonic() > deadline:
            told = f"\n{detail()}" if detail is not None else ""
            raise WaitTimeout(f"timed out after {timeout_s:.0f}s waiting for {what}{last}{told}")
        time.sleep(interval_s)
