"""`InternalTopic`: what a coordinator needs of the internal topic that holds its state
(`__consumer_offsets` for groups, `__transaction_state` for transactions).

- Which partition holds a key (Kafka's `abs(key.hashCode) % partitions`, so Kafka's tools and
  ours agree) and who leads it: FindCoordinator's answer. The first lookup that finds the topic
  missing creates it through the controller, compacted, and waits briefly for it;
  COORDINATOR_NOT_AVAILABLE (retriable) while it or the partition's leader is not there yet.
- `leading(index, epoch)`: the partition, if we still lead it at that leader epoch (a coordinator
  loses its state when the epoch moves on).
- `append(...)`: records appended through the leader's normal append, answered once the high
  watermark passes them (replicated to the ISR, as acks=all), within the coordinator's timeout;
  storage and replication errors mapped to what the coordinator's clients retry.
- `batch_records(...)`: every record of a partition from its log start to a given end, each with
  its batch's header, a chunk at a time (a coordinator loading its state).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from epochlog.protocol.batch import BatchHeader, CorruptBatch
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.records import Record, build_batch, decode_batches

from .controller_link import ControllerLinkClosed, ControllerUnavailable
from .partition import Partition
from .parts import BrokerParts
from .replication_wait import replication_error
from .storage import StorageError

log = logging.getLogger("epochlog.broker")
E = ErrorCode

CREATE_WAIT_MS_MAX = 2000  # how long FindCoordinator waits for the new topic to show up
LOAD_READ_BYTES = 1 << 20  # bytes read from the log per step while loading


def java_string_hashcode(text: str) -> int:
    """Java's String.hashCode: over UTF-16 code units, 32-bit signed arithmetic."""
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(key: str, partitions: int) -> int:
    """Kafka's Utils.abs(key.hashCode) % partitions (abs of MIN_VALUE is 0)."""
    h = java_string_hashcode(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


class InternalTopic:
    def __init__(self, parts: BrokerParts, name: str, *, partitions: int,
                 replication_factor: int, configs: Sequence[tuple[str, str]], timeout_ms: int,
                 wall_clock: Callable[[], int]) -> None:
        self.parts = parts
        self.wall_clock = wall_clock  # the batches' timestamps
        self.name = name
        self.partitions = partitions  # when we create it; once it exists, its real count
        self.replication_factor = replication_factor
        self.configs = list(configs)  # the first one ("cleanup.policy") may be refused
        self.timeout_ms = timeout_ms
        self._creating: asyncio.Task[None] | None = None

    # ----------------------------------------------------------------------- where keys live
    def partition_count(self) -> int:
        known = self.parts.metadata.topics.get(self.name)
        return len(known) if known else self.partitions

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.partition_count())

    def leading(self, index: int, leader_epoch: int) -> Partition | None:
        p = self.parts.replicas.get(self.name, index)
        if p is None or not p.is_leader or p.leader_epoch != leader_epoch:
            return None
        return p

    async def find(self, key: str, listener: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of the leader of key's partition."""
        md = self.parts.metadata
        if not md.has_topic(self.name):
            self._create_soon()
            await self._wait_for(lambda: self._leader_of(key) is not None)
        leader = self._leader_of(key)
        if leader is None:
            return E.COORDINATOR_NOT_AVAILABLE, -1, "", -1
        host, port = md.brokers[leader].endpoint(listener)
        return 0, leader, host, port

    def _leader_of(self, key: str) -> int | None:
        md = self.parts.metadata
        parts = md.topics.get(self.name)
        if not parts:
            return None
        info = parts.get(partition_for(key, len(parts)))
        if info is None or info.leader < 0 or info.leader not in md.brokers:
            return None
        return info.leader

    async def _wait_for(self, done: Callable[[], bool]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CREATE_WAIT_MS_MAX / 1000
        while not done():
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0 or not await self.parts.metadata.changed(remaining_ms):
                return

    # ------------------------------------------------------------------------ creating it
    def _create_soon(self) -> None:
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(self._create())

    async def _create(self) -> None:
        for attempt in (self.configs, self.configs[1:]):
            request = CreateTopicsRequest(timeout_ms=CREATE_WAIT_MS_MAX, topics=[CreatableTopic(
                name=self.name, num_partitions=self.partitions,
                replication_factor=self.replication_factor,
                configs=[CreatableTopicConfig(name=k, value=v) for k, v in attempt])])
            try:
                answer = await self.parts.controller.forward(ApiKey.CREATE_TOPICS, None,
                                                             request)
            except ControllerLinkClosed:
                return  # the broker is stopping: not a fault
            except ControllerUnavailable as exc:
                log.warning("creating %s failed: %s", self.name, exc)
                return
            result = answer.topics[0]
            if result.error_code == 0:
                log.info("created %s (%d partitions, replication factor %d, %s)", self.name,
                         result.num_partitions, result.replication_factor,
                         ", ".join(f"{k}={v}" for k, v in attempt))
                return
            if result.error_code == E.TOPIC_ALREADY_EXISTS:
                return
            if result.error_code != E.INVALID_CONFIG or attempt is not self.configs:
                log.warning("creating %s refused: %s %s", self.name, result.error_code,
                            result.error_message or "")
                return
            log.warning("creating %s with %s refused (%s): creating it without", self.name,
                        "=".join(self.configs[0]), result.error_message or "")

    # ------------------------------------------------------------------- writing, reading
    async def append(self, index: int, leader_epoch: int,
                     records: Sequence[tuple[bytes, bytes | None]],
                     errors: dict[int, int], *,
                     producer: tuple[int, int] | None = None) -> tuple[int, int]:
        """Append records to partition index (led at leader_epoch) and wait until they are
        replicated: (error, offset of the first record). errors maps the append's and
        replication's error codes to the coordinator's (the rest pass through). producer:
        (id, epoch) of a transaction the records belong to (a transactional batch, with no
        sequence: the coordinator's own write)."""
        partition = self.leading(index, leader_epoch)
        if partition is None:
            return E.NOT_COORDINATOR, -1
        if partition.under_min_isr():
            return errors.get(E.NOT_ENOUGH_REPLICAS, E.NOT_ENOUGH_REPLICAS), -1
        stamped = [(k, v, None, self.wall_clock()) for k, v in records]
        if producer is None:
            batch = build_batch(stamped)
        else:
            batch = build_batch(stamped, producer_id=producer[0], producer_epoch=producer[1],
                                is_transactional=True)
        try:
            info = partition.append_as_leader(batch)
        except StorageError as exc:
            return errors.get(exc.error_code, exc.error_code), -1
        tp = (self.name, index)
        replicas = self.parts.replicas
        replicas.poke(tp)
        await replicas.produce_purgatory.wait_until(
            [tp], lambda: replication_error(replicas, partition, leader_epoch,
                                            info.last_offset) is not None,
            self.timeout_ms)
        error = replication_error(replicas, partition, leader_epoch, info.last_offset)
        if error is None:
            return E.REQUEST_TIMED_OUT, info.first_offset
        return errors.get(error, error), info.first_offset

    async def batch_records(self, partition: Partition, end: int,
                            still_wanted: Callable[[], bool]
                            ) -> AsyncIterator[tuple[BatchHeader, Record]]:
        """The records of partition's log from its start to end, each with its batch's header
        (control records included), a chunk at a time (other requests run in between); stops
        early once still_wanted() is False."""
        the_log = partition.log
        offset = the_log.log_start_offset
        while offset < end and still_wanted():
            try:
                data = the_log.read(max(offset, the_log.log_start_offset), LOAD_READ_BYTES,
                                    offset_max=end)
            except StorageError as exc:  # e.g. the log start moved past us: go on from it
                log.warning("%s-%d: reading at %d while loading: %s", self.name,
                            partition.index, offset, exc)
                offset = max(offset + 1, the_log.log_start_offset)
                continue
            if not data:
                return
            try:
                batches = decode_batches(data)
            except CorruptBatch as exc:
                log.error("%s-%d: the batch at offset %d does not decode, loading stops there: "
                          "%s", self.name, partition.index, offset, exc)
                return
            for header, batch in batches:
                offset = max(offset, header.next_offset)
                for record in batch:
                    yield header, record
            await asyncio.sleep(0)
