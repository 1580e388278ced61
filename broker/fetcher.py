"""`ReplicaFetcherManager`: the asyncio driver of follower.py, one task per source broker.

Theory of operation
-------------------
The decisions live in `follower.SourceFetcher` (sans-IO); this module only moves bytes and time.
`ReplicaManager` tells `on_partition` about every partition whose state it applied or removed:

    partition now          here
    --------------------   ----------------------------------------------------------------
    FOLLOWER of broker L    followed by source L's fetcher; a new leader epoch (or leader)
    at leader epoch E       re-adds it (TRUNCATING again), taking it from its old source
    leader, offline, gone   removed from its source

Each source has one task that owns one `client.connection.Connection` to the leader's INTERNAL
endpoint (docs/control-plane.md "Listeners"; the metadata cache's `BrokerInfo.endpoint`, looked up
at each connect, so a restarted leader on a new address is found) and loops: next_request ->
send at the highest version both speak (Fetch up to 12, OffsetForLeaderEpoch up to 4) -> on_response
-> poke the purgatories of the partitions that changed. With nothing to send it sleeps until a
partition is added or removed or a backoff ends. A failed connect is retried after RETRY_FIRST_MS,
doubling to backoff_ms; a lost connection or a timed-out request (max_wait_ms +
REQUEST_TIMEOUT_MARGIN_MS) is reported to the SourceFetcher, which backs its partitions off, and
the connection is opened again. A task whose fetcher has no partition left closes its connection
and ends; everything runs on the broker's one event loop, so a partition added meanwhile starts a
new task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from epochlog.client.connection import Connection, NoCommonVersion
from epochlog.protocol.registry import APIS

from .follower import RETRY_FIRST_MS, FollowerStats, SourceFetcher
from .partition import Partition, Role

log = logging.getLogger("epochlog.fetcher")

TopicPartition = tuple[str, int]
REQUEST_TIMEOUT_MARGIN_MS = 10_000  # beyond a Fetch's max wait, before the leader counts as gone
CONNECT_TIMEOUT_MS = 5_000
CLOSE_WAIT_MS_MAX = 1_000
FRAME_BYTES_MAX_EXTRA = 8 << 20  # a Fetch answer may exceed max_bytes by one whole batch (KIP-74)
Spawn = Callable[[Coroutine[Any, Any, Any], str], "asyncio.Task[Any]"]


@dataclass(frozen=True)
class FetcherSettings:
    fetch_max_bytes: int
    partition_max_bytes: int
    max_wait_ms: int
    backoff_ms: int
    message_max_bytes: int = 1 << 20


class _Source:
    def __init__(self, fetcher: SourceFetcher) -> None:
        self.fetcher = fetcher
        self.wake = asyncio.Event()
        self.task: asyncio.Task[Any] | None = None


class ReplicaFetcherManager:
    def __init__(self, broker_id: int, clock: Callable[[], int], settings: FetcherSettings, *,
                 resolve: Callable[[int], tuple[str, int] | None],
                 poke: Callable[[TopicPartition], None], spawn: Spawn | None = None) -> None:
        self.broker_id = broker_id
        self.clock = clock
        self.settings = settings
        self.resolve = resolve  # source broker id -> its INTERNAL (host, port), if known
        self.poke = poke
        self.spawn = spawn or (lambda coro, name: asyncio.get_running_loop().create_task(
            coro, name=name))
        self.stats = FollowerStats()
        self.sources: dict[int, _Source] = {}
        self.following: dict[TopicPartition, tuple[int, int]] = {}  # -> (source, leader epoch)
        self.closed = False

    # ------------------------------------------------------------------------- membership
    def on_partition(self, topic: str, index: int, partition: Partition | None) -> None:
        """ReplicaManager's listener: a partition's state was applied (or it is gone)."""
        if partition is not None and partition.role is Role.FOLLOWER:
            self.follow(partition)
        else:
            self.unfollow(topic, index)

    def follow(self, partition: Partition) -> None:
        tp = (partition.topic, partition.index)
        wanted = (partition.leader_id, partition.leader_epoch)
        if self.closed or self.following.get(tp) == wanted:
            return  # an ISR change under the same leader epoch: keep fetching
        self.unfollow(*tp)
        source = self.sources.get(partition.leader_id)
        if source is None:
            source = self._start_source(partition.leader_id)
        source.fetcher.add(partition)
        source.wake.set()
        self.following[tp] = wanted

    def unfollow(self, topic: str, index: int) -> None:
        was = self.following.pop((topic, index), None)
        if was is None:
            return
        source = self.sources.get(was[0])
        if source is not None:
            source.fetcher.remove(topic, index)
            source.wake.set()

    def max_lag(self) -> int:
        return max((s.fetcher.max_lag() for s in list(self.sources.values())), default=0)

    async def close(self) -> None:
        """Stop every task (broker stop): no append after this returns."""
        self.closed = True
        tasks = [s.task for s in self.sources.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.sources.clear()
        self.following.clear()

    # ------------------------------------------------------------------------------- tasks
    def _start_source(self, source_id: int) -> _Source:
        s = self.settings
        fetcher = SourceFetcher(self.broker_id, source_id, self.clock,
                                fetch_max_bytes=s.fetch_max_bytes,
                                partition_max_bytes=s.partition_max_bytes,
                                max_wait_ms=s.max_wait_ms, backoff_ms=s.backoff_ms,
                                stats=self.stats)
        source = self.sources[source_id] = _Source(fetcher)
        source.task = self.spawn(self._run(source_id, source), f"fetcher-{source_id}")
        log.info("broker %d: started fetching from broker %d", self.broker_id, source_id)
        return source

    async def _run(self, source_id: int, source: _Source) -> None:
        fetcher = source.fetcher
        conn: Connection | None = None
        connect_failures = 0
        try:
            while len(fetcher) and not self.closed:
                if conn is None or conn.closed:
                    conn = await self._connect(source_id, fetcher)
                    if conn is None:
                        delay = min(self.settings.backoff_ms, RETRY_FIRST_MS << connect_failures)
                        connect_failures = min(connect_failures + 1, 16)
                        await self._sleep(source, delay)
                        continue
                    connect_failures = 0
                request = fetcher.next_request()
                if request is None:
                    await self._idle(source)
                    continue
                key, message = request
                api = APIS[key]
                try:
                    answer = await conn.request(
                        api, conn.version_for(api), message,
                        timeout_ms=self.settings.max_wait_ms + REQUEST_TIMEOUT_MARGIN_MS)
                except (ConnectionError, TimeoutError, OSError, NoCommonVersion) as exc:
                    fetcher.on_failure(f"{api.name}: {type(exc).__name__}: {exc}")
                    await self._close(conn)
                    conn = None
                    continue
                for tp in fetcher.on_response(key, answer):
                    self.poke(tp)
        finally:
            if self.sources.get(source_id) is source:
                del self.sources[source_id]  # before any await: a new follow starts anew
            if conn is not None:
                await self._close(conn)
            log.info("broker %d: stopped fetching from broker %d", self.broker_id, source_id)

    @staticmethod
    async def _close(conn: Connection) -> None:
        """Close, bounded: a paused leader that reads nothing would hold a flush forever."""
        try:
            async with asyncio.timeout(CLOSE_WAIT_MS_MAX / 1000):
                await conn.close()
        except TimeoutError:
            log.warning("%s: not closed within %d ms; left to the OS", conn, CLOSE_WAIT_MS_MAX)

    async def _connect(self, source_id: int, fetcher: SourceFetcher) -> Connection | None:
        address = self.resolve(source_id)
        if address is None:
            fetcher.on_failure(f"broker {source_id} is not in our metadata")
            return None
        conn = Connection(address[0], address[1],
                          client_id=f"epochlog-fetcher-{self.broker_id}-{source_id}",
                          frame_bytes_max=max(self.settings.fetch_max_bytes,
                                              self.settings.message_max_bytes)
                          + FRAME_BYTES_MAX_EXTRA,
                          in_flight_max=1, connect_timeout_ms=CONNECT_TIMEOUT_MS,
                          request_timeout_ms=self.settings.max_wait_ms + REQUEST_TIMEOUT_MARGIN_MS)
        try:
            return await conn.connect()
        except (ConnectionError, TimeoutError, OSError) as exc:
            await self._close(conn)
            fetcher.on_failure(f"connecting to {address[0]}:{address[1]}: "
                               f"{type(exc).__name__}: {exc}")
            return None

    async def _idle(self, source: _Source) -> None:
        """Until a partition is added or removed, or the earliest backoff ends."""
        wake_at = source.fetcher.next_wakeup_ms()
        timeout_ms = None if wake_at is None else max(0, wake_at - self.clock())
        await self._sleep(source, timeout_ms)

    @staticmethod
    async def _sleep(source: _Source, timeout_ms: int | None) -> None:
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                await source.wake.wait()
        except TimeoutError:
            pass
        source.wake.clear()
