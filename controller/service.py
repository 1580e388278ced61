"""The controller process around the state machine: log, clock, senders, server, timer.

One event loop owns everything: requests are handled one at a time to completion (decide,
persist, send, answer), so there are no locks. The metadata log's fsync runs on the loop on
purpose: a controller decision is rare and small, and nothing may be answered before it is durable.

Theory of operation: `start()` replays the metadata log into a `ControllerState`, lets it start a
new controller epoch, commits, then opens the server and the session-expiry timer. Every request
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

from protocol.error_codes import name_of

from .config import ControllerConfig
from .metalog import MetadataLog
from .model import Send
from .sender import BrokerSender
from .state import ControllerState

log = logging.getLogger("epochlog.controller")

EXPIRY_CHECK_MS_MIN, EXPIRY_CHECK_MS_MAX = 10, 500


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
        self.state = ControllerState(
            controller_id=config.controller_id,
            session_timeout_ms=config.broker_session_timeout_ms,
            topic_defaults=config.topic_defaults(),
            default_num_partitions=config.default_num_partitions,
            default_replication_factor=config.default_replication_factor,
            cluster_id=config.cluster_id, rng=rng)
        self.metalog: MetadataLog | None = None
        self.senders: dict[int, BrokerSender] = {}
        self.answers: Counter[str] = Counter()  # broker answers by error name, for metrics
        self.fatal = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None

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

    def _on_answer(self, send: Send, error: int) -> None:
        self.answers[name_of(error) if error else "NONE"] += 1

    async def _expire_loop(self) -> None:
        interval_ms = min(max(self.config.broker_session_timeout_ms // 10, EXPIRY_CHECK_MS_MIN),
                          EXPIRY_CHECK_MS_MAX)
        while True:
            await asyncio.sleep(interval_ms / 1000)
            self.state.expire_sessions(self.clock_ms())
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
