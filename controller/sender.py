"""One task per broker generation sending its control requests, in order.

Rules:
- A sender belongs to one generation (broker id + broker epoch) and talks to the endpoint that
  generation registered for control traffic: its INTERNAL listener if it has one, else its first
  (`model.Broker.endpoint`; docs/control-plane.md "Listeners"). When the generation ends (dead,
  or replaced by a new registration), the sender is retired: the request in flight may finish,
  nothing else is sent, nothing is retried.
- The queue holds at most `queue_requests_max` requests. The service replaces a full queue with
  the whole state (`ControllerState.full_state_sends`), which makes every dropped delta redundant.
- A request that got no answer (connect failure, closed connection, timeout) is retried, with a
  backoff doubling from `BACKOFF_MS_MIN` up to `backoff_ms_max`, while the generation lives.
- A request that got an answer is never resent, whatever the answer. In particular a
  STALE_BROKER_EPOCH answer (KIP-380: the broker has a newer generation than the request names)
  drops the request; the broker's new registration brings it fresh state on a new sender.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable, Iterable

from epochlog.client.connection import Connection
from epochlog.protocol.error_codes import ErrorCode, name_of
from epochlog.protocol.registry import APIS

from .model import Send

log = logging.getLogger("epochlog.controller")

BACKOFF_MS_MIN = 50

AnswerHook = Callable[[Send, int, object], None]  # the request, its error code, the answer


class BrokerSender:
    def __init__(self, broker_id: int, broker_epoch: int, host: str, port: int, *,
                 queue_requests_max: int, request_timeout_ms: int, backoff_ms_max: int,
                 on_answer: AnswerHook) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.host, self.port = host, port
        self.queue_requests_max = queue_requests_max
        self.request_timeout_ms = request_timeout_ms
        self.backoff_ms_max = backoff_ms_max
        self._on_answer = on_answer
        self._queue: collections.deque[Send] = collections.deque()
        self._wake = asyncio.Event()
        self._retired = asyncio.Event()
        self._conn: Connection | None = None
        self.task: asyncio.Task[None] = asyncio.get_running_loop().create_task(
            self._run(), name=f"sender-{broker_id}-{broker_epoch}")

    def __repr__(self) -> str:
        return f"BrokerSender(broker {self.broker_id} generation {self.broker_epoch})"

    def offer(self, send: Send) -> bool:
        """Queue a request; False when the queue is full (the caller resyncs)."""
        assert (send.broker_id, send.broker_epoch) == (self.broker_id, self.broker_epoch), send
        if len(self._queue) >= self.queue_requests_max:
            return False
        self._queue.append(send)
        self._wake.set()
        return True

    def replace(self, sends: Iterable[Send]) -> None:
        """Drop everything queued and queue `sends` instead."""
        self._queue.clear()
        for send in sends:
            self.offer(send)

    def retire(self) -> None:
        self._retired.set()
        self._wake.set()

    async def _run(self) -> None:
        backoff_ms = BACKOFF_MS_MIN
        try:
            while not self._retired.is_set():
                if not self._queue:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                send = self._queue[0]
                answered = await self._send(send)
                if answered is None:  # no answer: back off, then retry the same request
                    await self._pause(backoff_ms)
                    backoff_ms = min(backoff_ms * 2, self.backoff_ms_max)
                    continue
                backoff_ms = BACKOFF_MS_MIN
                if self._queue and self._queue[0] is send:
                    self._queue.popleft()
                self._on_answer(send, *answered)
        finally:
            await self._close()

    async def _send(self, send: Send) -> tuple[int, object] | None:
        """The answer's error code and the answer, or None when there was no answer."""
        api = APIS[send.api_key]
        try:
            if self._conn is None or self._conn.closed:
                self._conn = await Connection(
                    self.host, self.port, client_id="epochlog-controller",
                    request_timeout_ms=self.request_timeout_ms,
                    connect_timeout_ms=self.request_timeout_ms).connect(negotiate=False)
            answer = await self._conn.request(api, send.version, send.message)
        except (TimeoutError, OSError) as exc:  # ConnectionClosed/RequestTimedOut too
            log.debug("%s: %s to %s:%d got no answer: %s", self, api.name, self.host, self.port,
                      exc)
            await self._close()
            return None
        return self._report(send, answer), answer

    def _report(self, send: Send, answer: object) -> int:
        api = APIS[send.api_key]
        error = getattr(answer, "error_code", 0)
        if error == ErrorCode.STALE_BROKER_EPOCH:
            log.info("%s: broker refused %s for generation %d as STALE_BROKER_EPOCH; dropped, "
                     "not resent", self, api.name, send.broker_epoch)
        elif error:
            log.warning("%s: broker answered %s with %s; not resent", self, api.name,
                        name_of(error))
        for part in getattr(answer, "partition_errors", ()):
            if part.error_code:
                log.warning("%s: %s %s-%d: %s", self, api.name, part.topic_name,
                            part.partition_index, name_of(part.error_code))
        return error

    async def _pause(self, ms: int) -> None:
        """Back off, but wake at once if the generation ends."""
        try:  # asyncio.timeout: 3.11's wait_for can swallow a cancellation
            async with asyncio.timeout(ms / 1000):
                await self._retired.wait()
        except TimeoutError:
            pass

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()
