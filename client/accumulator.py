"""The producer's record accumulator: per-partition batches, memory accounting, and the drain rules.

Theory of operation
-------------------
Each partition has a `PartitionQueue`: at most one *open* batch taking records (a
protocol.records.BatchBuilder), a deque of *ready* batches (closed, waiting to be sent, in the
order their records were appended), and a deque of batches *in flight* (sent, no answer yet).
`append` adds a record to the open batch, closing it and opening a new one when it is full; that
is the hot path, one BatchBuilder.append and a few attribute reads per record. Memory is counted
per batch, as Java's producer does: opening a batch reserves `batch_size` bytes (or the first
record's size, if bigger) out of `memory_max`; `append` returns None when that would overflow, and
the producer waits (or refuses) until completed batches give memory back. A record that could
never be sent (bigger, with its batch header, than `request_bytes_max` or `memory_max`) is
refused at once with MessageTooLargeError (Java's RecordTooLargeException), so no batch ever
exceeds what one request or the buffer may hold, except as a batch of that one record.

The sender calls `drain(now_s, ...)`, which picks at most one batch per partition per call, and
only when the partition may send: its open batch has lingered `linger_s` (or a flush is on), the
head batch's retry backoff is over, its leader is known and that broker has room for another
request. What one call gives one broker is one request: at most `request_bytes_max` bytes of
batches, and always at least one batch (Java's max.request.size rule); partitions that did not fit
wait for the next call, which starts with them (a drained partition goes to the back of the
order, so none starves). Ordering rules:
- ready batches stay in append order (a retried batch goes back to its place, by serial number);
- a retried batch is sent only when nothing else of its partition is in flight, so retries go one
  at a time and in order; pipelining resumes once the partition is clean again;
- idempotence: the sequence is stamped when a batch is first sent (base sequence = the
  partition's next, then next += record count) and kept across retries, so the broker can
  recognise a retry of a batch it already wrote (DUPLICATE_SEQUENCE). When a partition's sequence
  must restart (a batch failed for good, or the broker lost our producer state: Java's "epoch
  bump" for idempotent producers, KIP-360), it waits until nothing of it is in flight, the
  producer epoch is bumped, its sequence restarts at 0 and its ready batches are re-stamped. Other
  partitions take the new epoch the same way, once their in-flight batches are answered.
- idempotence: until the broker has acknowledged one batch of the partition's current sequence,
  only one batch of it is in flight. A broker that does not know our producer accepts any first
  sequence, so a later batch sent alongside a first batch that fails would be written ahead of it.

Splitting (Java's splitAndReenqueue): a batch the broker refused as too large (MESSAGE_TOO_LARGE,
e.g. the topic's max.message.bytes is below batch_size) is decoded and rebuilt as two halves,
which take its place at the front of the partition's ready batches, keep its sequence range
(first half from its base sequence, the second after it), its creation time (delivery timeout)
and its memory reservation. Halving again reaches one record per batch; a single record too large
fails. The records' DeliveryFutures still point at the original batch: it resolves once each of
its halves has, and `Batch.locate` finds the half (or quarter...) that holds a given record.

No I/O here and no clock: callers pass `now_s` (seconds, any monotonic origin) and a future
factory; the producer's sender task drives it.
"""

from __future__ import annotations

import asyncio
import collections
import struct
from collections.abc import Callable, Iterable, Sequence

from crc32c import crc32c

from epochlog.protocol.batch import ATTRIBUTES_OFFSET, CRC_OFFSET
from epochlog.protocol.records import BatchBuilder, decode_batch

from .errors import MessageTooLargeError
from .types import TopicPartition

# Where the producer id, epoch and base sequence sit in a RecordBatch header (inside the CRC).
_PRODUCER_STATE_OFFSET = 43
_PRODUCER_STATE = struct.Struct(">qhi")
_CRC = struct.Struct(">I")
PRODUCER_EPOCH_MAX = 32767
SEQUENCE_MAX = 2**31 - 1
REQUEST_BYTES_MAX_DEFAULT = 1024 * 1024  # Kafka's max.request.size
SPLIT_BATCH_BYTES_MAX = 1 << 62  # a split rebuilds records that were in one batch: no limit


def restamp(data: bytes, producer_id: int, producer_epoch: int, base_sequence: int) -> bytes:
    """A built batch with new idempotence fields and its CRC recomputed (records untouched)."""
    buf = bytearray(data)
    _PRODUCER_STATE.pack_into(buf, _PRODUCER_STATE_OFFSET, producer_id, producer_epoch,
                              base_sequence)
    _CRC.pack_into(buf, CRC_OFFSET, crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:]))
    return bytes(buf)


class ProducerIdentity:
    """The idempotent producer's id and epoch; id -1 until InitProducerId answers."""

    __slots__ = ("producer_id", "producer_epoch")

    def __init__(self) -> None:
        self.producer_id = -1
        self.producer_epoch = -1

    def bump(self) -> None:
        """Java's local epoch bump for idempotent producers; past the last epoch a new id is
        needed (the sender asks for one when producer_id is -1)."""
        if self.producer_epoch >= PRODUCER_EPOCH_MAX:
            self.producer_id, self.producer_epoch = -1, -1
        else:
            self.producer_epoch += 1


class Batch:
    """One batch of one partition, from its first record to its answer.

    serial orders a partition's batches: (n,) for the n-th batch opened; a split batch's halves
    are serial + (0,) and serial + (1,), which sort where their parent did: after every earlier
    batch, before every later one (and halves of halves likewise)."""

    __slots__ = ("tp", "builder", "serial", "created", "future", "reserved", "data",
                 "record_count", "attempts", "retry_at", "base_sequence", "leader_epoch",
                 "base_offset", "log_append_time", "last_error", "parent", "children",
                 "children_left", "node")

    def __init__(self, tp: TopicPartition, builder: BatchBuilder, serial: tuple[int, ...],
                 created: float, future: asyncio.Future[None], reserved: int) -> None:
        self.tp = tp
        self.builder: BatchBuilder | None = builder
        self.serial = serial
        self.created = created
        self.future = future
        self.reserved = reserved
        self.data = b""
        self.record_count = 0
        self.attempts = 0
        self.retry_at = 0.0
        self.base_sequence = -1
        self.leader_epoch = -1
        self.node = -1  # the broker it was last sent to
        self.base_offset = -1
        self.log_append_time = -1
        self.last_error: str = ""
        self.parent: Batch | None = None
        # After a split: (index of its first record here, the half), in record order.
        self.children: list[tuple[int, Batch]] | None = None
        self.children_left = 0

    def locate(self, index: int) -> tuple[Batch, int]:
        """The batch that holds (or held) this batch's index-th record, and its index there."""
        batch = self
        while batch.children is not None:
            for first, child in reversed(batch.children):
                if index >= first:
                    batch, index = child, index - first
                    break
        return batch, index

    @property
    def size(self) -> int:
        return len(self.data) if self.builder is None else self.builder.size_in_bytes

    def seal(self) -> None:
        """Build the bytes (unstamped: the sender stamps idempotent batches)."""
        builder = self.builder
        if builder is not None:
            self.record_count = builder.record_count
            self.data = builder.build()
            self.builder = None  # its parts are in data now


class PartitionQueue:
    __slots__ = ("tp", "open", "ready", "in_flight", "producer_id", "producer_epoch",
                 "next_sequence", "last_acked_sequence", "needs_bump")

    def __init__(self, tp: TopicPartition) -> None:
        self.tp = tp
        self.open: Batch | None = None
        self.ready: collections.deque[Batch] = collections.deque()
        self.in_flight: collections.deque[Batch] = collections.deque()
        self.producer_id = -1
        self.producer_epoch = -1
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.needs_bump = False

    def requeue(self, batch: Batch) -> None:
        """batch back among the ready ones, at its place in append order."""
        ready = self.ready
        i = len(ready)
        while i > 0 and ready[i - 1].serial > batch.serial:
            i -= 1
        ready.insert(i, batch)

    def restart_sequences(self, producer_id: int, producer_epoch: int) -> None:
        self.producer_id, self.producer_epoch = producer_id, producer_epoch
        self.next_sequence = 0
        self.last_acked_sequence = -1
        self.needs_bump = False
        for batch in self.ready:
            batch.base_sequence = -1  # stamped again when sent


LeaderOf = Callable[[TopicPartition], "tuple[int, int] | None"]


class Accumulator:
    def __init__(self, *, batch_size: int, linger_s: float, compression: int,
                 memory_max: int, new_future: Callable[[], asyncio.Future[None]],
                 idempotent: bool, identity: ProducerIdentity,
                 request_bytes_max: int = REQUEST_BYTES_MAX_DEFAULT) -> None:
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.compression = compression
        self.memory_max = memory_max
        self.request_bytes_max = request_bytes_max
        # A record bigger than this (with its batch header) could never be sent or buffered.
        self.record_bytes_max = min(request_bytes_max, memory_max)
        # Batches stop growing there: past it a second record could never share a request.
        self._batch_bytes_max = min(batch_size, self.record_bytes_max)
        self.used_bytes = 0
        self.idempotent = idempotent
        self.identity = identity
        # A transactional producer's batches carry the transactional flag; a partition's batches
        # wait until may_send says the partition is in the transaction (AddPartitionsToTxn),
        # and a gap in a sequence waits for the coordinator's epoch bump, not a local one.
        self.transactional = False
        self.may_send: Callable[[TopicPartition], bool] | None = None
        self.flushing = 0  # flushes (or a close) in progress: linger is ignored meanwhile
        self.queues: dict[TopicPartition, PartitionQueue] = {}
        self._new_future = new_future
        self._serial = 0
        # Queues with an open or ready batch, in drain order (a dict: ordered, O(1) moves).
        self._active: dict[PartitionQueue, None] = {}

    def queue(self, tp: TopicPartition) -> PartitionQueue:
        pq = self.queues.get(tp)
        if pq is None:
            pq = self.queues[tp] = PartitionQueue(tp)
        return pq

    # ------------------------------------------------------------------------- the hot path
    def append(self, pq: PartitionQueue, key: bytes | None, value: bytes | None,
               headers: Sequence[tuple[str, bytes | None]] | None, timestamp: int,
               clock: Callable[[], float]) -> tuple[Batch, int, bool] | None:
        """(batch, index in it, whether a new batch was opened); None if memory is full.
        clock is read only when a batch opens (its linger starts then). MessageTooLargeError for
        a record that alone exceeds request_bytes_max or memory_max."""
        batch = pq.open
        if batch is not None:
            builder = batch.builder
            assert builder is not None
            if builder.append(key, value, headers, timestamp):
                return batch, builder.record_count - 1, False
            pq.ready.append(batch)  # full: closed, and a new one opened below
            pq.open = None
        builder = BatchBuilder(compression=self.compression, batch_bytes_max=self._batch_bytes_max)
        builder.append(key, value, headers, timestamp)
        size = builder.size_in_bytes
        if size > self.record_bytes_max:
            raise self._too_large(pq.tp, size)
        reserved = max(size, self._batch_bytes_max)
        if self.used_bytes + reserved > self.memory_max:
            return None
        self._serial += 1
        batch = Batch(pq.tp, builder, (self._serial,), clock(), self._new_future(), reserved)
        self.used_bytes += reserved
        pq.open = batch
        self._active[pq] = None
        return batch, 0, True

    def _too_large(self, tp: TopicPartition, size: int) -> MessageTooLargeError:
        limit, name = ((self.request_bytes_max, "max_request_size")
                       if self.request_bytes_max <= self.memory_max
                       else (self.memory_max, "buffer_memory"))
        return MessageTooLargeError(
            f"{tp.topic}-{tp.partition}: the record is {size} bytes with its batch header, "
            f"more than {name} ({limit} bytes); it could never be sent")

    # ---------------------------------------------------------------------------- sending
    def drain(self, now_s: float, leader_of: LeaderOf, node_has_room: Callable[[int], bool],
              ) -> tuple[dict[int, list[Batch]], list[TopicPartition]]:
        """One request's worth of batches per leader node (at most one per partition, at most
        request_bytes_max bytes, at least one batch), and the partitions held back because their
        leader is unknown (the caller refreshes metadata). Call again for more requests."""
        out: dict[int, list[Batch]] = {}
        out_bytes: dict[int, int] = {}
        full: set[int] = set()  # nodes whose request has no room left in this call
        leaderless: list[TopicPartition] = []
        drained: list[PartitionQueue] = []
        identity = self.identity
        idempotent = self.idempotent
        request_bytes_max = self.request_bytes_max
        active = self._active
        for pq in list(active):
            if not pq.ready:
                batch = pq.open
                if batch is None:
                    del active[pq]
                    continue
                if not self.flushing and now_s - batch.created < self.linger_s:
                    continue
                pq.ready.append(batch)
                pq.open = None
            head = pq.ready[0]
            if head.retry_at > now_s or (pq.in_flight and (
                    head.attempts or (idempotent and pq.last_acked_sequence < 0))):
                continue
            leader = leader_of(pq.tp)
            if leader is None:
                leaderless.append(pq.tp)
                continue
            node, leader_epoch = leader
            if node in full:
                continue
            taken = out_bytes.get(node)
            if taken is None:
                if not node_has_room(node):
                    continue
                taken = 0
            elif taken + head.size > request_bytes_max:  # an upper bound if not yet built
                full.add(node)
                continue
            if self.may_send is not None and not self.may_send(pq.tp):
                continue
            if idempotent and not self._stamp(pq, head, identity):
                continue
            if head.builder is not None:
                head.seal()
            pq.ready.popleft()
            pq.in_flight.append(head)
            head.leader_epoch = leader_epoch
            head.node = node
            out.setdefault(node, []).append(head)
            out_bytes[node] = taken + len(head.data)
            drained.append(pq)
        for pq in drained:  # to the back of the order: those passed over go first next time
            del active[pq]
            if pq.ready or pq.open is not None:
                active[pq] = None
        return out, leaderless

    def _stamp(self, pq: PartitionQueue, head: Batch, identity: ProducerIdentity) -> bool:
        """Give head its producer id, epoch and sequence; False if the partition must wait."""
        if identity.producer_id < 0:
            return False
        if pq.needs_bump:
            if pq.in_flight:
                return False
            if (pq.producer_id, pq.producer_epoch) == (identity.producer_id,
                                                       identity.producer_epoch):
                if self.transactional:
                    return False  # the abort that must follow bumps the epoch at the coordinator
                identity.bump()
                if identity.producer_id < 0:
                    return False
        if (pq.producer_id, pq.producer_epoch) != (identity.producer_id,
                                                   identity.producer_epoch):
            if pq.in_flight:
                return False  # its in-flight batches belong to the old epoch
            pq.restart_sequences(identity.producer_id, identity.producer_epoch)
        if head.base_sequence < 0:
            if head.builder is not None:
                head.record_count = head.builder.record_count
                head.builder.set_producer_state(pq.producer_id, pq.producer_epoch,
                                                pq.next_sequence, self.transactional)
                head.seal()
            else:
                head.data = restamp(head.data, pq.producer_id, pq.producer_epoch,
                                    pq.next_sequence)
            head.base_sequence = pq.next_sequence
            pq.next_sequence = (pq.next_sequence + head.record_count) & SEQUENCE_MAX
        return True

    # ----------------------------------------------------------------------------- answers
    def acknowledged(self, batch: Batch) -> None:
        """batch is written: out of flight, memory back, its future resolved."""
        pq = self.queues[batch.tp]
        _remove(pq.in_flight, batch)
        if batch.base_sequence >= 0:
            pq.last_acked_sequence = (batch.base_sequence + batch.record_count - 1) & SEQUENCE_MAX
        self._release(batch)
        if not batch.future.done():
            batch.future.set_result(None)
            _settle_parents(batch)

    def failed(self, batch: Batch, exc: BaseException) -> None:
        """batch will not be written: its records' futures fail with exc. A sequenced batch
        leaves a gap in its partition's sequence, so the partition restarts its sequence."""
        pq = self.queues[batch.tp]
        _remove(pq.in_flight, batch)
        _remove(pq.ready, batch)
        if pq.open is batch:
            pq.open = None
        if batch.base_sequence >= 0:
            pq.needs_bump = True
        self._release(batch)
        if not batch.future.done():
            batch.future.set_exception(exc)
            batch.future.exception()  # retrieved: a failed batch nobody awaits is not a bug
            _settle_parents(batch)

    def retry(self, batch: Batch, now_s: float, backoff_s: float, why: str,
              restart_sequence: bool = False) -> None:
        """batch goes back to its partition's ready batches, to be sent after backoff_s."""
        pq = self.queues[batch.tp]
        _remove(pq.in_flight, batch)
        batch.attempts += 1
        batch.retry_at = now_s + backoff_s
        batch.last_error = why
        if restart_sequence:
            pq.needs_bump = True
        pq.requeue(batch)
        self._active[pq] = None

    def split(self, batch: Batch, why: str) -> list[Batch]:
        """batch (in flight, two records or more) was refused as too large: rebuild it as two
        halves that take its place at the front of its partition's ready batches, with its
        sequence range, creation time, attempts and memory reservation. The halves."""
        assert batch.record_count > 1 and batch.builder is None, "only a sent batch splits"
        pq = self.queues[batch.tp]
        _remove(pq.in_flight, batch)
        header, records = decode_batch(batch.data)
        count = len(records)
        half = (count + 1) // 2
        children: list[tuple[int, Batch]] = []
        reserved_left = batch.reserved
        for i, (first, end) in enumerate(((0, half), (half, count))):
            builder = BatchBuilder(compression=self.compression,
                                   batch_bytes_max=SPLIT_BATCH_BYTES_MAX)
            for r in records[first:end]:
                builder.append(r.key, r.value, r.headers, r.timestamp)
            sequence = -1
            if batch.base_sequence >= 0:
                sequence = (batch.base_sequence + first) & SEQUENCE_MAX
                builder.set_producer_state(header.producer_id, header.producer_epoch, sequence,
                                           self.transactional)
            reserved = reserved_left if end == count else batch.reserved * (end - first) // count
            reserved_left -= reserved
            child = Batch(batch.tp, builder, batch.serial + (i,), batch.created,
                          self._new_future(), reserved)
            child.seal()
            child.base_sequence = sequence
            child.attempts = batch.attempts
            child.last_error = why
            child.parent = batch
            children.append((first, child))
        batch.reserved = 0  # the halves hold it now: used_bytes is unchanged
        batch.children = children
        batch.children_left = len(children)
        for _, child in children:
            pq.requeue(child)
        self._active[pq] = None
        return [child for _, child in children]

    def is_next_sequence(self, batch: Batch) -> bool:
        pq = self.queues[batch.tp]
        return batch.base_sequence == ((pq.last_acked_sequence + 1) & SEQUENCE_MAX)

    def _release(self, batch: Batch) -> None:
        self.used_bytes -= batch.reserved
        batch.reserved = 0

    # --------------------------------------------------------------------- time and state
    def expired(self, now_s: float, delivery_timeout_s: float) -> list[Batch]:
        """Batches waiting to be sent (not in flight) whose delivery timeout has passed."""
        out = []
        for pq in self._active:
            for batch in pq.ready:
                if now_s - batch.created >= delivery_timeout_s:
                    out.append(batch)
            if pq.open is not None and now_s - pq.open.created >= delivery_timeout_s:
                out.append(pq.open)
        return out

    def next_wakeup(self, now_s: float, delivery_timeout_s: float) -> float | None:
        """Seconds until drain or expiry may have something new to do by time alone.

        A ready head past its retry backoff that the last drain left where it was waits for an
        event, not for time: an answer (in flight before it), a connection set up, a metadata
        refresh, a partition added to the transaction; whoever makes that event wakes the
        sender. Only its delivery timeout counts here, so the sender does not spin for as long
        as a leader takes to answer (its connection setup may take seconds)."""
        soonest: float | None = None
        for pq in self._active:
            if pq.ready:
                head = pq.ready[0]
                at = head.created + delivery_timeout_s
                if head.retry_at > now_s:
                    at = min(at, head.retry_at)
            elif pq.open is not None:
                at = pq.open.created + (0.0 if self.flushing else self.linger_s)
            else:
                continue
            if soonest is None or at < soonest:
                soonest = at
        return None if soonest is None else max(0.0, soonest - now_s)

    def pending(self) -> Iterable[Batch]:
        """Every batch not yet answered: open, ready or in flight."""
        for pq in self.queues.values():
            if pq.open is not None:
                yield pq.open
            yield from pq.ready
            yield from pq.in_flight

    def has_unsent(self) -> bool:
        return bool(self._active)

    def in_flight_count(self) -> int:
        return sum(len(pq.in_flight) for pq in self.queues.values())


def _settle_parents(batch: Batch) -> None:
    """batch is answered: a split batch whose halves are all answered is answered too."""
    parent = batch.parent
    while parent is not None:
        parent.children_left -= 1
        if parent.children_left:
            return
        if not parent.future.done():
            parent.future.set_result(None)  # each record's outcome is in its half's future
        parent = parent.parent


def _remove(queue: collections.deque[Batch], batch: Batch) -> None:
    if queue and queue[0] is batch:
        queue.popleft()
    elif batch in queue:
        queue.remove(batch)
