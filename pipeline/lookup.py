"""What the driver asks the cluster: which partitions to read, and offsets with leader epochs.

Everything goes through the client's Admin (Metadata and ListOffsets, each answer carrying the
leader epoch, KIP-320). A `Lookup` owns one event loop and one Admin: the streaming source's
driver side lives in a long-lived Python process and asks every trigger, so both are kept
between calls (and never pickled); a batch query's planner makes one, uses it and closes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Iterable, Mapping
from typing import Any, TypeVar

from epochlog.client.admin import Admin
from epochlog.client.errors import KafkaError
from epochlog.client.offsets_lookup import ListOffsetsResult
from epochlog.client.types import TopicPartition

from .options import EARLIEST, LATEST, OffsetSpec, ReadOptions, Topics
from .planning import NO_EPOCH, Position

log = logging.getLogger("epochlog.pipeline")
T = TypeVar("T")
INTERNAL_TOPIC_PREFIX = "__"  # __consumer_offsets and the like: never matched by a pattern


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's, as every epochlog client runs on; asyncio's where it is missing."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class Lookup:
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.loop = new_event_loop()
        settings = options.consumer
        self.admin = Admin(settings["bootstrap_servers"],
                           client_id=settings.get("client_id", "epochlog-spark-driver"),
                           request_timeout_ms=settings.get("request_timeout_ms", 30_000),
                           retry_backoff_ms=settings.get("retry_backoff_ms", 100))
        self._started = False

    def close(self) -> None:
        try:
            if self._started:
                self.loop.run_until_complete(self.admin.close())
        finally:
            self.loop.close()

    def run(self, coro: Awaitable[T]) -> T:
        return self.loop.run_until_complete(self._retrying(coro))

    async def _retrying(self, coro: Awaitable[T]) -> T:
        if not self._started:
            await self.admin.start()
            self._started = True
        return await coro

    # ------------------------------------------------------------------------ partitions
    def partitions(self) -> dict[TopicPartition, bool]:
        """The partitions to read now, each with whether its topic exists (assign names
        partitions that may be gone)."""
        return self.run(self._partitions(self.options.topics))

    async def _partitions(self, topics: Topics) -> dict[TopicPartition, bool]:
        if topics.assign:
            names = sorted({tp.topic for tp in topics.assign})
            found = await self._described(names)
            return {tp: tp in found for tp in topics.assign}
        if topics.pattern is not None:
            names = [t for t in await self.admin.list_topics()
                     if not t.startswith(INTERNAL_TOPIC_PREFIX) and topics.matches(t)]
        else:
            names = list(topics.subscribe)
        return dict.fromkeys(sorted(await self._described(names)), True)

    async def _described(self, names: list[str]) -> set[TopicPartition]:
        """Partitions of the topics that exist (no topic is created by asking)."""
        found: set[TopicPartition] = set()
        for name in names:
            try:
                described = await self.admin.describe_topics([name])
            except KafkaError as exc:
                log.debug("topic %s: %s", name, exc)
                continue
            for d in described.values():
                found.update(TopicPartition(d.name, p.partition) for p in d.partitions)
        return found

    # ------------------------------------------------------------------------ offsets
    def offsets(self, specs: Mapping[TopicPartition, OffsetSpec]) -> dict[TopicPartition,
                                                                          Position]:
        """Each spec as a position: earliest and latest and timestamps asked of the leaders
        (with their epochs), given offsets as given."""
        return self.run(self._offsets(specs))

    async def _offsets(self, specs: Mapping[TopicPartition, OffsetSpec]
                       ) -> dict[TopicPartition, Position]:
        out: dict[TopicPartition, Position] = {}
        asked: dict[TopicPartition, Any] = {}
        for tp, spec in specs.items():
            if spec.timestamp_ms is not None:
                asked[tp] = spec.timestamp_ms
            elif spec.offset == EARLIEST:
                asked[tp] = "earliest"
            elif spec.offset == LATEST:
                asked[tp] = "latest"
            else:
                out[tp] = Position(spec.offset, NO_EPOCH if spec.epoch is None else spec.epoch)
        if not asked:
            return out
        answers = await self._list_offsets(asked)
        latest_needed = []
        for tp, answer in answers.items():
            if answer.offset >= 0:
                out[tp] = Position(answer.offset, answer.leader_epoch)
                continue
            # A timestamp no record reaches: Spark's startingOffsetsByTimestampStrategy
            if self.options.timestamp_strategy != "latest":
                raise ValueError(
                    f"{tp.topic}-{tp.partition} has no record at or after timestamp "
                    f"{specs[tp].timestamp_ms}; set startingOffsetsByTimestampStrategy=latest "
                    "to start at the latest offset there instead")
            latest_needed.append(tp)
        if latest_needed:
            for tp, answer in (await self._list_offsets(
                    dict.fromkeys(latest_needed, "latest"))).items():
                out[tp] = Position(answer.offset, answer.leader_epoch)
        return out

    async def _list_offsets(self, asked: Mapping[TopicPartition, Any]
                            ) -> dict[TopicPartition, ListOffsetsResult]:
        """Admin.list_offsets, tried fetchOffset.numRetries times (Spark's option) apart by
        fetchOffset.retryIntervalMs: a leader election answers with retriable errors for a
        while."""
        attempts = self.options.fetch_retries
        for attempt in range(attempts):
            try:
                return await self.admin.list_offsets(asked)
            except KafkaError as exc:
                if not exc.retriable or attempt == attempts - 1:
                    raise
                log.info("list offsets failed (%s); retrying", exc)
                await asyncio.sleep(self.options.fetch_retry_interval_ms / 1000)
        raise AssertionError("unreachable")

    def earliest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Position]:
        return self.offsets(dict.fromkeys(tps, OffsetSpec(EARLIEST)))

    def latest(self, tps: Iterable[TopicPartition]) -> dict[TopicPartition, Position]:
        return self.offsets(dict.fromkeys(tps, OffsetSpec(LATEST)))


def now_ms() -> int:
    return int(time.monotonic() * 1000)
