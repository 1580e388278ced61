"""Consumer: reads assigned partitions, validates its position across leader changes (KIP-320),
reads from the closest replica (KIP-392), and prefetches within a memory bound.

    async with Consumer(bootstrap_servers="127.0.0.1:9092", auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("orders", 0)])
        for record in await c.poll(timeout_ms=1000):
            ...
        c.next_offsets()  # {TopicPartition: (offset, leader_epoch)}

Theory of operation
-------------------
One background task, the driver, owns all network work; poll() only hands out what is buffered.
Each turn the driver (1) refreshes metadata when asked or when it is older than
metadata_max_age_ms, and marks partitions whose leader epoch moved for validation; (2) sends
ListOffsets for partitions needing a reset and OffsetForLeaderEpoch for those needing
validation, grouped per leader; (3) sends one Fetch per broker that has fetchable partitions
and none in flight, as long as the buffered bytes are below prefetch_max_bytes; then it sleeps
until a request completes, the user seeks or polls, or a backoff ends. Each request runs as its
own task, so a long-polling fetch on one broker never holds up another broker.

Keeping the pipe full: a Fetch answer with records sends that broker's next Fetch at once, from
the request's own task, before poll() is woken to decode what came: the broker reads and sends
the next answer while we decode this one. (Left to the driver, the next Fetch went out only after
poll() had decoded the answer and the application had taken the records, so broker and consumer
took turns and each idled half the time: that, not the broker's read path, was the ~300 MB/s
ceiling measured with bench/clients.py.) New assignments are looked up at once rather than after
retry_backoff_ms. Fetch sizes: max_partition_fetch_bytes defaults to 4 MiB (Kafka's clients use
1 MiB), which quarters the round trips of a consumer catching up on one partition (measured:
~10% less CPU on both sides, and less idling on a loaded machine); fetch_max_bytes (50 MiB, as
Kafka) still bounds a whole answer, so memory is bounded as before.

Per-partition state and the decisions on every answer live in client.fetcher (sans-IO). Answers
to requests sent before a seek or reset are recognised by the partition's generation and dropped.

Fetched data is buffered raw (per partition answer, a view of the answer's frame as the
connection received it, with the batch positions found by reading headers only); poll() copies
and decodes batch by batch (CRC checked; client.fast_records, else
protocol.records.decode_batch) and turns records into ConsumerRecord, so only what the
application asks for is decoded and the buffer's size in memory is its wire size. A record's
leader_epoch is its batch's partition_leader_epoch, and the position carries the epoch of the last
record returned.

Errors that the user must see (LogTruncationError with auto_offset_reset="none",
OffsetOutOfRangeError, NoOffsetForPartitionError) are raised from poll(), and again on every
poll until the partition is seeked. Everything else is retried with retry_backoff_ms.

With group_id and subscribe(), client.group's GroupMember joins the group inside poll() and
hands this class the assignment with the committed (offset, epoch) pairs, which are seeked and so
validated like any position with an epoch (see client.group).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import ssl
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchResponse, FetchTopic
from epochlog.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
)
from epochlog.protocol.apis.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from epochlog.protocol.batch import (
    BATCH_HEADER_BYTES,
    COMPRESSION_MASK,
    CONTROL_MASK,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    CorruptBatch,
    check,
    iter_headers,
)
from epochlog.protocol.compression import decompress
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.errors import DecodeError
from epochlog.protocol.records import decode_batch
from epochlog.protocol.registry import APIS

from . import fetcher
from .aborted import AbortedTransactions
from .cluster import Bootstrap, ClusterClient, NodeNotReady
from .connection import NoCommonVersion
from .errors import CorruptMessageError, KafkaError, LogTruncationError, OffsetOutOfRangeError
from .fast_records import decode_uniform
from .fetcher import EARLIEST, LATEST, NO_EPOCH, NONE, PartitionState, State
from .group import GroupMember, RebalanceListener
from .offsets_lookup import ListOffsetsResult, list_offsets
from .security import context_for
from .types import ConsumerRecord, FetchedBatch, TopicPartition

log = logging.getLogger("epochlog.consumer")
_T = TypeVar("_T")

FETCH, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH = (APIS[ApiKey.FETCH], APIS[ApiKey.LIST_OFFSETS],
                                                APIS[ApiKey.OFFSET_FOR_LEADER_EPOCH])
FETCH_EPOCH_VERSION_MIN = 9  # CurrentLeaderEpoch in Fetch (KIP-320)
VALIDATE_VERSION_MIN = 2  # CurrentLeaderEpoch in OffsetForLeaderEpoch (KIP-320)
CONSUMER_REPLICA_ID = -1
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP = -2, -1
ISOLATION_LEVELS = {"read_uncommitted": 0, "read_committed": 1}
READ_COMMITTED = ISOLATION_LEVELS["read_committed"]
DRIVER_IDLE_S_MAX = 1.0  # the driver looks around at least this often
GROUP_POLL_S = 0.5  # a group member's poll() checks on the group at least this often
NETWORK_ERRORS = (OSError, ConnectionError, asyncio.TimeoutError, NoCommonVersion, DecodeError)


async def _wait(event: asyncio.Event, timeout_s: float) -> None:
    """Until event is set or timeout_s passes. asyncio.timeout rather than wait_for: on Python
    3.11, wait_for can swallow a cancellation that arrives as the event is set."""
    try:
        async with asyncio.timeout(timeout_s):
            await event.wait()
    except TimeoutError:
        pass


class NoOffsetForPartitionError(KafkaError):
    """A partition has no position and auto_offset_reset is "none": seek() it first."""


class _Completed:
    """A fetch answer's records for one partition, buffered raw and decoded batch by batch."""

    __slots__ = (
        "aborted",
        "batch_next",
        "batches",
        "data",
        "epoch",
        "generation",
        "index",
        "records",
        "st",
        "taken",
    )

    def __init__(self, st: PartitionState, data: bytes | memoryview,
                 batches: list[tuple[int, BatchHeader]]) -> None:
        self.st = st
        self.generation = st.generation
        self.data = data  # the answer's record set: bytes, or a view of the answer's frame
        self.batches = batches
        self.index = 0  # next batch to decode
        self.records: list[ConsumerRecord] = []  # decoded, not yet handed out
        self.taken = 0
        self.epoch = NO_EPOCH
        self.batch_next = -1  # the offset after the batch being handed out
        self.aborted: AbortedTransactions | None = None  # read_committed: what to drop


class Consumer:
    def __init__(self, bootstrap_servers: Bootstrap = "127.0.0.1:9092", *,
                 client_id: str = "epochlog-consumer",
                 group_id: str | None = None,
                 auto_offset_reset: str = LATEST,
                 client_rack: str | None = None,
                 fetch_min_bytes: int = 1,
                 fetch_max_wait_ms: int = 500,
                 fetch_max_bytes: int = 50 * 1024 * 1024,
                 max_partition_fetch_bytes: int = 4 * 1024 * 1024,
                 max_poll_records: int = 500,
                 prefetch_max_bytes: int = 32 * 1024 * 1024,
                 isolation_level: str = "read_uncommitted",
                 check_crcs: bool = True,
                 request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = 100,
                 reconnect_backoff_ms: int = 50,
                 reconnect_backoff_max_ms: int = 1000,
                 metadata_max_age_ms: int = 300_000,
                 socket_connection_setup_timeout_ms: int = 10_000,
                 socket_connection_setup_timeout_max_ms: int = 30_000,
                 group_instance_id: str | None = None,
                 session_timeout_ms: int = 45_000,
                 heartbeat_interval_ms: int = 3_000,
                 max_poll_interval_ms: int = 300_000,
                 partition_assignment_strategy: Sequence[str] = ("range", "cooperative-sticky"),
                 enable_auto_commit: bool = True,
                 auto_commit_interval_ms: int = 5_000,
                 security_protocol: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None) -> None:
        if group_id is None and group_instance_id is not None:
            raise ValueError("group_instance_id needs a group_id")
        if auto_offset_reset not in fetcher.RESET_POLICIES:
            raise ValueError(f"auto_offset_reset must be one of {fetcher.RESET_POLICIES}, "
                             f"not {auto_offset_reset!r}")
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {sorted(ISOLATION_LEVELS)}, "
                             f"not {isolation_level!r}")
        for name, value, low in (("fetch_min_bytes", fetch_min_bytes, 0),
                                 ("fetch_max_wait_ms", fetch_max_wait_ms, 0),
                                 ("fetch_max_bytes", fetch_max_bytes, 1),
                                 ("max_partition_fetch_bytes", max_partition_fetch_bytes, 1),
                                 ("max_poll_records", max_poll_records, 1),
                                 ("prefetch_max_bytes", prefetch_max_bytes, 1),
                                 ("request_timeout_ms", request_timeout_ms, 1),
                                 ("retry_backoff_ms", retry_backoff_ms, 0),
                                 ("metadata_max_age_ms", metadata_max_age_ms, 0)):
            if value < low:
                raise ValueError(f"{name} must be at least {low}, not {value}")
        if request_timeout_ms <= fetch_max_wait_ms:
            raise ValueError(f"request_timeout_ms ({request_timeout_ms}) must exceed "
                             f"fetch_max_wait_ms ({fetch_max_wait_ms})")
        self.auto_offset_reset = auto_offset_reset
        self.client_rack = client_rack
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.prefetch_max_bytes = prefetch_max_bytes
        self.isolation_level = ISOLATION_LEVELS[isolation_level]
        self.check_crcs = check_crcs
        self.retry_backoff_ms = retry_backoff_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.counters = fetcher.ConsumerCounters()
        self._cluster = ClusterClient(bootstrap_servers, client_id=client_id,
                                      request_timeout_ms=request_timeout_ms,
                                      retry_backoff_ms=retry_backoff_ms,
                                      reconnect_backoff_ms=reconnect_backoff_ms,
                                      reconnect_backoff_max_ms=reconnect_backoff_max_ms,
                                      metadata_max_age_ms=metadata_max_age_ms,
                                      socket_connection_setup_timeout_ms=(
                                          socket_connection_setup_timeout_ms),
                                      socket_connection_setup_timeout_max_ms=(
                                          socket_connection_setup_timeout_max_ms),
                                      ssl_context=context_for(security_protocol, ssl_context))
        self._states: dict[TopicPartition, PartitionState] = {}
        self._errors: dict[TopicPartition, tuple[str, int, int]] = {}
        # A corrupt batch found while decoding: raised by the next poll(), once (as Java's
        # consumer does); the position stays on the batch, so the poll after fetches it again.
        self._corrupt: dict[TopicPartition, str] = {}
        self._buffer: collections.deque[_Completed] = collections.deque()
        self._buffered_bytes = 0
        self._fetching: set[int] = set()  # brokers with a fetch in flight
        self._tasks: set[asyncio.Task[None]] = set()
        self._driver: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._data = asyncio.Event()
        self._fatal: BaseException | None = None
        self._closed = False
        self._validation_ok = True  # False once a broker too old for KIP-320 is seen
        self._iter_records: collections.deque[ConsumerRecord] = collections.deque()
        self._asked_topics: set[str] = set()  # topics some metadata refresh has asked about
        self._consumed: dict[TopicPartition, tuple[int, int]] = {}  # positions at poll() entry
        self._awaiting_committed: set[TopicPartition] = set()  # assign()ed with a group_id
        self._group: GroupMember | None = None
        if group_id is not None:
            self._group = GroupMember(
                self._cluster, _GroupSide(self), group_id=group_id,
                group_instance_id=group_instance_id,
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                max_poll_interval_ms=max_poll_interval_ms,
                partition_assignment_strategy=partition_assignment_strategy,
                enable_auto_commit=enable_auto_commit,
                auto_commit_interval_ms=auto_commit_interval_ms,
                request_timeout_ms=request_timeout_ms, retry_backoff_ms=retry_backoff_ms,
                metadata_max_age_ms=metadata_max_age_ms, client_rack=client_rack)

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Check that the cluster answers (a Metadata request) and start the driver."""
        await self._cluster.refresh([])
        self._ensure_driver()

    async def close(self, timeout_ms: int | None = None) -> None:
        """Stop all requests and close the connections. Idempotent. With a group, commits
        (auto-commit) and leaves first: each step bounded by request_timeout_ms, and the
        whole by timeout_ms if given."""
        if self._closed:
            return
        if self._group is not None:
            await self._group.close(timeout_ms)
        self._closed = True  # the driver stops at its next turn and spawns nothing more
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.cancel()
            await asyncio.gather(driver, return_exceptions=True)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
        self._buffer.clear()
        self._buffered_bytes = 0
        await self._cluster.close()

    def _ensure_driver(self) -> None:
        if self._closed:
            raise KafkaError("the consumer is closed")
        if self._driver is None:
            self._driver = asyncio.get_running_loop().create_task(self._drive())

    # ------------------------------------------------------------------ assignment and positions
    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions (replacing the previous assignment). Partitions kept
        keep their position; new ones start at auto_offset_reset (or need a seek with "none").
        Not with subscribe(): the group assigns then."""
        if self._group is not None and not self._group.manual:
            raise KafkaError("assign() and subscribe() are exclusive: unsubscribe() first")
        self._assign({TopicPartition(*tp) for tp in partitions},
                      from_committed=self._group is not None)

    def _assign(self, wanted: set[TopicPartition], from_committed: bool = False) -> None:
        """from_committed: new partitions wait (BLOCKED, no error) for the group's committed
        offsets, which the next poll() looks up (_start_positions)."""
        for tp in list(self._states):
            if tp not in wanted:
                del self._states[tp]
                self._errors.pop(tp, None)
        self._awaiting_committed &= wanted
        for tp in wanted:
            if tp not in self._states:
                st = self._states[tp] = PartitionState(tp)
                if from_committed:
                    st.state = State.BLOCKED
                    self._awaiting_committed.add(tp)
                    continue
                self._reset_or_block(st)
        self._drop_buffered(lambda c: c.st.tp not in wanted)
        self._cluster.request_update()
        self._wake.set()

    def _reset_or_block(self, st: PartitionState) -> None:
        """No position: auto_offset_reset, or with "none" an error until the user seeks."""
        if self.auto_offset_reset == NONE:
            st.state = State.BLOCKED
            self._errors[st.tp] = ("no_offset", -1, NO_EPOCH)
        else:
            st.reset(self.auto_offset_reset)

    def _start_positions(self, committed: Mapping[TopicPartition, tuple[int, int] | None]
                         ) -> None:
        """Positions of assign()ed partitions from the group's committed (offset, epoch), seeked
        so as to be validated (KIP-320); auto_offset_reset where nothing is committed."""
        for tp, pair in committed.items():
            st = self._states.get(tp)
            if tp not in self._awaiting_committed or st is None:
                continue  # unassigned or seeked meanwhile
            self._awaiting_committed.discard(tp)
            if pair is not None:
                self.seek(tp, pair[0], pair[1] if pair[1] >= 0 else None)
            else:
                self._reset_or_block(st)
                self._data.set()
        self._wake.set()

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    # ------------------------------------------------------------------ the group
    def subscribe(self, topics: Iterable[str] | None = None, *,
                  pattern: str | re.Pattern[str] | None = None,
                  listener: RebalanceListener | None = None) -> None:
        """Join group_id and read the partitions it assigns of these topics, or of every topic
        whose whole name matches pattern (checked every metadata_max_age_ms). The group is
        joined inside the next poll(); listener hears of partitions revoked, assigned and lost."""
        group = self._require_group("subscribe()")
        if isinstance(topics, str):
            raise TypeError("subscribe takes a list of topics, not a string")
        group.subscribe(topics, pattern, listener)

    async def unsubscribe(self) -> None:
        """Give up the partitions (telling the listener) and leave the group."""
        await self._require_group("unsubscribe()").unsubscribe()

    def subscription(self) -> set[str]:
        return set(self._group.topics) if self._group is not None else set()

    async def commit(self, offsets: Mapping[TopicPartition, int | tuple[int, int]] | None = None
                     ) -> None:
        """Commit offsets (default: the position of every assigned partition, that is, after
        every record poll() returned) with their leader epochs. An int offset is committed with
        epoch -1 (unknown). Raises CommitFailedError if the group rebalanced since our
        generation."""
        group = self._require_group("commit()")
        if offsets is None:
            chosen = self.next_offsets()
        else:
            chosen = {TopicPartition(*tp): (v, NO_EPOCH) if isinstance(v, int) else
                      (int(v[0]), int(v[1])) for tp, v in offsets.items()}
        await group.commit(chosen)

    async def committed(self, partitions: Iterable[TopicPartition]
                        ) -> dict[TopicPartition, tuple[int, int] | None]:
        """The group's committed (offset, leader epoch) per partition; None if none."""
        return await self._require_group("committed()").committed(
            TopicPartition(*tp) for tp in partitions)

    def group_metadata(self) -> dict[str, Any]:
        """Member id, generation, protocol, coordinator and rebalance count."""
        return self._require_group("group_metadata()").metrics()

    def _require_group(self, what: str) -> GroupMember:
        if self._group is None:
            raise KafkaError(f"{what} needs a group_id")
        return self._group

    def consumed(self) -> dict[TopicPartition, tuple[int, int]]:
        """Positions as of the latest poll()'s start: after the records the application had
        been handed before it polled again, hence processed (what auto-commit commits)."""
        return {tp: v for tp, v in self._consumed.items() if tp in self._states}

    def seek(self, partition: TopicPartition, offset: int, leader_epoch: int | None = None
             ) -> None:
        """Read partition from offset next. With leader_epoch (the epoch of the record before
        offset, as next_offsets() gives it), the position is first validated against the leader's
        log (KIP-320), so a truncation since then is detected rather than read past."""
        if offset < 0:
            raise ValueError(f"offset must be >= 0, not {offset}")
        st = self._state(partition)
        st.seek(offset, NO_EPOCH if leader_epoch is None else leader_epoch,
                validate=self._validation_ok)
        if st.awaiting_metadata_epoch != NO_EPOCH:
            self._cluster.request_update()  # the epoch is newer than our metadata's
        self._moved(st)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._states):
            st = self._state(tp)
            st.reset(EARLIEST)
            self._moved(st)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._states):
            st = self._state(tp)
            st.reset(LATEST)
            self._moved(st)

    def pause(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = True

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._state(tp).paused = False
        self._wake.set()

    async def position(self, partition: TopicPartition, timeout_ms: int = 30_000) -> int:
        """The offset of the next record poll() returns for partition, once it is known (a
        reset may have to ask the leader first)."""
        st = self._state(partition)
        self._ensure_driver()
        if st.tp in self._awaiting_committed and self._group is not None:
            await self._group.start_from_committed()
        deadline = asyncio.get_running_loop().time() + timeout_ms / 1000
        while st.state is State.RESET or st.state is State.BLOCKED:
            self._raise_errors()
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                raise KafkaError(f"position of {partition.topic}-{partition.partition} not "
                                 f"known within {timeout_ms} ms")
            self._data.clear()
            await _wait(self._data, min(remaining, 0.05))
        return st.position

    def next_offsets(self) -> dict[TopicPartition, tuple[int, int]]:
        """(offset, leader epoch) of the next record per partition with a known position: what to
        commit or store, and to pass back to seek(tp, offset, leader_epoch)."""
        return {tp: (st.position, st.position_epoch) for tp, st in self._states.items()
                if st.state is not State.RESET and st.position >= 0}

    # ------------------------------------------------------------- offsets of the logs
    async def beginning_offsets(self, partitions: Iterable[TopicPartition]
                                ) -> dict[TopicPartition, int]:
        """The first offset of each partition (its log start), assigned or not, as aiokafka's
        and kafka-python's beginning_offsets."""
        found = await self._list_offsets(dict.fromkeys(partitions, EARLIEST_TIMESTAMP))
        return {tp: r.offset for tp, r in found.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]
                          ) -> dict[TopicPartition, int]:
        """The offset after the last record of each partition, assigned or not: its high
        watermark, or with isolation_level="read_committed" its last stable offset (as Kafka's
        endOffsets): where a consumer that read everything stands."""
        found = await self._list_offsets(dict.fromkeys(partitions, LATEST_TIMESTAMP))
        return {tp: r.offset for tp, r in found.items()}

    async def offsets_for_times(self, timestamps: Mapping[TopicPartition, int]
                                ) -> dict[TopicPartition, ListOffsetsResult | None]:
        """For each partition, the first record whose timestamp is at or after the one given
        (ms since the epoch): its offset, timestamp and leader epoch (kafka-python's
        OffsetAndTimestamp fields); None where no record is that late."""
        for tp, ts in timestamps.items():
            if ts < 0:
                raise ValueError(f"{tp.topic}-{tp.partition}: the timestamp to look up must not "
                                 f"be negative, not {ts}")
        found = await self._list_offsets(dict(timestamps))
        return {tp: r if r.offset >= 0 else None for tp, r in found.items()}

    async def _list_offsets(self, timestamps: dict[TopicPartition, int]
                            ) -> dict[TopicPartition, ListOffsetsResult]:
        if self._closed:
            raise KafkaError("the consumer is closed")
        return await list_offsets(
            self._cluster, {TopicPartition(*tp): t for tp, t in timestamps.items()},
            read_committed=self.isolation_level == READ_COMMITTED,
            backoff_s=self.retry_backoff_ms / 1000)

    def metrics(self) -> dict[str, Any]:
        """Counters since start, and the broker each partition is read from."""
        c = self.counters
        return {"records_received": c.records_received, "bytes_received": c.bytes_received,
                "fetch_requests": c.fetch_requests, "retries": c.retries,
                "fenced_leader_epoch": c.fenced_leader_epoch,
                "unknown_leader_epoch": c.unknown_leader_epoch,
                "truncations_detected": c.truncations_detected, "offset_resets": c.offset_resets,
                "validations": c.validations, "corrupt_batches": c.corrupt_batches,
                "read_replica": dict(c.read_replica),
                "buffered_bytes": self._buffered_bytes}

    def _state(self, tp: TopicPartition) -> PartitionState:
        st = self._states.get(TopicPartition(*tp))
        if st is None:
            raise ValueError(f"{tp[0]}-{tp[1]} is not assigned to this consumer")
        return st

    def _moved(self, st: PartitionState) -> None:
        self._errors.pop(st.tp, None)
        self._corrupt.pop(st.tp, None)
        self._awaiting_committed.discard(st.tp)  # the user chose a position
        self._drop_buffered(lambda c: c.st is st)
        self._wake.set()

    def _drop_buffered(self, drop: Any) -> None:
        kept = collections.deque(c for c in self._buffer if not drop(c))
        if len(kept) != len(self._buffer):
            self._buffer = kept
            self._buffered_bytes = sum(len(c.data) for c in kept)

    # ------------------------------------------------------------------ poll
    async def poll(self, timeout_ms: int = 0, max_records: int | None = None
                   ) -> list[ConsumerRecord]:
        """Records fetched since the last poll, at most max_records (default max_poll_records),
        waiting up to timeout_ms for some. Raises LogTruncationError, OffsetOutOfRangeError or
        NoOffsetForPartitionError for partitions the user must seek (until they are seeked)."""
        limit = self.max_poll_records if max_records is None else max_records
        return await self._poll(lambda: self._drain(limit), timeout_ms)

    async def poll_batches(self, timeout_ms: int = 0, max_bytes: int | None = None
                           ) -> list[FetchedBatch]:
        """Whole record batches fetched since the last poll, CRC-checked and decompressed but
        not decoded (see FetchedBatch), about max_bytes of records at most (default
        max_partition_fetch_bytes; always at least one batch), waiting up to timeout_ms for
        some. For readers that decode records in bulk (epochlog.pipeline builds Arrow columns
        from them); the position moves past each batch handed out, so next_offsets() and
        seek() work as with poll(), and so do its errors. Control batches are stepped over."""
        limit = self.max_partition_fetch_bytes if max_bytes is None else max_bytes
        if limit < 1:
            raise ValueError(f"max_bytes must be at least 1, not {limit}")
        return await self._poll(lambda: self._drain_batches(limit), timeout_ms)

    async def _poll(self, drain: Callable[[], list[_T]], timeout_ms: int) -> list[_T]:
        self._ensure_driver()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_ms / 1000
        group = self._group
        if group is not None:
            self._consumed = self.next_offsets()
        while True:
            if group is not None:
                await group.poll_hook(deadline)
            self._raise_errors()
            records = drain()
            if records:
                return records
            remaining = deadline - loop.time()
            if remaining <= 0:
                await asyncio.sleep(0)  # let the driver run even if poll(0) is called in a loop
                return records
            self._data.clear()
            # A member goes round at least every GROUP_POLL_S: its rejoin, auto-commit and
            # metadata checks happen there, and a long poll() counts as polling
            await _wait(self._data, remaining if group is None else min(remaining, GROUP_POLL_S))

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self

    async def __anext__(self) -> ConsumerRecord:
        while not self._iter_records:
            if self._closed:
                raise StopAsyncIteration
            self._iter_records.extend(await self.poll(timeout_ms=1000))
        return self._iter_records.popleft()

    def _raise_errors(self) -> None:
        if self._fatal is not None:
            raise KafkaError(f"the consumer's driver failed: {self._fatal!r}") from self._fatal
        if self._corrupt:
            corrupt, self._corrupt = self._corrupt, {}
            raise CorruptMessageError("; ".join(corrupt[tp] for tp in sorted(corrupt)))
        if not self._errors:
            return
        truncated = {tp: (offset, epoch) for tp, (kind, offset, epoch) in self._errors.items()
                     if kind == "truncation"}
        if truncated:
            raise LogTruncationError(truncated)
        out_of_range = sorted(f"{tp.topic}-{tp.partition} at {offset}"
                              for tp, (kind, offset, _) in self._errors.items()
                              if kind == "out_of_range")
        if out_of_range:
            raise OffsetOutOfRangeError("fetch offset out of range and auto_offset_reset is "
                                        "none: " + ", ".join(out_of_range))
        missing = sorted(f"{tp.topic}-{tp.partition}" for tp in self._errors)
        raise NoOffsetForPartitionError("no position and auto_offset_reset is none; seek() "
                                        "first: " + ", ".join(missing))

    def _drain(self, limit: int) -> list[ConsumerRecord]:
        out: list[ConsumerRecord] = []
        buffer = self._buffer
        while buffer and len(out) < limit:
            c = buffer[0]
            st = c.st
            if c.generation != st.generation or self._states.get(st.tp) is not st:
                buffer.popleft()
                self._buffered_bytes -= len(c.data)
                continue
            self._take(c, out, limit)
            if c.index >= len(c.batches) and c.taken >= len(c.records):
                buffer.popleft()
                self._buffered_bytes -= len(c.data)
        if out:
            self.counters.records_received += len(out)
            self._wake.set()  # the buffer shrank: the driver may prefetch again
        return out

    def _drain_batches(self, max_bytes: int) -> list[FetchedBatch]:
        out: list[FetchedBatch] = []
        size = 0
        buffer = self._buffer
        while buffer and size < max_bytes:
            c = buffer[0]
            st = c.st
            if c.generation != st.generation or self._states.get(st.tp) is not st:
                buffer.popleft()
                self._buffered_bytes -= len(c.data)
                continue
            if c.taken < len(c.records):
                # poll() decoded this batch and handed out part of it: the rest goes out raw,
                # from the position on (FetchedBatch.first_offset)
                c.records, c.taken = [], 0
                c.index -= 1
            if c.index < len(c.batches):
                pos, header = c.batches[c.index]
                c.index += 1
                batch = self._fetched_batch(c, pos, header)
                if batch is False:  # corrupt: the next poll raises (see _corrupt_batch)
                    break
                if batch is not None:
                    out.append(batch)
                    size += len(batch.records)
                    self.counters.records_received += batch.next_offset - batch.first_offset
                if header.next_offset > st.position:
                    st.position = header.next_offset
                    st.position_epoch = header.partition_leader_epoch
            if c.index >= len(c.batches):
                buffer.popleft()
                self._buffered_bytes -= len(c.data)
        if out:
            self._wake.set()  # the buffer shrank: the driver may prefetch again
        return out

    def _fetched_batch(self, c: _Completed, pos: int, header: BatchHeader
                       ) -> FetchedBatch | None | Literal[False]:
        """The batch at pos, checked and decompressed; None for a control batch or one wholly
        before the position, False if it is corrupt."""
        st = c.st
        if c.aborted is not None and c.aborted.drops(header, c.data, pos):
            return None
        if header.attributes & CONTROL_MASK or header.next_offset <= st.position:
            return None
        data = c.data
        if type(data) is not bytes:
            data, pos = bytes(data[pos:pos + header.size]), 0  # this batch's one copy
        try:
            if self.check_crcs:
                check(data, pos)
            codec = header.attributes & COMPRESSION_MASK
            view = memoryview(data)[pos + BATCH_HEADER_BYTES:pos + header.size]
            records: bytes | memoryview = decompress(codec, view) if codec else view
        except CorruptBatch as exc:
            self._corrupt_batch(c, header, exc)
            return False
        return FetchedBatch(
            st.tp.topic, st.tp.partition, header.base_offset, header.next_offset,
            max(header.base_offset, st.position), header.partition_leader_epoch,
            1 if header.attributes & TIMESTAMP_TYPE_MASK else 0, header.base_timestamp,
            header.max_timestamp, header.record_count, records)

    def _take(self, c: _Completed, out: list[ConsumerRecord], limit: int) -> None:
        """Move records of c into out, decoding batches as needed, advancing the position."""
        st = c.st
        while len(out) < limit:
            if c.taken < len(c.records):
                room = limit - len(out)
                chunk = c.records[c.taken:c.taken + room]
                c.taken += len(chunk)
                out.extend(chunk)
                st.position = chunk[-1].offset + 1 if c.taken < len(c.records) else \
                    max(chunk[-1].offset + 1, c.batch_next)  # a compacted batch's tail gap
                st.position_epoch = c.epoch
                continue
            if c.index >= len(c.batches):
                return
            pos, header = c.batches[c.index]
            c.index += 1
            records = self._decode(c, pos, header)
            if records is None:  # corrupt: the position stays on it (see _corrupt_batch)
                return
            c.records = records
            c.taken = 0
            c.epoch = header.partition_leader_epoch
            c.batch_next = header.next_offset
            if not c.records and header.next_offset > st.position:
                # a control batch, or one wholly before the position: step over it
                st.position = header.next_offset
                st.position_epoch = header.partition_leader_epoch

    def _decode(self, c: _Completed, pos: int, header: BatchHeader
                ) -> list[ConsumerRecord] | None:
        """The batch's records from the position on; None if the batch is corrupt."""
        st = c.st
        if c.aborted is not None and c.aborted.drops(header, c.data, pos):
            return []
        if header.attributes & CONTROL_MASK or header.next_offset <= st.position:
            return []
        topic, partition = st.tp
        data = c.data
        if type(data) is not bytes:
            # Keys and values are sliced out of bytes: this batch's one copy, made just before
            # it is decoded (while it is in the cache), from the frame it arrived in.
            data, pos = bytes(data[pos:pos + header.size]), 0
        try:
            if self.check_crcs:
                check(data, pos)  # CRC, before either decoder trusts a byte
            codec = header.attributes & COMPRESSION_MASK
            if codec:
                payload = decompress(codec, memoryview(data)[pos + BATCH_HEADER_BYTES:
                                                             pos + header.size])
                fast = decode_uniform(payload, 0, len(payload), header, topic, partition)
            else:
                fast = decode_uniform(data, pos + BATCH_HEADER_BYTES, pos + header.size,
                                      header, topic, partition)
            if fast is not None:
                if header.base_offset < st.position:
                    return fast[st.position - header.base_offset:]
                return fast
            _, records = decode_batch(data, pos, verify_crc=self.check_crcs)
        except CorruptBatch as exc:
            # The bytes are bad on the wire or on the broker. As Java's consumer (check.crcs):
            # the records before it were handed out, the next poll() raises, and the position
            # stays on the batch so a later poll() fetches it again (or the user seeks past).
            self._corrupt_batch(c, header, exc)
            return None
        epoch = header.partition_leader_epoch
        ts_type = 1 if header.attributes & TIMESTAMP_TYPE_MASK else 0
        cr = ConsumerRecord
        if header.base_offset < st.position:
            position = st.position
            return [cr(topic, partition, r.offset, r.timestamp, ts_type, r.key, r.value,
                       r.headers, epoch) for r in records if r.offset >= position]
        return [cr(topic, partition, r.offset, r.timestamp, ts_type, r.key, r.value, r.headers,
                   epoch) for r in records]

    def _corrupt_batch(self, c: _Completed, header: BatchHeader, exc: CorruptBatch) -> None:
        st = c.st
        what = (f"{st.tp.topic}-{st.tp.partition}: the record batch at offset "
                f"{header.base_offset} is corrupt ({exc}); poll() again to fetch it again, or "
                f"seek past offset {header.last_offset} to skip it")
        log.warning("%s", what)
        self.counters.corrupt_batches += 1
        self._corrupt[st.tp] = what
        c.index = len(c.batches)
        st.moved(State.FETCH)  # fetch again from the position; what is in flight is stale
        st.not_before = fetcher.monotonic() + self.retry_backoff_ms / 1000
        self._data.set()

    # ------------------------------------------------------------------ the driver
    async def _drive(self) -> None:
        try:
            while not self._closed:
                self._wake.clear()
                await self._turn()
                await self._sleep()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug: make it visible from poll() rather than hang
            log.exception("consumer driver failed")
            self._fatal = exc
            self._data.set()

    async def _sleep(self) -> None:
        now_s = fetcher.monotonic()
        wait = DRIVER_IDLE_S_MAX
        if self._states:
            wait = min(wait, self._cluster.update_due_in())
        for st in self._states.values():
            if st.not_before > now_s and not st.in_flight:
                wait = min(wait, st.not_before - now_s)
        if wait > 0:
            await _wait(self._wake, wait)

    async def _turn(self) -> None:
        if not self._states:
            return
        # A partition waiting for newer metadata, or with no leader (metadata showed it offline,
        # e.g. between a dead leader's fencing and the next election): ask again, else nothing
        # would until metadata_max_age_ms and the partition would sit unread that long.
        if any(st.awaiting_metadata_epoch != NO_EPOCH or st.leader < 0
               for st in self._states.values()):
            self._cluster.request_update()  # served once per retry_backoff_ms
        try:
            topics = sorted({tp.topic for tp in self._states})
            if not self._asked_topics.issuperset(topics):
                # Topics never asked about (a new assignment): a first question, not a retry,
                # so no backoff (retry_backoff_ms after start()'s refresh cost 100 ms per assign).
                self._asked_topics.update(topics)
                await self._cluster.refresh(topics)
                self._apply_metadata()
            elif await self._cluster.maybe_update(topics):
                self._apply_metadata()
        except NETWORK_ERRORS as exc:
            log.debug("metadata refresh failed: %s", exc)
        now_s = fetcher.monotonic()
        self._start_resets(now_s)
        self._start_validations(now_s)
        if self._buffered_bytes < self.prefetch_max_bytes:
            self._start_fetches(now_s)

    def _spawn(self, coro: Any) -> None:
        if self._closed:
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._fatal = task.exception()
            log.error("consumer request task failed", exc_info=task.exception())
            self._data.set()
        self._wake.set()

    def _apply_metadata(self) -> None:
        cluster = self._cluster
        for tp, st in self._states.items():
            view = cluster.partitions.get((tp.topic, tp.partition))
            if view is None:
                if cluster.topic_errors.get(tp.topic, 0):
                    cluster.request_update()
                continue
            if fetcher.on_metadata(st, view.leader, view.leader_epoch, self._validation_ok):
                self._drop_buffered(lambda c, st=st: c.st is st)
                log.info("%s-%d: leader is now broker %d at epoch %d; validating position %d "
                         "(epoch %d)", tp.topic, tp.partition, view.leader, view.leader_epoch,
                         st.position, st.position_epoch)
            if st.preferred_replica >= 0 and (st.preferred_replica not in cluster.brokers
                                              or st.preferred_replica not in view.replicas
                                              or st.preferred_replica in view.offline):
                log.info("%s-%d: preferred read replica %d is gone; reading from the leader",
                         tp.topic, tp.partition, st.preferred_replica)
                st.preferred_replica = -1

    def _backoff(self, st: PartitionState, action: fetcher.Action) -> None:
        if action.refresh_metadata:
            self._cluster.request_update()
        if action.backoff:
            self.counters.retries += 1
            st.not_before = fetcher.monotonic() + self.retry_backoff_ms / 1000
        if action.log:
            log.info("%s", action.log)
        if action.error is not None:
            kind, offset, epoch = action.error
            self._errors[st.tp] = (kind, offset, epoch)
            st.state = State.BLOCKED
            self._data.set()

    def _by_leader(self, wanted: State, now_s: float) -> dict[int, list[PartitionState]]:
        groups: dict[int, list[PartitionState]] = {}
        for st in self._states.values():
            if st.state is wanted and st.ready(now_s) and \
                    st.awaiting_metadata_epoch == NO_EPOCH and self._cluster.node_ready(st.leader):
                groups.setdefault(st.leader, []).append(st)
        return groups

    # ------------------------------------------------------------------ resets (ListOffsets)
    def _start_resets(self, now_s: float) -> None:
        for node, sts in self._by_leader(State.RESET, now_s).items():
            for st in sts:
                st.in_flight = True
            self._spawn(self._reset(node, sts))

    async def _reset(self, node: int, sts: list[PartitionState]) -> None:
        sent = {st.tp: st.generation for st in sts}
        topics: dict[str, list[ListOffsetsPartition]] = {}
        for st in sts:
            topics.setdefault(st.tp.topic, []).append(ListOffsetsPartition(
                partition_index=st.tp.partition, current_leader_epoch=st.leader_epoch,
                timestamp=EARLIEST_TIMESTAMP if st.reset_policy == EARLIEST else LATEST_TIMESTAMP))
        request = ListOffsetsRequest(replica_id=CONSUMER_REPLICA_ID,
                                     isolation_level=self.isolation_level,
                                     topics=[ListOffsetsTopic(name=t, partitions=ps)
                                             for t, ps in topics.items()])
        try:
            answer: ListOffsetsResponse = await self._cluster.request_broker(
                node, ApiKey.LIST_OFFSETS, request)
        except NETWORK_ERRORS as exc:
            self._network_failed(node, sts, sent, exc)
            return
        for topic in answer.topics:
            for p in topic.partitions:
                cur = self._current(TopicPartition(topic.name, p.partition_index), sent)
                if cur is None:
                    continue
                st = cur
                st.in_flight = False
                if p.error_code:
                    self._count_epoch_error(p.error_code)
                    self._backoff(st, fetcher.on_list_offsets_error(st, p.error_code))
                    continue
                self.counters.offset_resets += 1
                st.position, st.position_epoch = p.offset, p.leader_epoch
                st.moved(State.FETCH)
                log.info("%s-%d: reset to %s offset %d (leader epoch %d)", topic.name,
                         p.partition_index, st.reset_policy, p.offset, p.leader_epoch)
                self._data.set()  # position() waits for this
        self._clear_in_flight(sts, sent)

    # ------------------------------------------------------------------ validation (KIP-320)
    def _start_validations(self, now_s: float) -> None:
        for node, sts in self._by_leader(State.VALIDATE, now_s).items():
            for st in sts:
                st.in_flight = True
            self._spawn(self._validate(node, sts))

    async def _validate(self, node: int, sts: list[PartitionState]) -> None:
        sent = {st.tp: (st.generation) for st in sts}
        try:
            conn = await self._cluster.connection(node)
            if not self._epochs_supported(conn.server_versions):
                self._skip_validation(sts, sent, node)
                return
            topics: dict[str, list[OffsetForLeaderPartition]] = {}
            for st in sts:
                topics.setdefault(st.tp.topic, []).append(OffsetForLeaderPartition(
                    partition=st.tp.partition, current_leader_epoch=st.leader_epoch,
                    leader_epoch=st.position_epoch))
            request = OffsetForLeaderEpochRequest(
                replica_id=CONSUMER_REPLICA_ID,
                topics=[OffsetForLeaderTopic(topic=t, partitions=ps) for t, ps in topics.items()])
            answer: OffsetForLeaderEpochResponse = await self._cluster.request(conn, 23, request)
        except NETWORK_ERRORS as exc:
            self._network_failed(node, sts, sent, exc)
            return
        self.counters.validations += 1
        for topic in answer.topics:
            for p in topic.partitions:
                cur = self._current(TopicPartition(topic.topic, p.partition), sent)
                if cur is None or cur.state is not State.VALIDATE:
                    continue
                st = cur
                st.in_flight = False
                self._count_epoch_error(p.error_code)
                position, generation = st.position, st.generation
                action = fetcher.on_validation(st, p.error_code, p.leader_epoch, p.end_offset,
                                               self.auto_offset_reset)
                if action.error is not None or st.position < position or \
                        st.generation != generation:
                    self.counters.truncations_detected += 1
                if action.error is not None:
                    log.warning("%s-%d: log truncation detected: position %d (epoch %d) is past "
                                "the leader's log, which diverges at offset %d (epoch %d); "
                                "raising LogTruncationError (auto_offset_reset is none)",
                                st.tp.topic, st.tp.partition, position, st.position_epoch,
                                action.error[1], action.error[2])
                if action.log:
                    log.warning("%s", action.log)
                    action = action._replace(log=None)
                self._backoff(st, action)
        self._clear_in_flight(sts, sent)

    def _epochs_supported(self, versions: dict[int, tuple[int, int]]) -> bool:
        fetch = versions.get(1, (0, -1))[1]
        validate = versions.get(23, (0, -1))[1]
        return fetch >= FETCH_EPOCH_VERSION_MIN and validate >= VALIDATE_VERSION_MIN

    def _skip_validation(self, sts: list[PartitionState], sent: dict[TopicPartition, int],
                         node: int) -> None:
        if self._validation_ok:
            log.warning("broker %d is too old for KIP-320 (needs Fetch v%d and "
                        "OffsetForLeaderEpoch v%d): positions are not validated", node,
                        FETCH_EPOCH_VERSION_MIN, VALIDATE_VERSION_MIN)
        self._validation_ok = False
        for st in sts:
            if self._current(st.tp, sent) is st:
                st.in_flight = False
                st.state = State.FETCH

    # ------------------------------------------------------------------ fetching
    def _start_fetches(self, now_s: float) -> None:
        groups: dict[int, list[PartitionState]] = {}
        for st in self._states.values():
            if st.fetchable(now_s):
                node = st.read_from(now_s)
                if node not in self._fetching and self._cluster.node_ready(node):
                    groups.setdefault(node, []).append(st)
        for node, sts in groups.items():
            self._fetching.add(node)
            for st in sts:
                st.in_flight = True
                self.counters.read_replica[st.tp] = node
            self._spawn(self._fetch(node, sts))

    async def _fetch(self, node: int, sts: list[PartitionState]) -> None:
        sent = {st.tp: st.generation for st in sts}
        offsets = {st.tp: st.fetch_offset for st in sts}
        topics: dict[str, list[FetchPartition]] = {}
        for st in sts:
            topics.setdefault(st.tp.topic, []).append(FetchPartition(
                partition=st.tp.partition, current_leader_epoch=st.leader_epoch,
                fetch_offset=st.fetch_offset, partition_max_bytes=self.max_partition_fetch_bytes))
        request = FetchRequest(replica_id=CONSUMER_REPLICA_ID, max_wait_ms=self.fetch_max_wait_ms,
                               min_bytes=self.fetch_min_bytes, max_bytes=self.fetch_max_bytes,
                               isolation_level=self.isolation_level, session_id=0,
                               session_epoch=-1, rack_id=self.client_rack or "",
                               topics=[FetchTopic(topic=t, partitions=ps)
                                       for t, ps in topics.items()])
        try:
            self.counters.fetch_requests += 1
            answer: FetchResponse = await self._cluster.request_broker(node, ApiKey.FETCH, request)
        except NETWORK_ERRORS as exc:
            self._network_failed(node, sts, sent, exc)
            return
        finally:
            self._fetching.discard(node)
        if answer.error_code:
            log.info("fetch from broker %d failed: error %d; retrying", node, answer.error_code)
            for st in sts:
                if self._current(st.tp, sent) is st:
                    st.in_flight = False
                    self._backoff(st, fetcher.Action(refresh_metadata=True, backoff=True))
            return
        now_s = fetcher.monotonic()
        got = False
        for topic in answer.responses:
            for p in topic.partitions:
                tp = TopicPartition(topic.topic, p.partition_index)
                cur = self._current(tp, sent)
                if cur is None or cur.fetch_offset != offsets[tp]:
                    continue
                st = cur
                st.in_flight = False
                if p.error_code:
                    self._count_epoch_error(p.error_code)
                    action = fetcher.on_fetch_error(
                        st, p.error_code, node, p.log_start_offset, p.high_watermark,
                        self.auto_offset_reset, self._validation_ok, now_s)
                    if st.generation != sent[tp]:
                        self._drop_buffered(lambda c, st=st: c.st is st)
                    self._backoff(st, action)
                    continue
                self._follow_preferred(st, node, p.preferred_read_replica, now_s)
                got = self._buffer_records(st, p.records, p.aborted_transactions) or got
        self._clear_in_flight(sts, sent)
        if got and self._buffered_bytes < self.prefetch_max_bytes and not self._closed:
            # The next Fetch leaves before poll() decodes this one's records, so the broker
            # reads and sends it while we decode (the driver would only get to it after).
            self._start_fetches(fetcher.monotonic())
        if got:
            self._data.set()

    def _follow_preferred(self, st: PartitionState, node: int, preferred: int,
                          now_s: float) -> None:
        if preferred < 0 or preferred == node:
            return
        if preferred not in self._cluster.brokers:
            self._cluster.request_update()
            return
        if st.preferred_replica != preferred:
            log.info("%s-%d: reading from preferred replica %d (rack %s)", st.tp.topic,
                     st.tp.partition, preferred, self._cluster.brokers[preferred].rack)
        st.preferred_replica = preferred
        st.preferred_until = now_s + self.metadata_max_age_ms / 1000

    def _buffer_records(self, st: PartitionState, data: bytes | memoryview | None,
                        aborted: Sequence[Any] | None = None) -> bool:
        # Batch headers only: the next fetch offset is known without copying or decoding
        # anything (a view of the answer's frame is copied batch by batch in _decode).
        if not data:
            return False
        try:
            batches = list(iter_headers(data))
        except CorruptBatch as exc:
            log.warning("%s-%d: unreadable batch header at offset %d: %s; fetching again",
                        st.tp.topic, st.tp.partition, st.fetch_offset, exc)
            st.not_before = fetcher.monotonic() + self.retry_backoff_ms / 1000
            return False
        if not batches:
            return False  # only a cut-short batch: the broker sends the first batch whole
        next_offset = batches[-1][1].next_offset
        if next_offset <= st.fetch_offset:
            return False
        st.fetch_offset = next_offset
        self.counters.bytes_received += len(data)
        completed = _Completed(st, data, batches)
        if self.isolation_level == READ_COMMITTED and aborted:
            completed.aborted = AbortedTransactions((a.producer_id, a.first_offset)
                                                    for a in aborted)
        self._buffer.append(completed)
        self._buffered_bytes += len(data)
        return True

    # ------------------------------------------------------------------ helpers
    def _current(self, tp: TopicPartition, sent: dict[TopicPartition, int]
                 ) -> PartitionState | None:
        """tp's state if the request sent for it still applies (no seek or reset since)."""
        st = self._states.get(tp)
        if st is None or tp not in sent or st.generation != sent[tp]:
            return None
        return st

    def _clear_in_flight(self, sts: list[PartitionState], sent: dict[TopicPartition, int]) -> None:
        for st in sts:
            if self._current(st.tp, sent) is st:
                st.in_flight = False

    def _network_failed(self, node: int, sts: list[PartitionState],
                        sent: dict[TopicPartition, int], exc: BaseException) -> None:
        log.debug("request to broker %d failed: %r", node, exc)
        if not isinstance(exc, NodeNotReady):
            self._cluster.node_failed(node)
        for st in sts:
            if self._current(st.tp, sent) is st:
                st.in_flight = False
                if st.preferred_replica == node:
                    log.info("%s-%d: preferred replica %d failed; back to the leader",
                             st.tp.topic, st.tp.partition, node)
                    st.preferred_replica = -1
                    self.counters.read_replica[st.tp] = st.leader
                self._backoff(st, fetcher.Action(refresh_metadata=True, backoff=True))

    def _count_epoch_error(self, code: int) -> None:
        if code == ErrorCode.FENCED_LEADER_EPOCH:
            self.counters.fenced_leader_epoch += 1
        elif code == ErrorCode.UNKNOWN_LEADER_EPOCH:
            self.counters.unknown_leader_epoch += 1


class _GroupSide:
    """The part of a Consumer its group member may use (client.group.GroupConsumer): the
    member never reaches into the consumer itself."""

    def __init__(self, consumer: Consumer) -> None:
        self._consumer = consumer

    def group_assign(self, partitions: set[TopicPartition]) -> None:
        self._consumer._assign(partitions, from_committed=True)

    def assignment(self) -> set[TopicPartition]:
        return self._consumer.assignment()

    def consumed(self) -> dict[TopicPartition, tuple[int, int]]:
        return self._consumer.consumed()

    def next_offsets(self) -> dict[TopicPartition, tuple[int, int]]:
        return self._consumer.next_offsets()

    def awaiting_committed(self) -> set[TopicPartition]:
        return set(self._consumer._awaiting_committed)

    def start_positions(self, committed: Mapping[TopicPartition, tuple[int, int] | None]
                        ) -> None:
        self._consumer._start_positions(committed)

    def wake(self) -> None:
        self._consumer._data.set()
