"""`SourceFetchers`: which source broker each followed partition is fetched from, and what each
source's fetcher does next (sans-IO).

Theory of operation
-------------------
The follower's decisions per partition are `follower.SourceFetcher`'s, one per source (leader)
broker; this machine decides the rest of what fetcher.py's loop did: which source a partition
belongs to, when a source connects, sends, sleeps or ends. fetcher.py drives it on asyncio, one
task per source; tests/sim/broker_node.py drives it on the simulated network.

`ReplicaManager` tells `on_partition` about every partition whose state it applied or removed:

    partition now          here
    --------------------   ----------------------------------------------------------------
    FOLLOWER of broker L    followed by source L; a new leader epoch (or leader) re-adds it
    at leader epoch E       (TRUNCATING again), taking it from its old source; an ISR change
                            under the same epoch changes nothing
    leader, offline, gone   removed from its source

It answers StartSource(L) for a source new to it (drive it) and WakeSource(L) for one whose
partitions changed (a sleeping driver asks again). A driver asks `next_step(now, source)` what
to do, and gets one of:

    Connect()               open a connection to the source, then connected() or
                            connect_failed(); a failed connect backs every partition off and
                            is tried again after RETRY_FIRST_MS, doubling to backoff_ms, or
                            as soon as a partition is added or removed
    Send(api_key, request)  the one request outstanding; then answered() (the partitions whose
                            log or high watermark changed: poke them) or request_failed() (the
                            connection is gone: closed, and opened again)
    Idle(until_ms)          nothing to send: sleep until then (None: until woken); asked while
                            a connect or request is on its way, the answer is Idle(None)
    End()                   no partition left (or close()): close the connection; the source
                            is forgotten, and a partition that comes later starts a new one

`next_deadline_ms()` is the earliest Idle time of all sources, for a driver with one timer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochlog.protocol.schema import Message

from .follower import RETRY_FIRST_MS, SourceFetcher
from .partition import Partition, Role

log = logging.getLogger("epochlog.fetcher")

TopicPartition = tuple[str, int]
CONNECT_FAILURES_COUNTED_MAX = 16  # the connect backoff's exponent stops growing here


# ------------------------------------------------------------------------- on_partition's
@dataclass(frozen=True)
class StartSource:
    source_id: int


@dataclass(frozen=True)
class WakeSource:
    source_id: int


Action = StartSource | WakeSource


# -------------------------------------------------------------------------- next_step's
@dataclass(frozen=True)
class Connect:
    pass


@dataclass(frozen=True)
class Send:
    api_key: int
    request: Message


@dataclass(frozen=True)
class Idle:
    until_ms: int | None


@dataclass(frozen=True)
class End:
    pass


Step = Connect | Send | Idle | End
CONNECT, END, WAIT = Connect(), End(), Idle(None)


@dataclass(eq=False)
class _Source:
    fetcher: SourceFetcher
    connected: bool = False
    busy: bool = False  # a Connect or Send is on its way
    woken: bool = False  # a partition was added or removed since the last sleep
    connect_failures: int = 0
    connect_at_ms: int = 0  # after a failed connect: not before then, unless woken


class SourceFetchers:
    def __init__(self, broker_id: int, make_fetcher: Callable[[int], SourceFetcher], *,
                 backoff_ms: int) -> None:
        self.broker_id = broker_id
        self.make_fetcher = make_fetcher  # source id -> its SourceFetcher (the driver's clock)
        self.backoff_ms = backoff_ms
        self.sources: dict[int, _Source] = {}
        self.following: dict[TopicPartition, tuple[int, int]] = {}  # -> (source, leader epoch)
        self.closed = False

    def fetcher(self, source_id: int) -> SourceFetcher:
        return self.sources[source_id].fetcher

    def max_lag(self) -> int:
        # a metrics scrape reads this from another thread: iterate over a copy
        return max((s.fetcher.max_lag() for s in list(self.sources.values())), default=0)

    # ------------------------------------------------------------------------- membership
    def on_partition(self, topic: str, index: int, partition: Partition | None) -> list[Action]:
        """ReplicaManager's listener: a partition's state was applied (or it is gone)."""
        if partition is not None and partition.role is Role.FOLLOWER:
            return self._follow(partition)
        return self._unfollow((topic, index))

    def _follow(self, partition: Partition) -> list[Action]:
        tp = (partition.topic, partition.index)
        wanted = (partition.leader_id, partition.leader_epoch)
        if self.closed or self.following.get(tp) == wanted:
            return []  # an ISR change under the same leader epoch: keep fetching
        out = self._unfollow(tp)
        source_id = partition.leader_id
        source = self.sources.get(source_id)
        if source is None:
            source = self.sources[source_id] = _Source(self.make_fetcher(source_id))
            log.info("broker %d: started fetching from broker %d", self.broker_id, source_id)
            out.append(StartSource(source_id))
        else:
            out.append(self._wake(source_id, source))
        source.fetcher.add(partition)
        self.following[tp] = wanted
        return out

    def _unfollow(self, tp: TopicPartition) -> list[Action]:
        was = self.following.pop(tp, None)
        source = self.sources.get(was[0]) if was is not None else None
        if was is None or source is None:
            return []
        source.fetcher.remove(*tp)
        return [self._wake(was[0], source)]

    @staticmethod
    def _wake(source_id: int, source: _Source) -> WakeSource:
        source.woken = True
        return WakeSource(source_id)

    def close(self) -> None:
        """The broker stops: every source ends, and nothing is followed any more."""
        self.closed = True
        for source_id in self.sources:
            log.info("broker %d: stopped fetching from broker %d", self.broker_id, source_id)
        self.sources.clear()
        self.following.clear()

    # ------------------------------------------------------------------------------ steps
    def next_step(self, now_ms: int, source_id: int) -> Step:
        source = self.sources.get(source_id)
        if source is None:
            return END
        if source.busy:
            return WAIT
        fetcher = source.fetcher
        if not len(fetcher) or self.closed:
            del self.sources[source_id]
            log.info("broker %d: stopped fetching from broker %d", self.broker_id, source_id)
            return END
        if not source.connected:
            if now_ms < source.connect_at_ms:
                if not source.woken:
                    return Idle(source.connect_at_ms)
                source.woken = False  # a partition came or went: try now
            source.busy = True
            return CONNECT
        request = fetcher.next_request()
        if request is None:
            source.woken = False
            return Idle(fetcher.next_wakeup_ms())
        source.busy = True
        return Send(*request)

    def next_deadline_ms(self) -> int | None:
        times = []
        for source in self.sources.values():
            if source.busy:
                continue
            if not source.connected:
                times.append(source.connect_at_ms)
            elif (wake := source.fetcher.next_wakeup_ms()) is not None:
                times.append(wake)
        return min(times, default=None)

    # ----------------------------------------------------------------------------- events
    def connected(self, source_id: int) -> None:
        source = self._answered(source_id)
        source.connected, source.connect_failures, source.connect_at_ms = True, 0, 0

    def connect_failed(self, now_ms: int, source_id: int, why: str) -> None:
        source = self._answered(source_id)
        source.fetcher.on_failure(why)
        source.connect_at_ms = now_ms + min(self.backoff_ms,
                                            RETRY_FIRST_MS << source.connect_failures)
        source.connect_failures = min(source.connect_failures + 1, CONNECT_FAILURES_COUNTED_MAX)

    def answered(self, source_id: int, api_key: int, answer: Any) -> list[TopicPartition]:
        """The answer to the source's Send: the partitions whose log or high watermark
        changed (their waiters re-check)."""
        return self._answered(source_id).fetcher.on_response(api_key, answer)

    def request_failed(self, source_id: int, why: str) -> None:
        """The Send failed (lost connection, timeout): its connection is gone."""
        source = self._answered(source_id)
        source.connected = False
        source.fetcher.on_failure(why)

    def disconnected(self, source_id: int) -> None:
        """The driver found the source's connection closed between requests."""
        source = self.sources.get(source_id)
        if source is not None:
            source.connected = False

    def _answered(self, source_id: int) -> _Source:
        source = self.sources[source_id]
        assert source.busy, f"an answer from broker {source_id} that nothing waits for"
        source.busy = False
        return source
