"""`ReplicaFetcherManager`: the asyncio driver of the follower side, one task per source broker.

Theory of operation
-------------------
The decisions live in sans-IO machines: `follower.SourceFetcher` (per partition: truncate,
fetch, back off) and `source_fetchers.SourceFetchers` (which source each followed partition
belongs to, and each source's next step: connect, send, sleep, end); this module only moves
bytes and time. `ReplicaManager` tells `on_partition` about every partition whose state it
applied or removed; the machine answers which source to start or wake.

Each source has one task that owns one `client.connection.Connection` to the leader's INTERNAL
endpoint (docs/control-plane.md "Listeners"; the metadata cache's `BrokerInfo.endpoint`, looked up
at each connect, so a restarted leader on a new address is found) and does what `next_step` says:
connect; send at the highest version both speak (Fetch up to 12, OffsetForLeaderEpoch up to 4),
hand the answer back and poke the purgatories of the partitions that changed; sleep until woken
or the time given; end. A lost connection or a timed-out request (max_wait_ms +
REQUEST_TIMEOUT_MARGIN_MS) is reported to the machine and the connection closed; one found closed
between requests is reported too. A task ends when the machine says End (no partition left);
everything runs on the broker's one event loop, so a partition added meanwhile starts a new task.
"""


from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from epochlog.client.connection import Connection, NoCommonVersion
from epochlog.protocol.registry import APIS

from .follower import FollowerStats, SourceFetcher
from .partition import Partition
from .source_fetchers import Connect, End, Idle, Send, SourceFetchers, StartSource

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
                 poke: Callable[[TopicPartition], None], spawn: Spawn | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.broker_id = broker_id
        self.tls = tls  # the inter-broker listener is SSL: dial leaders with this context
        self.clock = clock
        self.settings = settings
        self.resolve = resolve  # source broker id -> its inter-broker (host, port), if known
        self.poke = poke
        self.spawn = spawn or (lambda coro, name: asyncio.get_running_loop().create_task(
            coro, name=name))
        self.stats = FollowerStats()
        self.machine = SourceFetchers(broker_id, self._make_fetcher,
                                      backoff_ms=settings.backoff_ms)
        self.sources: dict[int, _Source] = {}  # the running tasks, by source

    @property
    def following(self) -> dict[TopicPartition, tuple[int, int]]:
        return self.machine.following  # -> (source, leader epoch)

    # ------------------------------------------------------------------------- membership
    def on_partition(self, topic: str, index: int, partition: Partition | None) -> None:
        """ReplicaManager's listener: a partition's state was applied (or it is gone)."""
        for action in self.machine.on_partition(topic, index, partition):
            if isinstance(action, StartSource):
                self._start_source(action.source_id)
            elif (source := self.sources.get(action.source_id)) is not None:
                source.wake.set()

    def max_lag(self) -> int:
        return self.machine.max_lag()

    async def close(self) -> None:
        """Stop every task (broker stop): no append after this returns."""
        self.machine.close()
        tasks = [s.task for s in self.sources.values() if s.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self.sources.clear()

    # ------------------------------------------------------------------------------- tasks
    def _make_fetcher(self, source_id: int) -> SourceFetcher:
        s = self.settings
        return SourceFetcher(self.broker_id, source_id, self.clock,
                             fetch_max_bytes=s.fetch_max_bytes,
                             partition_max_bytes=s.partition_max_bytes,
                             max_wait_ms=s.max_wait_ms, backoff_ms=s.backoff_ms, stats=self.stats)

    def _start_source(self, source_id: int) -> None:
        source = self.sources[source_id] = _Source(self.machine.fetcher(source_id))
        source.task = self.spawn(self._run(source_id, source), f"fetcher-{source_id}")

    async def _run(self, source_id: int, source: _Source) -> None:
        """What the machine says, for one source, until it says End."""
        machine = self.machine
        conn: Connection | None = None
        try:
            while True:
                if conn is not None and conn.closed:
                    machine.disconnected(source_id)
                    conn = None
                match machine.next_step(self.clock(), source_id):
                    case End():
                        return
                    case Connect():
                        conn = await self._connect(source_id)
                    case Idle(until_ms=until_ms):
                        await self._sleep(source, None if until_ms is None
                                          else max(0, until_ms - self.clock()))
                    case Send(api_key=key, request=message):
                        assert conn is not None
                        api = APIS[key]
                        try:
                            answer = await conn.request(
                                api, conn.version_for(api), message,
                                timeout_ms=self.settings.max_wait_ms + REQUEST_TIMEOUT_MARGIN_MS)
                        except (ConnectionError, TimeoutError, OSError, NoCommonVersion) as exc:
                            machine.request_failed(source_id,
                                                   f"{api.name}: {type(exc).__name__}: {exc}")
                            await self._close(conn)
                            conn = None
                            continue
                        for tp in machine.answered(source_id, key, answer):
                            self.poke(tp)
        finally:
            if self.sources.get(source_id) is source:
                del self.sources[source_id]  # before any await: a new follow starts anew
            if conn is not None:
                await self._close(conn)

    @staticmethod
    async def _close(conn: Connection) -> None:
        """Close, bounded: a paused leader that reads nothing would hold a flush forever."""
        try:
            async with asyncio.timeout(CLOSE_WAIT_MS_MAX / 1000):
                await conn.close()
        except TimeoutError:
            log.warning("%s: not closed within %d ms; left to the OS", conn, CLOSE_WAIT_MS_MAX)

    async def _connect(self, source_id: int) -> Connection | None:
        """A connection to the source, told to the machine (connected or connect_failed)."""
        address = self.resolve(source_id)
        if address is None:
            self.machine.connect_failed(self.clock(), source_id,
                                        f"broker {source_id} is not in our metadata")
            return None
        conn = Connection(address[0], address[1],
                          client_id=f"epochlog-fetcher-{self.broker_id}-{source_id}",
                          frame_bytes_max=max(self.settings.fetch_max_bytes,
                                              self.settings.message_max_bytes)
                          + FRAME_BYTES_MAX_EXTRA,
                          in_flight_max=1, connect_timeout_ms=CONNECT_TIMEOUT_MS,
                          ssl_context=self.tls,
                          request_timeout_ms=self.settings.max_wait_ms + REQUEST_TIMEOUT_MARGIN_MS)
        try:
            await conn.connect()
        except (ConnectionError, TimeoutError, OSError) as exc:
            await self._close(conn)
            self.machine.connect_failed(self.clock(), source_id,
                                        f"connecting to {address[0]}:{address[1]}: "
                                        f"{type(exc).__name__}: {exc}")
            return None
        self.machine.connected(source_id)
        return conn

    @staticmethod
    async def _sleep(source: _Source, timeout_ms: int | None) -> None:
        """Until a partition is added or removed (the machine woke the source) or timeout_ms."""
        try:
            async with asyncio.timeout(None if timeout_ms is None else timeout_ms / 1000):
                await source.wake.wait()
        except TimeoutError:
            pass
        source.wake.clear()
