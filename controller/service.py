"""The controller process around the state machine: log, clock, senders, server, timer.

One event loop owns everything: requests are handled one at a time to completion (decide,
persist, send, answer), so there are no locks. The metadata log's fsync runs on the loop on
purpose: a controller decision is rare and small, and nothing may be answered before it is durable.

Theory of operation: `start()` replays the metadata log into a `ControllerState`, lets it start a
new controller epoch, commits, then opens the server and the timer (session expiry, and the
leader rebalance, whose interval the state keeps). The timer wakes at the earliest session
deadline (at most every tick), and at once when the server reports that the connection a
generation heartbeats on closed (`session_connection` / `connection_closed`: the state brings that
generation's deadline forward to the connection-loss grace). Every request
and every timer tick ends in `_commit()`, which takes the state's Ready and enforces the rule:

    PERSIST BEFORE YOU SEND: ready.records are appended and fsynced first; only then are
    ready.sends queued and the answer written. An append that fails stops the process.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from epochlog.protocol.error_codes import name_of

from . import outbound
from .config import ControllerConfig
from .metalog import MetadataLog
from .model import Send
from .sender import BrokerSender
from .state import ControllerState

log = logging.getLogger("epochlog.controller")

EXPIRY_CHECK_MS_MIN, EXPIRY_CHECK_MS_MAX = 10, 500
ConnectionKey = object  # the server's token for one client connection


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class FatalError(Exception):
    """The controller cannot go on (its durable state is unknown); the process must stop."""


class ControllerService:
    def __init__(self, config: ControllerConfig, *,
                 clock_ms: Callable[[], int] = monotonic_ms,
                 rng: random.Random | None = None) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.state = ControllerState(config, rng)
        self.metalog: MetadataLog | None = None
        self.senders: dict[int, BrokerSender] = {}
        self.answers: Counter[str] = Counter()  # broker answers by error name, for metrics
        self.fatal = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._timer_wake = asyncio.Event()
        # Which connection each broker's generation last registered or heartbeated on, and the
        # reverse: connection -> {broker id: broker epoch} (a tool may register several).
        self._session_conn: dict[int, ConnectionKey] = {}
        self._conn_sessions: dict[ConnectionKey, dict[int, int]] = {}

    async def start(self) -> int:
        """Replay, start a new controller epoch, commit it; returns the controller epoch."""
        self.metalog, records = MetadataLog.open(self.config.data_dir,
                                                 self.config.metalog_record_bytes_max)
        self.state.replay(records)
        epoch = self.state.start(self.clock_ms())
        self._commit()
        self._timer = asyncio.get_running_loop().create_task(self._expire_loop(),
                                                             name="session-expiry")
        return epoch

    def handle(self, handler: Callable[[ControllerState, Any, int, int], Any], request: Any,
               version: int) -> Any:
        """Run one request's handler and commit what it decided; returns the answer, which the
        caller may write only now (after the commit)."""
        try:
            answer = handler(self.state, request, version, self.clock_ms())
        finally:
            self._commit()  # whatever was decided (even before a bug raised) is made durable
        return answer

    def session_connection(self, conn: ConnectionKey, broker_id: int, broker_epoch: int) -> None:
        """A registration or heartbeat of generation broker_epoch was accepted on conn."""
        old = self._session_conn.get(broker_id)
        if old is not None and old is not conn:
            self._conn_sessions.get(old, {}).pop(broker_id, None)
        self._session_conn[broker_id] = conn
        self._conn_sessions.setdefault(conn, {})[broker_id] = broker_epoch

    def connection_closed(self, conn: ConnectionKey) -> None:
        """conn closed: each generation whose heartbeat connection it was gets the grace."""
        for broker_id, broker_epoch in self._conn_sessions.pop(conn, {}).items():
            if self._session_conn.get(broker_id) is conn:
                del self._session_conn[broker_id]
                if self.state.connection_lost(broker_id, broker_epoch, self.clock_ms()):
                    self._timer_wake.set()

    def _commit(self) -> None:
        ready = self.state.take_ready()
        if not ready:
            return
        assert self.metalog is not None
        try:
            self.metalog.append(ready.records)  # fsynced: from here on, the decision is durable
        except OSError as exc:
            self.fatal.set()
            raise FatalError(f"metadata log append failed, stopping: {exc}") from exc
        self._retire_ended_generations()
        for send in ready.sends:
            self._queue(send)

    def _queue(self, send: Send) -> None:
        broker = self.state.brokers.get(send.broker_id)
        if broker is None or not broker.live or broker.broker_epoch != send.broker_epoch:
            return  # that generation ended within the same decision
        sender = self.senders.get(send.broker_id)
        if sender is None or sender.broker_epoch != send.broker_epoch:
            host, port = broker.endpoint
            sender = BrokerSender(send.broker_id, send.broker_epoch, host, port,
                                  queue_requests_max=self.config.queue_requests_max,
                                  request_timeout_ms=self.config.request_timeout_ms,
                                  backoff_ms_max=self.config.send_backoff_ms_max,
                                  on_answer=self._on_answer)
            self.senders[send.broker_id] = sender
        if not sender.offer(send):
            log.warning("broker %d generation %d: %d control requests queued; replacing them "
                        "with the whole state", send.broker_id, send.broker_epoch,
                        self.config.queue_requests_max)
            sender.replace(self.state.full_state_sends(send.broker_id))

    def _retire_ended_generations(self) -> None:
        for broker_id, sender in list(self.senders.items()):
            broker = self.state.brokers.get(broker_id)
            if broker is None or not broker.live or broker.broker_epoch != sender.broker_epoch:
                sender.retire()
                del self.senders[broker_id]

    def _on_answer(self, send: Send, error: int, answer: object) -> None:
        self.answers[name_of(error) if error else "NONE"] += 1
        if send.api_key == outbound.LOG_END_QUERY_KEY:
            self.state.log_ends_answered(send.broker_id, send.broker_epoch,
                                         getattr(answer, "topics", ()))
            self._commit()

    async def _expire_loop(self) -> None:
        tick_ms = min(max(self.config.broker_session_timeout_ms // 10, EXPIRY_CHECK_MS_MIN),
                      EXPIRY_CHECK_MS_MAX)
        while True:
            due_ms = self.state.next_session_deadline_ms()
            wait_ms = tick_ms if due_ms is None else \
                min(max(due_ms - self.clock_ms(), EXPIRY_CHECK_MS_MIN), tick_ms)
            try:
                async with asyncio.timeout(wait_ms / 1000):
                    await self._timer_wake.wait()
            except TimeoutError:
                pass
            self._timer_wake.clear()
            self.state.expire_sessions(self.clock_ms())
            self.state.rebalance_leaders(self.clock_ms())  # decides its own interval
            self.state.recovery_tick(self.clock_ms())
            self._commit()

    async def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            await asyncio.gather(self._timer, return_exceptions=True)
        senders = list(self.senders.values())
        self.senders.clear()
        for sender in senders:
            sender.retire()
            sender.task.cancel()
        await asyncio.gather(*(s.task for s in senders), return_exceptions=True)
        if self.metalog is not None:
            self.metalog.close()
