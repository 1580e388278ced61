"""The asyncio producer: batching, compression, idempotence, KIP-359 fencing, back-pressure.

    async with Producer(bootstrap_servers="127.0.0.1:9092", acks="all") as producer:
        fut = await producer.send("orders", value=b"...", key=b"k")  # queued in its batch
        meta = await fut                                              # acknowledged
        meta = await producer.send_and_wait("orders", value=b"...")   # both at once
        await producer.flush()

Three ways to send, one path underneath, as Kafka's clients name them:
- `await send(...)` -> DeliveryFuture: returns as soon as the record is in its batch, waiting only
  while the buffer is full or the topic's metadata is unknown (together at most max_block_ms).
  Await the DeliveryFuture (or call flush) for the RecordMetadata. This is the `send` of Java's
  producer, kafka-python and aiokafka, so a loop of `await producer.send(...)` runs at full speed.
- `await send_and_wait(...)` -> RecordMetadata once the record is acknowledged (aiokafka's name).
  Awaiting each in turn sends one record per request: the slow way to send many.
- `send_nowait(...)` -> DeliveryFuture, synchronously, for code that cannot await: it never
  waits; it raises BufferFullError when the buffer is full, and UnknownTopicOrPartitionError
  (after starting a metadata fetch) for a topic whose metadata is not loaded yet
  (`await partitions_for(topic)` first). confluent-kafka's `produce()` in spirit.

Theory of operation
-------------------
Records go into per-partition batches (client.accumulator). One sender task drains batches that
are full, have lingered `linger_ms`, or are being flushed, groups them per leader broker (one
batch per partition per request, at most `max_request_size` bytes of batches per request but
always at least one batch, as Java's producer does) and sends each group as one Produce request,
with at most `max_in_flight_requests_per_connection` requests waiting per broker. A record that
alone is bigger (with its batch header) than max_request_size or buffer_memory is refused when
it is sent, with RecordTooLargeError (MessageTooLargeError: Java's RecordTooLargeException).
Every partition entry carries the leader epoch from our metadata (KIP-359, Produce v9's tagged
field 359); a broker without the field ignores it. Answers:
- success, or DUPLICATE_SEQUENCE_NUMBER (a retry of a batch already written): the batch's
  records resolve to RecordMetadata;
- errors that say our metadata is stale (client.retriable: NOT_LEADER_OR_FOLLOWER,
  FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, LEADER_NOT_AVAILABLE, ...): metadata is refreshed
  and the batch retried after retry_backoff_ms;
- other retriable errors and lost connections: retried after the backoff;
- MESSAGE_TOO_LARGE (the broker's or topic's max message bytes is below our batch): a batch of
  several records is split in two halves that take its place, in order and with its sequences
  (client.accumulator), and sent again; one record too large fails with the error;
- OUT_OF_ORDER_SEQUENCE_NUMBER and UNKNOWN_PRODUCER_ID, as Java's idempotent producer handles
  them: when an earlier batch of the partition is still unresolved, the batch is simply retried;
  when it is the next one expected, the broker lost our state: the partition restarts its
  sequence under a bumped producer epoch and the batch is retried;
- anything else fails the batch's records with the error's exception.
Every retry stays within delivery_timeout_ms of the batch's creation; past it the records fail
with KafkaTimeoutError.

A leader that does not answer (frozen, wedged, cut off) costs the failover, not a timeout:
- batches are handed to a request only for a broker whose connection is set up. A connection is
  set up in the background within socket_connection_setup_timeout_ms (KIP-601, TCP and
  ApiVersions: client.connection), and while that goes on metadata is asked for each second, so
  batches not yet sent go to the new leader as soon as metadata names it;
- requests sent to a broker that then answers nothing for a second: metadata is asked for each
  second, and once it names a new leader (newer epoch) for a partition among them, the
  connection is given up and its batches retried there, as a request timeout would, only
  sooner. Java's producer waits out request_timeout_ms (30 s) there, librdkafka longer.

Memory: at most buffer_memory bytes of batches exist at once; send and send_and_wait wait for room
(at most max_block_ms), send_nowait refuses.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import ssl
import time
from collections.abc import AsyncIterator, Callable, Generator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from epochlog.protocol.apis.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from epochlog.protocol.compression import Compression
from epochlog.protocol.error_codes import ErrorCode, info
from epochlog.protocol.registry import APIS

from .accumulator import Accumulator, Batch, PartitionQueue, ProducerIdentity
from .cluster import Bootstrap, BrokerAddress, ClusterClient
from .connection import NoCommonVersion
from .errors import (
    BufferFullError,
    InvalidTxnStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    TransactionAbortedError,
    UnknownTopicOrPartitionError,
    error_for,
)
from .partitioner import partition_for_key
from .retriable import refresh_before_retry
from .security import context_for
from .transactions import TransactionManager, TxnState
from .types import RecordMetadata, TopicPartition

log = logging.getLogger("epochlog.producer")

E = ErrorCode
_PRODUCE = APIS[ApiKey.PRODUCE]
_INIT_PRODUCER_ID = APIS[ApiKey.INIT_PRODUCER_ID]
_SEQUENCE_ERRORS = frozenset({E.OUT_OF_ORDER_SEQUENCE_NUMBER, E.UNKNOWN_PRODUCER_ID})
_CODECS = {None: Compression.NONE, "none": Compression.NONE, "gzip": Compression.GZIP,
           "snappy": Compression.SNAPPY, "lz4": Compression.LZ4, "zstd": Compression.ZSTD}
IN_FLIGHT_IDEMPOTENT_MAX = 5  # the broker remembers the last 5 batches per producer
METADATA_WAIT_STEP_S = 0.05
# A leader that keeps us waiting this long (its connection setup, or a request with nothing
# answered since) gets metadata asked for as often, for as long: the failover that replaces a
# frozen leader shows there (KIP-580's retry.backoff.max.ms default, 1 s, is the pace Kafka's
# clients ask at when an answer keeps them waiting).
LEADER_SILENT_S = 1.0
SPLIT_LOG_TOPICS_MAX = 100  # topics whose first batch split gets an INFO line

Headers = Sequence[tuple[str, bytes | None]]
Partitioner = Callable[[bytes | None, list[int], list[int]], int]
Serializer = Callable[[Any], bytes | None]


class DeliveryFuture:
    """One record's delivery: await it for its RecordMetadata (or the error that failed it).

    A handle onto its batch's single future, so a record costs no asyncio.Future of its own."""

    __slots__ = ("_batch", "_index", "_timestamp")

    def __init__(self, batch: Batch, index: int, timestamp: int) -> None:
        self._batch = batch
        self._index = index
        self._timestamp = timestamp

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        future = self._batch.future
        if not future.done():
            yield from future.__await__()
        return self.result()

    def done(self) -> bool:
        return self._batch.future.done()

    def exception(self) -> BaseException | None:
        exc = self._batch.future.exception()  # InvalidStateError if not yet done
        if self._batch.children is None:
            return exc
        return self._batch.locate(self._index)[0].future.exception()

    def result(self) -> RecordMetadata:
        """The metadata; raises the delivery error, or InvalidStateError if not yet done."""
        self._batch.future.result()
        batch, index = self._batch, self._index
        if batch.children is not None:  # split: the record's outcome is its half's
            batch, index = batch.locate(index)
            batch.future.result()
        return RecordMetadata(
            batch.tp.topic, batch.tp.partition,
            batch.base_offset + index if batch.base_offset >= 0 else -1,
            batch.leader_epoch,
            batch.log_append_time if batch.log_append_time >= 0 else self._timestamp)

    def add_done_callback(self, fn: Callable[[DeliveryFuture], None]) -> None:
        self._batch.future.add_done_callback(lambda _: fn(self))


class _Topic:
    """What the producer knows of a topic: its partitions' queues and the sticky partition."""

    __slots__ = ("name", "queues", "sticky")

    def __init__(self, name: str) -> None:
        self.name = name
        self.queues: list[PartitionQueue] = []
        self.sticky = -1


class Producer:
    def __init__(self, bootstrap_servers: Bootstrap = "127.0.0.1:9092", *,
                 client_id: str = "epochlog-producer",
                 acks: Literal["all", 0, 1, -1] | str | int = "all",
                 enable_idempotence: bool | None = None,
                 compression_type: str | None = None,
                 batch_size: int = 16384,
                 linger_ms: float = 5,
                 max_in_flight_requests_per_connection: int = 5,
                 retries: int = 2**31 - 1,
                 retry_backoff_ms: int = 100,
                 delivery_timeout_ms: int = 120_000,
                 request_timeout_ms: int = 30_000,
                 buffer_memory: int = 32 * 1024 * 1024,
                 max_block_ms: int = 60_000,
                 max_request_size: int = 1024 * 1024,
                 metadata_max_age_ms: int = 300_000,
                 socket_connection_setup_timeout_ms: int = 10_000,
                 socket_connection_setup_timeout_max_ms: int = 30_000,
                 partitioner: str | Partitioner = "murmur2_sticky",
                 key_serializer: Serializer | None = None,
                 value_serializer: Serializer | None = None,
                 transactional_id: str | None = None,
                 transaction_timeout_ms: int = 60_000,
                 security_protocol: str = "PLAINTEXT",
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self._acks = _parse_acks(acks)
        if transactional_id is not None:  # Java: transactions need idempotence, so acks=all
            if enable_idempotence is False:
                raise ValueError("transactional_id needs enable_idempotence (not False)")
            if not transactional_id:
                raise ValueError("transactional_id must not be empty")
            if transaction_timeout_ms <= 0:
                raise ValueError(f"transaction_timeout_ms must be positive, not "
                                 f"{transaction_timeout_ms}")
            enable_idempotence = True
        if enable_idempotence is None:  # Java 3.x: on unless the settings conflict with it
            enable_idempotence = (self._acks == -1 and
                                  max_in_flight_requests_per_connection <= IN_FLIGHT_IDEMPOTENT_MAX
                                  and retries > 0)
        elif enable_idempotence:
            if self._acks != -1:
                raise ValueError(f"enable_idempotence=True needs acks='all', not {acks!r}")
            if max_in_flight_requests_per_connection > IN_FLIGHT_IDEMPOTENT_MAX:
                raise ValueError("enable_idempotence=True needs "
                                 "max_in_flight_requests_per_connection <= 5, not "
                                 f"{max_in_flight_requests_per_connection}")
            if retries <= 0:
                raise ValueError("enable_idempotence=True needs retries > 0")
        if compression_type not in _CODECS:
            raise ValueError(f"compression_type {compression_type!r} is not one of gzip, snappy, "
                             "lz4, zstd or None")
        for name, value in (("batch_size", batch_size), ("buffer_memory", buffer_memory),
                            ("max_in_flight_requests_per_connection",
                             max_in_flight_requests_per_connection),
                            ("delivery_timeout_ms", delivery_timeout_ms),
                            ("request_timeout_ms", request_timeout_ms),
                            ("max_request_size", max_request_size)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, not {value}")
        if linger_ms < 0 or retry_backoff_ms < 0 or max_block_ms < 0 or retries < 0:
            raise ValueError("linger_ms, retry_backoff_ms, max_block_ms and retries must not be "
                             "negative")
        if batch_size > buffer_memory:
            raise ValueError(f"batch_size ({batch_size}) exceeds buffer_memory ({buffer_memory})")
        if isinstance(partitioner, str) and partitioner not in ("murmur2_sticky",
                                                                "murmur2_round_robin"):
            raise ValueError(f"partitioner {partitioner!r} is not 'murmur2_sticky', "
                             "'murmur2_round_robin' or a callable")
        self.idempotent = bool(enable_idempotence)
        self.cluster = ClusterClient(bootstrap_servers, client_id=client_id,
                                     request_timeout_ms=request_timeout_ms,
                                     retry_backoff_ms=retry_backoff_ms,
                                     metadata_max_age_ms=metadata_max_age_ms,
                                     socket_connection_setup_timeout_ms=(
                                         socket_connection_setup_timeout_ms),
                                     socket_connection_setup_timeout_max_ms=(
                                         socket_connection_setup_timeout_max_ms),
                                     ssl_context=context_for(security_protocol, ssl_context))
        self._in_flight_max = max_in_flight_requests_per_connection
        self._retries = retries
        self._retry_backoff_s = retry_backoff_ms / 1000
        self._delivery_timeout_s = delivery_timeout_ms / 1000
        self._request_timeout_ms = request_timeout_ms
        self._max_block_s = max_block_ms / 1000
        self._max_request_size = max_request_size
        self._partitioner = partitioner
        self._key_serializer = key_serializer
        self._value_serializer = value_serializer
        self._identity = ProducerIdentity()
        self._transactional_id = transactional_id
        self._txn = None if transactional_id is None else TransactionManager(
            self.cluster, self._identity, transactional_id=transactional_id,
            transaction_timeout_ms=transaction_timeout_ms,
            retry_backoff_s=retry_backoff_ms / 1000, max_block_s=max_block_ms / 1000)
        self._pid_attempts = 0  # InitProducerId attempts so far (each retry asks another broker)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._acc: Accumulator | None = None
        self._open_acc: Accumulator | None = None  # the accumulator while records are taken
        self._clock: Callable[[], float] = time.monotonic  # the loop's, once started
        self._serializing = key_serializer is not None or value_serializer is not None
        self._codec = _CODECS[compression_type]
        self._batch_size = batch_size
        self._linger_s = linger_ms / 1000
        self._buffer_memory = buffer_memory
        self._topics: dict[str, _Topic] = {}
        self._round_robin = itertools.count()
        self._node_in_flight: dict[int, int] = {}
        # Leaders being dialled -> when metadata was last asked for on their account (see
        # _node_has_room); and how long the sender may sleep for their sake.
        self._dialling: dict[int, float] = {}
        self._silent: dict[int, float] = {}  # the same, for leaders connected but silent
        self._node_wait_s = float("inf")
        self._sender: asyncio.Task[None] | None = None
        self._requests: set[asyncio.Task[None]] = set()
        self._wakeup: asyncio.Future[None] | None = None
        self._memory_freed: asyncio.Event | None = None
        self._metadata_task: asyncio.Task[None] | None = None
        self._metadata_ready: asyncio.Event | None = None
        self._closing = False
        self._closed = False
        self._yield_due = False
        # Counters a user can read (and export): see metrics().
        self.records_sent = 0
        self.bytes_sent = 0
        self.retries_total = 0
        self.fenced_epoch_errors = 0
        self.unknown_epoch_errors = 0
        self.leaders_learned = 0  # KIP-951: new leaders taken from produce answers
        self.epoch_bumps = 0
        self.produce_requests = 0
        self.request_bytes_max_seen = 0  # the most bytes of batches one request carried
        self.batch_splits = 0
        self._split_topics: set[str] = set()  # topics whose first split was logged

    # ------------------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        """Connect to a bootstrap server and start the sender (done by `async with`)."""
        if self._acc is not None:
            return
        loop = self._loop = asyncio.get_running_loop()
        self._acc = Accumulator(batch_size=self._batch_size, linger_s=self._linger_s,
                                compression=self._codec, memory_max=self._buffer_memory,
                                new_future=loop.create_future, idempotent=self.idempotent,
                                identity=self._identity,
                                request_bytes_max=self._max_request_size)
        if self._txn is not None:
            self._acc.transactional = True
            self._acc.may_send = self._txn.may_send
        self._open_acc = self._acc
        self._clock = loop.time
        self._memory_freed = asyncio.Event()
        self._metadata_ready = asyncio.Event()
        await self.cluster.refresh([])  # brokers, and proof that the bootstrap works
        self._sender = loop.create_task(self._run(), name="epochlog-producer-sender")

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def flush(self, timeout_ms: int | None = None) -> None:
        """Send everything buffered now, and wait until each of it is answered (acknowledged or
        failed); KafkaTimeoutError if timeout_ms passes first."""
        acc = self._require_started()
        waiting = [b.future for b in acc.pending()]
        if not waiting:
            return
        acc.flushing += 1
        self._wake()
        try:
            done, pending = await asyncio.wait(
                waiting, timeout=None if timeout_ms is None else timeout_ms / 1000)
        finally:
            acc.flushing -= 1
        if pending:
            raise KafkaTimeoutError(f"flush: {len(pending)} batches unanswered after "
                                    f"{timeout_ms} ms")

    async def close(self, timeout_ms: int | None = None) -> None:
        """Stop taking records, send and wait for what is buffered (at most timeout_ms, default
        delivery_timeout_ms), then close the connections. Records still unanswered then fail
        with ProducerClosedError."""
        if self._closed:
            return
        txn = self._txn
        if txn is not None and self._acc is not None and txn.state in (
                TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR, TxnState.ABORTING):
            log.info("transactional id %s: aborting the open transaction at close",
                     txn.transactional_id)
            try:
                await self.abort_transaction()
            except KafkaError as exc:
                log.warning("transactional id %s: the abort at close failed (the coordinator "
                            "aborts it after transaction_timeout_ms): %s",
                            txn.transactional_id, exc)
        self._closing = True
        self._open_acc = None
        acc = self._acc
        if acc is not None:
            try:
                await self.flush(timeout_ms if timeout_ms is not None
                                 else int(self._delivery_timeout_s * 1000))
            except KafkaTimeoutError:
                log.warning("producer closed with records unanswered")
            for batch in list(acc.pending()):
                acc.failed(batch, ProducerClosedError("the producer closed before an answer"))
        self._closed = True
        tasks = [t for t in (self._sender, self._metadata_task, *self._requests) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.cluster.close()

    # ------------------------------------------------------------------------- transactions
    async def init_transactions(self) -> None:
        """Get the transactional id's producer id and a new epoch from its coordinator, which
        fences every older producer with the same id and completes or aborts what it left
        open. Once, before the first begin_transaction(); KafkaTimeoutError after max_block_ms
        (call again to resume)."""
        self._require_started()
        await self._require_txn("init_transactions()").init()

    def begin_transaction(self) -> None:
        """Open a transaction: records sent from now on are in it (no request is made)."""
        self._require_txn("begin_transaction()").begin()

    async def send_offsets_to_transaction(
            self, offsets: Mapping[TopicPartition, int | tuple[int, int]],
            group: str | Mapping[str, Any]) -> None:
        """Commit a consumer group's offsets in the open transaction: they take effect if it
        commits, and not at all if it aborts. offsets: partition -> offset, or (offset, leader
        epoch) as Consumer.commit() takes them. group: the group id, or better the consumer's
        `group_metadata()`, so that the group coordinator refuses the commit of a consumer that
        is no longer the member it was (KIP-447: a zombie's)."""
        txn = self._require_txn("send_offsets_to_transaction()")
        self._require_started()
        named = {TopicPartition(*tp): (v, -1) if isinstance(v, int) else (int(v[0]), int(v[1]))
                 for tp, v in offsets.items()}
        await txn.send_offsets(named, group)

    async def commit_transaction(self) -> None:
        """Send everything the transaction holds, wait for every answer, then commit it. If a
        record failed, raises that error and the transaction must be aborted."""
        txn = self._require_txn("commit_transaction()")
        self._require_started()
        if txn.state is TxnState.IN_TRANSACTION:
            txn.state = TxnState.COMMITTING
        elif txn.state is not TxnState.COMMITTING:  # COMMITTING: a commit that timed out
            txn.raise_failure()
            raise InvalidTxnStateError(f"commit_transaction() in state {txn.state.value}")
        await self._settle_transaction(txn)
        txn.raise_failure()  # a record or an added partition failed
        await txn.end(commit=True)

    async def abort_transaction(self) -> None:
        """Abort the open transaction: records not yet sent fail with TransactionAbortedError,
        those sent are written but never read by read_committed consumers. The producer is ready
        for the next transaction (after bumping its epoch, if a record's failure left a gap)."""
        txn = self._require_txn("abort_transaction()")
        self._require_started()
        if txn.state in (TxnState.IN_TRANSACTION, TxnState.ABORTABLE_ERROR,
                         TxnState.COMMITTING):
            txn.state = TxnState.ABORTING
        elif txn.state is not TxnState.ABORTING:  # ABORTING: an abort that timed out
            txn.raise_failure()  # FATAL: its error
            raise InvalidTxnStateError(f"abort_transaction() in state {txn.state.value}")
        self._fail_unsent(TransactionAbortedError(
            f"transactional id {txn.transactional_id}: the transaction was aborted"))
        txn.pending.clear()
        await self._settle_transaction(txn)
        await txn.end(commit=False)

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """`async with producer.transaction():` begins a transaction, commits it when the block
        ends, and aborts it when the block raises (then the exception goes on). A commit that
        fails because a record failed aborts too, and raises the record's error."""
        self.begin_transaction()
        txn = self._txn
        assert txn is not None
        try:
            yield
        except BaseException:
            if txn.state is not TxnState.FATAL_ERROR:
                await self.abort_transaction()
            raise
        try:
            await self.commit_transaction()
        except KafkaError:
            if txn.state is TxnState.ABORTABLE_ERROR:
                await self.abort_transaction()
            raise

    async def _settle_transaction(self, txn: TransactionManager) -> None:
        """Until every batch is answered and no partition is waiting to be added."""
        acc = self._require_started()
        while True:
            adding = txn.adding
            if adding is not None:
                await asyncio.shield(adding)
                continue
            if not any(True for _ in acc.pending()):
                return
            await self.flush()

    def _require_txn(self, what: str) -> TransactionManager:
        if self._txn is None:
            raise InvalidTxnStateError(f"{what} needs a transactional_id")
        return self._txn

    # ------------------------------------------------------------------------------ sending
    async def send(self, topic: str, value: Any = None, key: Any = None, *,
                   headers: Headers | None = None, partition: int | None = None,
                   timestamp_ms: int | None = None) -> DeliveryFuture:
        """Add one record to its batch and return its DeliveryFuture, waiting only while the
        buffer is full or the topic's metadata is being fetched (at most max_block_ms).
        RecordTooLargeError at once for a record that could never be sent."""
        delivery = self._append(topic, value, key, headers, partition, timestamp_ms)
        if delivery is None:
            return await self._send_slow(topic, value, key, headers, partition, timestamp_ms)
        if self._yield_due:  # a batch just filled: let the sender run before the next one
            self._yield_due = False
            await asyncio.sleep(0)
        return delivery

    async def send_and_wait(self, topic: str, value: Any = None, key: Any = None, *,
                            headers: Headers | None = None, partition: int | None = None,
                            timestamp_ms: int | None = None) -> RecordMetadata:
        """Send one record and return its metadata once acknowledged (acks=0: once written)."""
        delivery = await self.send(topic, value, key, headers=headers, partition=partition,
                                   timestamp_ms=timestamp_ms)
        self._wake()
        return await delivery

    def send_nowait(self, topic: str, value: Any = None, key: Any = None, *,
                    headers: Headers | None = None, partition: int | None = None,
                    timestamp_ms: int | None = None) -> DeliveryFuture:
        """Add one record without waiting: BufferFullError if the buffer is full,
        UnknownTopicOrPartitionError if the topic's metadata is not loaded yet."""
        delivery = self._append(topic, value, key, headers, partition, timestamp_ms)
        if delivery is not None:
            return delivery
        if topic not in self._topics:
            self._want_topic(topic)
            raise UnknownTopicOrPartitionError(
                f"no metadata for topic {topic!r} yet; fetching it (await "
                "producer.partitions_for(topic) first to avoid this)")
        raise BufferFullError(f"buffer_memory ({self._buffer_memory} bytes) is full")

    def _append(self, topic: str, value: Any, key: Any, headers: Headers | None,
                partition: int | None, timestamp_ms: int | None) -> DeliveryFuture | None:
        """The hot path: the record into its partition's batch; None if the topic is unknown or
        memory is full. Per-record work is what limits throughput: keep it short."""
        acc = self._open_acc
        if acc is None:
            raise ProducerClosedError("the producer is closed" if self._closing else
                                      "the producer is not started: use `async with` or start()")
        t = self._topics.get(topic)
        if t is None:
            return None
        if self._serializing:
            value, key = self._serialize(value, key)
        sticky = False
        if partition is None:
            if key is None and t.sticky >= 0:
                partition = t.sticky
                sticky = True
            else:
                partition = self._partition_for(t, key)
                if partition < 0:
                    return None  # no partitions known yet
                sticky = key is None and t.sticky >= 0
        elif not 0 <= partition < len(t.queues):
            if not t.queues:
                return None  # metadata not loaded yet
            raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition} (it has "
                                               f"{len(t.queues)})")
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        pq = t.queues[partition]
        txn = self._txn
        if txn is not None:
            txn.check_can_send()
            if pq.tp not in txn.partitions and pq.tp not in txn.pending:
                txn.pending.add(pq.tp)
                self._wake()
        added = acc.append(pq, key, value, headers, timestamp_ms, self._clock)
        if added is None:
            return None
        batch, index, opened = added
        if opened:
            if sticky and pq.ready:
                t.sticky = self._pick_partition(t)  # KIP-480: switch when a batch fills
            self._yield_due = True
            self._wake()
        return DeliveryFuture(batch, index, timestamp_ms)

    def _serialize(self, value: Any, key: Any) -> tuple[Any, Any]:
        if self._value_serializer is not None:
            value = self._value_serializer(value)
        if self._key_serializer is not None and key is not None:
            key = self._key_serializer(key)
        return value, key

    def _partition_for(self, t: _Topic, key: bytes | None) -> int:
        """The partition of a record without one given; -1 if the topic has none yet."""
        count = len(t.queues)
        if not count:
            return -1
        if type(self._partitioner) is not str:
            return self._custom_partition(t, key)
        if key is not None:
            return partition_for_key(key, count)
        if self._partitioner == "murmur2_sticky":
            t.sticky = self._pick_partition(t)
            return t.sticky
        return next(self._round_robin) % count

    async def _send_slow(self, topic: str, value: Any, key: Any, headers: Headers | None,
                            partition: int | None, timestamp_ms: int | None) -> DeliveryFuture:
        """Wait for the topic's metadata or for memory, within max_block_ms, then append."""
        assert self._loop is not None and self._memory_freed is not None
        deadline = self._loop.time() + self._max_block_s
        while True:
            t = self._topics.get(topic)
            if t is None or not t.queues:
                await self._wait_topic(topic, deadline)
                continue
            delivery = self._append(topic, value, key, headers, partition, timestamp_ms)
            if delivery is not None:
                return delivery
            self._memory_freed.clear()
            self._wake()
            left = deadline - self._loop.time()
            if left <= 0:
                raise KafkaTimeoutError(f"buffer_memory ({self._buffer_memory} bytes) stayed "
                                        f"full for max_block_ms ({self._max_block_s * 1000:.0f} "
                                        "ms)")
            try:  # asyncio.timeout: 3.11's wait_for can swallow a cancellation
                async with asyncio.timeout(left):
                    await self._memory_freed.wait()
            except TimeoutError:
                pass

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition ids, fetching its metadata if needed (at most max_block_ms)."""
        self._require_started()
        assert self._loop is not None
        t = self._topics.get(topic)
        if t is None or not t.queues:
            await self._wait_topic(topic, self._loop.time() + self._max_block_s)
            t = self._topics[topic]
        return list(range(len(t.queues)))

    def _custom_partition(self, t: _Topic, key: bytes | None) -> int:
        partitioner = self._partitioner
        assert callable(partitioner)
        every = list(range(len(t.queues)))
        return partitioner(key, every, self._available(t) or every)

    def _available(self, t: _Topic) -> list[int]:
        parts = self.cluster.partitions
        return [i for i in range(len(t.queues))
                if (view := parts.get((t.name, i))) is not None and view.leader >= 0]

    def _pick_partition(self, t: _Topic) -> int:
        available = self._available(t) or list(range(len(t.queues)))
        if len(available) > 1 and t.sticky in available:
            available.remove(t.sticky)
        return random.choice(available)

    # ------------------------------------------------------------------------------ metadata
    def _want_topic(self, topic: str) -> None:
        if topic not in self._topics:
            self._topics[topic] = _Topic(topic)
        self.cluster.request_update()
        self._wake()

    async def _wait_topic(self, topic: str, deadline: float) -> None:
        """Until the topic's partitions are known (auto-creating it, as Java's producer does)."""
        assert self._loop is not None
        self._want_topic(topic)
        while not self._topics[topic].queues:
            left = deadline - self._loop.time()
            if left <= 0:
                code = self.cluster.topic_errors.get(topic, 0)
                raise KafkaTimeoutError(f"topic {topic!r}: no metadata within max_block_ms"
                                        + (f" (last error {info(code).name})" if code else ""))
            try:
                await self._refresh([topic], auto_create=True)
            except (ConnectionError, OSError, TimeoutError) as exc:
                log.debug("metadata for %s failed: %s", topic, exc)
            if not self._topics[topic].queues:
                await asyncio.sleep(min(left, max(self._retry_backoff_s, METADATA_WAIT_STEP_S)))

    async def _refresh(self, topics: list[str] | None = None, auto_create: bool = False) -> None:
        await self.cluster.refresh(topics if topics is not None else list(self._topics),
                                   auto_create=auto_create)
        self._metadata_changed()

    def _metadata_changed(self) -> None:
        acc = self._acc
        assert acc is not None
        for name, t in self._topics.items():
            count = sum(1 for (topic, _) in self.cluster.partitions if topic == name)
            while len(t.queues) < count:
                t.queues.append(acc.queue(TopicPartition(name, len(t.queues))))
        self._wake()

    async def _metadata_loop_once(self) -> None:
        try:
            await self._refresh()
        except (ConnectionError, OSError, TimeoutError, KafkaError) as exc:
            log.debug("metadata refresh failed: %s", exc)
        finally:
            self._metadata_task = None
            self._wake()

    def _leader_of(self, tp: TopicPartition) -> tuple[int, int] | None:
        view = self.cluster.partitions.get(tp)
        if view is None or view.leader < 0:
            return None
        return view.leader, view.leader_epoch

    # -------------------------------------------------------------------------- the sender
    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def _node_has_room(self, node: int) -> bool:
        """Whether a request may go to node now: it has room for one more, and a connection set
        up. A node without one is dialled in the background (its end wakes the sender): until
        then its partitions' batches stay unsent, free to follow metadata that names another
        leader. Meanwhile metadata is asked for every LEADER_SILENT_S: a frozen leader takes
        the whole setup timeout to fail, and its failover may be over well before."""
        if self._node_in_flight.get(node, 0) >= self._in_flight_max:
            return False
        cluster = self.cluster
        if cluster.connected(node):
            return True
        loop = self._loop
        assert loop is not None
        now_s = loop.time()
        dial = cluster.dial(node)
        if dial is None:  # in its reconnect backoff
            self._node_wait_s = min(self._node_wait_s, cluster.reconnect_in(node))
            return False
        asked_s = self._dialling.get(node)
        if asked_s is None:
            asked_s = self._dialling[node] = now_s
            dial.add_done_callback(lambda _: self._dialled(node))
        elif now_s - asked_s >= LEADER_SILENT_S:
            log.debug("broker %d: connection setup under way for %.1fs; asking for metadata",
                      node, now_s - asked_s)
            cluster.request_update()
            asked_s = self._dialling[node] = now_s
        self._node_wait_s = min(self._node_wait_s, asked_s + LEADER_SILENT_S - now_s)
        return False

    def _dialled(self, node: int) -> None:
        self._dialling.pop(node, None)
        self._wake()

    def _watch_silent_leaders(self, now_s: float) -> None:
        """A broker with requests waiting that has answered nothing for LEADER_SILENT_S (frozen,
        cut off): metadata is asked for each LEADER_SILENT_S; once it names another leader, at a
        newer epoch, for a partition with batches waiting on that broker, its connection is
        given up: the requests fail as after request_timeout_ms, only sooner, and their
        batches are retried at the new leader. That is safe exactly as a retry after a timeout
        is: the broker may have written them, and an idempotent producer's sequence numbers
        let the new leader recognise those it holds (DUPLICATE_SEQUENCE_NUMBER); a frozen
        leader cannot have acknowledged acks=all writes its followers lack."""
        for node, count in self._node_in_flight.items():
            conn = self.cluster.open_connection(node) if count else None
            silent_s = 0.0 if conn is None else conn.silent_s()
            if conn is None or silent_s < LEADER_SILENT_S:
                self._silent.pop(node, None)
                if conn is not None:
                    self._node_wait_s = min(self._node_wait_s, LEADER_SILENT_S - silent_s)
                continue
            moved = self._moved_from(node)
            if moved is not None:
                log.info("broker %d answered nothing for %.1fs and no longer leads %s; "
                         "retrying its requests at the new leader", node, silent_s, moved)
                conn.abort(f"answered nothing for {silent_s:.1f}s and no longer leads {moved}")
                continue
            asked_s = self._silent.get(node)
            if asked_s is None or now_s - asked_s >= LEADER_SILENT_S:
                self.cluster.request_update()
                asked_s = self._silent[node] = now_s
            self._node_wait_s = min(self._node_wait_s, asked_s + LEADER_SILENT_S - now_s)

    def _moved_from(self, node: int) -> str | None:
        """A partition with batches in flight to node that metadata says another broker leads
        now, at a newer leader epoch than they were sent with; None if there is none."""
        acc = self._acc
        assert acc is not None
        for pq in acc.queues.values():
            for b in pq.in_flight:
                view = self.cluster.partitions.get(b.tp)
                if (b.node == node and view is not None and view.leader not in (-1, node)
                        and view.leader_epoch > b.leader_epoch):
                    return f"{b.tp.topic}-{b.tp.partition} (broker {view.leader} does, epoch " \
                           f"{view.leader_epoch})"
        return None

    async def _run(self) -> None:
        """The sender task. A bug in it must not leave callers waiting for ever: it fails every
        buffered record with the error and closes the producer to new ones."""
        try:
            await self._send_loop()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("producer sender failed; failing every buffered record")
            self._closing = True
            self._open_acc = None
            acc = self._acc
            assert acc is not None
            for batch in list(acc.pending()):
                self._fail(batch, KafkaError(f"the producer's sender failed: {exc!r}"))

    async def _send_loop(self) -> None:
        """Drain ready batches into requests; sleep until something changes."""
        loop = self._loop
        acc = self._acc
        assert loop is not None and acc is not None
        while True:
            self._wakeup = loop.create_future()
            now_s = loop.time()
            if self.idempotent and self._identity.producer_id < 0 and self._txn is None:
                await self._init_producer_id()
            txn = self._txn
            if txn is not None and txn.pending and txn.adding is None:
                txn.adding = loop.create_task(self._add_partitions(txn))
            for batch in acc.expired(now_s, self._delivery_timeout_s):
                self._fail(batch, KafkaTimeoutError(
                    f"{batch.tp.topic}-{batch.tp.partition}: not delivered within "
                    f"delivery_timeout_ms ({self._delivery_timeout_s * 1000:.0f} ms)"
                    + (f"; last error: {batch.last_error}" if batch.last_error else "")))
            self._node_wait_s = float("inf")
            while True:
                by_node, leaderless = acc.drain(loop.time(), self._leader_of, self._node_has_room)
                if leaderless:
                    self.cluster.request_update()
                for node, batches in by_node.items():
                    self._node_in_flight[node] = self._node_in_flight.get(node, 0) + 1
                    task = loop.create_task(self._send_request(node, batches))
                    self._requests.add(task)
                    task.add_done_callback(self._requests.discard)
                if not by_node:
                    break
            self._watch_silent_leaders(loop.time())
            # Metadata: when asked for (errors) after the backoff, and every metadata_max_age_ms.
            if self._topics and self._metadata_task is None and self.cluster.update_due_in() <= 0:
                self._metadata_task = loop.create_task(self._metadata_loop_once())
            timeout = acc.next_wakeup(loop.time(), self._delivery_timeout_s)
            if self._node_wait_s < float("inf"):
                timeout = self._node_wait_s if timeout is None else min(timeout,
                                                                        self._node_wait_s)
            if self._topics and self._metadata_task is None:
                due = self.cluster.update_due_in()
                timeout = due if timeout is None else min(timeout, due)
            if self.idempotent and self._identity.producer_id < 0 and self._txn is None:
                timeout = self._retry_backoff_s
            timer = None if timeout is None else loop.call_later(max(timeout, 0.001), self._wake)
            try:
                await self._wakeup
            finally:
                if timer is not None:
                    timer.cancel()

    async def _init_producer_id(self) -> None:
        """One InitProducerId attempt (the sender retries on its next round, after backoff).
        Each attempt after a failed one asks the next broker we know, as Java's client asks its
        least loaded node: a broker that cannot answer (its disk is full) is not asked forever."""
        try:
            known, attempt = sorted(self.cluster.brokers), self._pid_attempts
            self._pid_attempts += 1
            if attempt and known:
                conn = await self.cluster.connection(known[attempt % len(known)])
            else:
                conn = await self.cluster.any_connection()
            answer: InitProducerIdResponse = await conn.request(
                _INIT_PRODUCER_ID, conn.version_for(_INIT_PRODUCER_ID),
                InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=-1))
        except NoCommonVersion as exc:
            log.warning("idempotence turned off: %s", exc)
            self.idempotent = False
            assert self._acc is not None
            self._acc.idempotent = False
            return
        except (ConnectionError, OSError, TimeoutError) as exc:
            log.info("InitProducerId failed (%s); retrying", exc)
            return
        if answer.error_code:
            log.info("InitProducerId answered %s; retrying", info(answer.error_code).name)
            return
        self._identity.producer_id = answer.producer_id
        self._identity.producer_epoch = answer.producer_epoch
        log.info("idempotent producer id %d epoch %d", answer.producer_id, answer.producer_epoch)

    async def _add_partitions(self, txn: TransactionManager) -> None:
        """AddPartitionsToTxn for the partitions written to since the last; their batches wait
        for it. If it fails, those batches fail with its error (the transaction must abort)."""
        try:
            await txn.add_pending()
        except KafkaError as exc:
            self._fail_unsent(exc, txn.pending)
            txn.pending.clear()
        finally:
            txn.adding = None
            self._wake()

    def _fail_unsent(self, exc: KafkaError, partitions: set[TopicPartition] | None = None
                     ) -> None:
        """Fail the batches not yet sent (of `partitions`, or all) with exc."""
        acc = self._acc
        assert acc is not None
        for pq in list(acc.queues.values()):
            if partitions is None or pq.tp in partitions:
                for batch in [*([pq.open] if pq.open is not None else []), *pq.ready]:
                    self._fail(batch, exc)

    async def _send_request(self, node: int, batches: list[Batch]) -> None:
        acc = self._acc
        loop = self._loop
        assert acc is not None and loop is not None
        by_topic: dict[str, list[PartitionProduceData]] = {}
        for b in batches:
            by_topic.setdefault(b.tp.topic, []).append(PartitionProduceData(
                index=b.tp.partition, records=b.data, current_leader_epoch=b.leader_epoch))
        request = ProduceRequest(transactional_id=self._transactional_id,
                                 acks=self._acks, timeout_ms=self._request_timeout_ms,
                                 topic_data=[TopicProduceData(name=name, partition_data=parts)
                                             for name, parts in by_topic.items()])
        self.produce_requests += 1
        self.request_bytes_max_seen = max(self.request_bytes_max_seen,
                                          sum(len(b.data) for b in batches))
        try:
            try:
                conn = await self.cluster.connection(node)
                answer: ProduceResponse | None = await conn.request(
                    _PRODUCE, conn.version_for(_PRODUCE), request,
                    expect_response=self._acks != 0)
            except (ConnectionError, OSError, TimeoutError) as exc:
                self.cluster.node_failed(node)  # backs off the reconnect, asks for metadata
                for b in batches:
                    self._retry(b, KafkaConnectionError(f"broker {node}: {exc}"))
                return
            if answer is None:  # acks=0
                for b in batches:
                    self._done(b)
                return
            self._handle_answer(node, batches, answer)
        finally:
            self._node_in_flight[node] -= 1
            self._wake()

    def _handle_answer(self, node: int, batches: list[Batch], answer: ProduceResponse) -> None:
        by_tp = {b.tp: b for b in batches}
        for topic in answer.responses:
            for p in topic.partition_responses:
                b = by_tp.pop(TopicPartition(topic.name, p.index), None)
                if b is None:
                    continue
                code = p.error_code
                if code == 0 or code == E.DUPLICATE_SEQUENCE_NUMBER:
                    b.base_offset = p.base_offset if code == 0 else -1
                    b.log_append_time = p.log_append_time_ms
                    self._done(b)
                else:
                    if p.current_leader.leader_id >= 0:  # KIP-951 (Produce v10)
                        self._learn_leader(b.tp, p.current_leader.leader_id,
                                           p.current_leader.leader_epoch, answer)
                    self._answer_error(node, b, code, p.error_message)
        for b in by_tp.values():  # a partition the broker did not answer for
            self._retry(b, KafkaConnectionError(f"broker {node} did not answer for {b.tp}"))

    def _learn_leader(self, tp: TopicPartition, leader: int, leader_epoch: int,
                      answer: ProduceResponse) -> None:
        """The answer named the partition's new leader: taken into the metadata, so the retry
        goes there without waiting for a refresh (the refresh asked for still comes)."""
        endpoint = next((BrokerAddress(e.node_id, e.host, e.port, e.rack)
                         for e in answer.node_endpoints if e.node_id == leader), None)
        if self.cluster.learn_leader(tp.topic, tp.partition, leader, leader_epoch, endpoint):
            self.leaders_learned += 1

    def _answer_error(self, node: int, b: Batch, code: int, message: str | None) -> None:
        acc = self._acc
        assert acc is not None
        what = f"produce to {b.tp.topic}-{b.tp.partition} (broker {node}, leader epoch " \
               f"{b.leader_epoch})" + (f": {message}" if message else "")
        exc = error_for(code, what)
        if code == E.FENCED_LEADER_EPOCH:
            self.fenced_epoch_errors += 1
        elif code == E.UNKNOWN_LEADER_EPOCH:
            self.unknown_epoch_errors += 1
        if refresh_before_retry(code):
            self.cluster.request_update()
            self._retry(b, exc)
        elif code == E.MESSAGE_TOO_LARGE and b.record_count > 1 and not self._closed:
            self._split(b, exc)
        elif code in _SEQUENCE_ERRORS and self.idempotent:
            # Java's rule: a gap right after what was acknowledged means the broker lost our
            # state: restart the sequence (epoch bump); otherwise an earlier batch is unresolved.
            # In a transaction the batch fails instead: the transaction must abort, and the
            # abort bumps the epoch at the coordinator (KIP-360).
            restart = acc.is_next_sequence(b) or code == E.UNKNOWN_PRODUCER_ID
            if restart and self._txn is not None:
                self._fail(b, exc)
            else:
                self._retry(b, exc, restart_sequence=restart)
        elif exc.retriable:
            self._retry(b, exc)
        else:
            self._fail(b, exc)

    def _retry(self, b: Batch, exc: KafkaError, restart_sequence: bool = False) -> None:
        acc = self._acc
        loop = self._loop
        assert acc is not None and loop is not None
        if self._closed:
            acc.failed(b, ProducerClosedError("the producer closed"))
            return
        if b.attempts >= self._retries:
            self._fail(b, exc)
            return
        if loop.time() - b.created >= self._delivery_timeout_s:
            self._fail(b, KafkaTimeoutError(f"not delivered within delivery_timeout_ms; last "
                                            f"error: {exc}"))
            return
        if restart_sequence:
            self.epoch_bumps += 1
            log.info("%s-%d: %s; restarting its sequence under a new producer epoch",
                     b.tp.topic, b.tp.partition, exc)
        self.retries_total += 1
        acc.retry(b, loop.time(), self._retry_backoff_s, str(exc), restart_sequence)

    def _split(self, b: Batch, exc: KafkaError) -> None:
        """Java's splitAndReenqueue: the halves are sent in b's place (no backoff: the error
        is about b's size, not the broker's state). Within the delivery timeout, like a retry."""
        acc = self._acc
        loop = self._loop
        assert acc is not None and loop is not None
        if loop.time() - b.created >= self._delivery_timeout_s:
            self._fail(b, KafkaTimeoutError(f"not delivered within delivery_timeout_ms; last "
                                            f"error: {exc}"))
            return
        if b.tp.topic not in self._split_topics and len(self._split_topics) < SPLIT_LOG_TOPICS_MAX:
            self._split_topics.add(b.tp.topic)
            log.info("%s: a batch of %d records (%d bytes) is too large for the broker (%s); "
                     "splitting such batches", b.tp.topic, b.record_count, len(b.data), exc)
        self.batch_splits += 1
        acc.split(b, str(exc))
        self._wake()

    def _done(self, b: Batch) -> None:
        acc = self._acc
        assert acc is not None and self._memory_freed is not None
        self.records_sent += b.record_count
        self.bytes_sent += len(b.data)
        acc.acknowledged(b)
        self._memory_freed.set()

    def _fail(self, b: Batch, exc: BaseException) -> None:
        acc = self._acc
        assert acc is not None and self._memory_freed is not None
        acc.failed(b, exc)
        self._memory_freed.set()
        txn = self._txn
        if txn is not None:
            if b.base_sequence >= 0:
                txn.bump_needed = True  # its sequence numbers were used: a gap now
            if not isinstance(exc, TransactionAbortedError):
                txn.failed(exc)

    # ------------------------------------------------------------------------------ misc
    def _require_started(self) -> Accumulator:
        if self._acc is None:
            raise ProducerClosedError("the producer is not started: use `async with` or start()")
        return self._acc

    def metrics(self) -> dict[str, int]:
        """Counters since start, for users to read or export to Prometheus."""
        acc = self._acc
        return {"records_sent_total": self.records_sent, "bytes_sent_total": self.bytes_sent,
                "retries_total": self.retries_total,
                "fenced_leader_epoch_errors_total": self.fenced_epoch_errors,
                "unknown_leader_epoch_errors_total": self.unknown_epoch_errors,
                "leaders_learned_total": self.leaders_learned,
                "producer_epoch_bumps_total": self.epoch_bumps,
                "produce_requests_total": self.produce_requests,
                "produce_request_bytes_max": self.request_bytes_max_seen,
                "batch_splits_total": self.batch_splits,
                "buffer_bytes_used": acc.used_bytes if acc is not None else 0,
                "transactions_committed_total": self._txn.commits if self._txn else 0,
                "transactions_aborted_total": self._txn.aborts if self._txn else 0}


def _parse_acks(acks: str | int) -> int:
    if acks in ("all", -1, "-1"):
        return -1
    if acks in (0, 1, "0", "1"):
        return int(acks)
    raise ValueError(f"acks must be 'all', 1 or 0, not {acks!r}")
