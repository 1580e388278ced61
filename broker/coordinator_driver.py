"""`CoordinatorDriver`: the asyncio shell both coordinators put around their sans-IO cores
(groups/core.py, txn/core.py). It moves bytes and time; every decision is the core's.

Theory of operation
-------------------
- A request becomes one of the core's events with a fresh token (`_call`); a future waits under
  the token until the core's `Resolve` for it, now or later (a parked JoinGroup, an append).
- `Append`: the records go through `InternalTopic.append` (the leader's own append, answered
  once the high watermark passes them, within the coordinator's timeout), in a task of the
  broker's; the outcome goes back to the core (`_appended`).
- `Load`: a task reads the partition's log from its start to its end, a chunk at a time
  (`InternalTopic.batch_records`, control records included), into the core's `replay` while the
  shard is still loading, then reports it `_loaded`.
- Leadership: the core's shards are only as current as the driver says. Before a lookup for a
  key (`_check`) and at every turn of the timer, a shard whose partition we no longer lead at its
  epoch (our generation ended without a LeaderAndIsr) is reported lost.
- The timer: one task ticks the core at its `next_deadline_ms()`, at least every TICK_MS_MAX,
  and is woken early whenever actions ran (a deadline may have moved).
A subclass gives the core's events that differ by the clocks they carry (`_appended`, `_tick`)
and carries out the actions of its own (`_perform`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from .clock import monotonic_ms
from .coordinator_shards import Append, Load, Resolve, Shards

if TYPE_CHECKING:
    from .internal_topics import InternalTopic
    from .parts import BrokerParts

T = TypeVar("T")
TICK_MS_MAX = 1000  # the timer looks at least this often (shards lost without a listener)




class Core(Protocol):
    """What the driver uses of a coordinator's core alike for both."""

    @property
    def shards(self) -> Shards[Any]: ...

    def leadership_lost(self, index: int) -> Sequence[object]: ...

    def replay(self, index: int, leader_epoch: int, offset: int, key: bytes | None,
               value: bytes | None, *, producer_id: int = -1, transactional: bool = False,
               control: bool = False) -> None: ...

    def loaded(self, now_ms: int, index: int, leader_epoch: int, log_start: int, log_end: int,
               took_ms: int) -> Sequence[object]: ...

    def next_deadline_ms(self) -> int | None: ...


class CoordinatorDriver:
    core: Core

    def __init__(self, parts: BrokerParts, topic: InternalTopic, clock: Callable[[], int]) -> None:
        self.parts = parts
        self.topic = topic
        self.clock = clock  # the core's now_ms
        self._futures: dict[int, asyncio.Future[object]] = {}
        self._next_token = 0
        self._wake = asyncio.Event()

    @property
    def shards(self) -> Shards[Any]:
        """The partitions whose state is loaded or loading here (the metrics count them)."""
        return self.core.shards

    # ------------------------------------------------------------------ for the subclass
    def _appended(self, append_id: int, error: int, first_offset: int) -> Sequence[object]:
        raise NotImplementedError

    def _tick(self) -> Sequence[object]:
        raise NotImplementedError

    def _perform(self, action: object) -> None:
        raise AssertionError(f"an action this coordinator does not know: {action!r}")

    # ------------------------------------------------------------------------- requests
    def _check(self, key: str) -> None:
        """Before a lookup for key: its shard, if we no longer lead it, is reported lost."""
        self._unload_lost(self.topic.partition_for(key))

    def _unload_lost(self, index: int | None = None) -> None:
        """Report every shard (or shard index's) whose partition we no longer lead."""
        for i, leader_epoch in self.core.shards.led():
            if (index is None or i == index) and self.topic.leading(i, leader_epoch) is None:
                self._run(self.core.leadership_lost(i))

    async def _call(self, event: Callable[[int], Sequence[object]], kind: type[T]) -> T:
        """Run a request's event under a fresh token; its answer, once the core resolves it."""
        self._next_token += 1
        token = self._next_token
        future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        self._futures[token] = future
        try:
            self._run(event(token))
            answer = await future
        finally:
            self._futures.pop(token, None)
        assert isinstance(answer, kind), answer
        return answer

    def _call_now(self, event: Callable[[int], Sequence[object]], kind: type[T]) -> T:
        """As _call, for an event whose answer comes in its own list of actions."""
        self._next_token += 1
        token = self._next_token
        actions = event(token)
        answers = [a.result for a in actions if isinstance(a, Resolve) and a.token == token]
        self._run(actions)
        assert len(answers) == 1 and isinstance(answers[0], kind), (token, actions)
        return answers[0]

    # -------------------------------------------------------------------------- actions
    def _run(self, actions: Sequence[object]) -> None:
        for action in actions:
            if isinstance(action, Resolve):
                future = self._futures.get(action.token)
                if future is not None and not future.done():
                    future.set_result(action.result)
            elif isinstance(action, Append):
                self.parts.spawn(self._append(action),
                                 f"append to {self.topic.name}-{action.index}")
            elif isinstance(action, Load):
                self.parts.spawn(self._load(action), f"load {self.topic.name}-{action.index}")
            else:
                self._perform(action)
        self._wake.set()

    async def _append(self, a: Append) -> None:
        error, first = await self.topic.append(a.index, a.leader_epoch, a.records,
                                               dict(a.errors), producer=a.producer)
        self._run(self._appended(a.append_id, error, first))

    async def _load(self, load: Load) -> None:
        """Replay the partition's log into the shard, a chunk at a time."""
        partition = self.topic.leading(load.index, load.leader_epoch)
        if partition is None:
            return  # lost already: the next lookup or timer turn unloads the shard
        started = monotonic_ms()
        end = partition.log.log_end_offset
        shards = self.core.shards
        async for header, r in self.topic.batch_records(
                partition, end, lambda: shards.loading(load.index, load.leader_epoch) is not None):
            self.core.replay(load.index, load.leader_epoch, r.offset, r.key, r.value,
                             producer_id=header.producer_id,
                             transactional=header.is_transactional, control=header.is_control)
        self._run(self.core.loaded(self.clock(), load.index, load.leader_epoch,
                                   partition.log.log_start_offset, end, monotonic_ms() - started))

    # ---------------------------------------------------------------------------- timer
    async def run(self) -> None:
        """Tick the core at its next deadline (or at least every TICK_MS_MAX)."""
        while True:
            self._unload_lost()
            now_ms = self.clock()
            self._run(self._tick())
            deadline = now_ms + TICK_MS_MAX
            due = self.core.next_deadline_ms()
            if due is not None:
                deadline = min(deadline, due)
            self._wake.clear()
            try:
                async with asyncio.timeout(max(deadline - self.clock(), 1) / 1000):
                    await self._wake.wait()
            except TimeoutError:
                pass
