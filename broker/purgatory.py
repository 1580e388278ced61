"""Purgatories: requests waiting for something to happen to partitions, each wait bounded.

Kafka parks an acks=all Produce until the high watermark passes its batches, and a Fetch until
min_bytes are there, each up to its timeout. Here a waiter names the partitions it watches (keys)
and a condition (`done`, a plain function re-checked on the event loop); whoever changes a
partition `poke`s its key (an append, a high watermark move, a role change) and the waiters of
that key re-check. Nothing polls: between pokes a waiter sleeps until its deadline.

So the replication issue only has to move the high watermark and poke: acks=all then completes
by itself. Limits: at most `waiters_max` waiters at once; past it `wait_until` answers at once
(False unless done), which the handlers turn into a timeout answer rather than queueing more.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterable


class _Waiter:
    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = asyncio.Event()


class Purgatory:
    def __init__(self, name: str, waiters_max: int) -> None:
        self.name = name
        self.waiters_max = waiters_max
        self._by_key: dict[Hashable, set[_Waiter]] = {}
        self._count = 0
        self.expired_total = 0  # waits that ended by timeout, for metrics

    def __len__(self) -> int:
        return self._count

    async def wait_until(self, keys: Iterable[Hashable], done: Callable[[], bool],
                         timeout_ms: int, *, checked: bool = False) -> bool:
        """Wait until done() holds (True) or timeout_ms pass (then done() once more). checked:
        the caller found done() false just now, with no await since, and done() changes only
        with a poke of its keys: neither the first check nor the last without a poke since is
        made (a fetch's condition is a pass over every partition it names: at 10,000
        partitions those checks were a third of an idle follower fetch's cost, issue 33)."""
        if not checked and done():
            return True
        if timeout_ms <= 0 or self._count >= self.waiters_max:
            return False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        waiter = _Waiter()
        watched = list(keys)
        for key in watched:
            self._by_key.setdefault(key, set()).add(waiter)
        self._count += 1
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                waiter.event.clear()
                try:
                    async with asyncio.timeout(remaining):
                        await waiter.event.wait()
                except TimeoutError:
                    break
                if done():
                    return True
            self.expired_total += 1
            return (not checked or waiter.event.is_set()) and done()
        finally:
            self._count -= 1
            for key in watched:
                waiters = self._by_key.get(key)
                if waiters is not None:
                    waiters.discard(waiter)
                    if not waiters:
                        del self._by_key[key]

    def poke(self, key: Hashable) -> None:
        """Something changed for key: its waiters re-check their condition."""
        for waiter in self._by_key.get(key, ()):
            waiter.event.set()

    def poke_all(self) -> None:
        for waiters in self._by_key.values():
            for waiter in waiters:
                waiter.event.set()
