"""`TxnCoordinator`: the transactional ids of the `__transaction_state` partitions this broker
leads (KIP-98).

Theory of operation
-------------------
A transactional id belongs to partition `abs(java_hashcode(id)) % partitions` of
`__transaction_state` (Kafka's rule), and its coordinator is that partition's leader, as a group's
is the leader of its `__consumer_offsets` partition (internal_topics.py does the finding, the
creating on first lookup, the replicated appends and the reading back for both).

    leader at a new epoch   a `TxnShard` is made, LOADING: the partition's log is replayed from
                            its start (log_records.py) into the shard's `TxnState`; requests for
                            its ids get COORDINATOR_LOAD_IN_PROGRESS meanwhile. Then ACTIVE.
    follower, offline, gone the shard is dropped: its requests get NOT_COORDINATOR, so clients
                            look up the new coordinator, which loads the same log.

The decisions are the pure state machine's (state.py): a request either gets an error at once or
a transition, which is appended to the partition and waited for until replicated (acks=all
within WRITE_TIMEOUT_MS) before it is applied (`written`) and the request answered; a failed
write leaves the id as it was (`write_failed`). Append errors map as Kafka's transaction state
manager maps them: a lost leadership is NOT_COORDINATOR, too few replicas or a timeout
COORDINATOR_NOT_AVAILABLE, both retried by clients after a new lookup.

Ending a transaction is two-phase. EndTxn (or the coordinator itself, for a transaction past its
timeout or one an InitProducerId fences) writes PrepareCommit or PrepareAbort and answers; from
then on the outcome is decided. The markers go to every partition of the transaction
(markers.py), and once all are written CompleteCommit or CompleteAbort is. Meanwhile the id is
busy: requests get CONCURRENT_TRANSACTIONS, which clients retry. A coordinator that loads an id
left in Prepare* (its predecessor died between the phases) writes its markers again and completes
it: the decision survives the coordinator.

Producer ids come from the broker's allocator (producer_ids.py), shared with idempotent
producers: ids never repeat across brokers and restarts, so an id that moves to another
coordinator (a new leader of its partition) cannot collide with one handed out there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from epochlog.protocol.error_codes import ErrorCode

from ..groups.coordinator import wall_clock_ms
from ..internal_topics import InternalTopic
from ..partition import Partition
from . import log_records
from .log_records import Status
from .markers import CoordinatorFenced, MarkerWriter
from .state import PREPARED, TxnMetadata, TxnState

if TYPE_CHECKING:
    from ..parts import BrokerParts
    from ..producer_ids import ProducerIdAllocator

log = logging.getLogger("epochlog.broker")
E = ErrorCode

TXN_TOPIC = "__transaction_state"
TXN_SEGMENT_BYTES = 100 << 20  # Kafka's transaction.state.log.segment.bytes
WRITE_TIMEOUT_MS = 30_000  # Kafka's coordinator waits its request.timeout.ms for an append
TICK_MS = 1000  # how often transactions are checked against their timeouts
RETRY_FIRST_MS = 50
RETRY_MAX_MS = 1000
EXPIRED_NAMED_MAX = 10  # ids an expiry's log line names
EXPIRE_BATCH_MAX = 500  # tombstones per append (a bounded batch); the rest at the next check

_WRITE_ERRORS: dict[int, int] = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}


@dataclass(eq=False)
class TxnShard:
    """Our leadership of one transaction state partition, at one leader epoch, and its ids."""

    index: int
    leader_epoch: int
    state: TxnState
    loading: bool = True


@dataclass
class TxnCounters:
    """Since start, for the broker's metrics."""

    inits_total: int = 0  # InitProducerId answered with a producer id and epoch
    committed_total: int = 0  # transactions completed (markers written, Complete* written)
    aborted_total: int = 0
    timed_out_total: int = 0  # aborted by us, past their timeout (their producer fenced)
    fenced_total: int = 0  # open transactions aborted because a new producer took the id
    expired_total: int = 0  # ids forgotten after transactional_id_expiration_ms
    loads_total: int = 0  # state partitions loaded (became coordinator)


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    error: int
    producer_id: int = -1
    producer_epoch: int = -1


class TxnCoordinator:
    def __init__(self, parts: BrokerParts, producer_ids: ProducerIdAllocator, *,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        c = parts.config
        self.parts = parts
        self.producer_ids = producer_ids  # shared with idempotent producers (producer_ids.py)
        self.clock = clock  # wall clock: the log's timestamps and the transactions' timeouts
        self.timeout_max_ms = c.transaction_max_timeout_ms
        self.expiration_ms = c.transactional_id_expiration_ms
        self.expiration_check_ms = c.transaction_remove_expired_transaction_cleanup_interval_ms
        self.counters = TxnCounters()
        self.shards: dict[int, TxnShard] = {}
        self.markers = MarkerWriter(parts.broker_id, parts.metadata)
        self._completing: dict[str, TxnShard] = {}  # ids whose markers are being written
        self.topic = InternalTopic(
            parts, TXN_TOPIC, partitions=c.transaction_state_log_num_partitions,
            replication_factor=c.transaction_state_log_replication_factor,
            configs=[("cleanup.policy", "compact"), ("segment.bytes", str(TXN_SEGMENT_BYTES))],
            timeout_ms=WRITE_TIMEOUT_MS, wall_clock=clock)

    def _new_producer_id(self) -> int:
        return self.producer_ids.allocate()

    # -------------------------------------------------------------------- partitions, shards
    def on_partition(self, topic: str, index: int, partition: Partition | None) -> None:
        """The replica manager applied a state of one of our partitions (None: gone)."""
        if topic != TXN_TOPIC:
            return
        shard = self.shards.get(index)
        if partition is not None and partition.is_leader:
            if shard is not None and shard.leader_epoch == partition.leader_epoch:
                return  # an ISR change
            if shard is not None:
                self._unload(shard, "a new leader epoch")
            shard = self.shards[index] = TxnShard(
                index, partition.leader_epoch,
                TxnState(self._new_producer_id, self.timeout_max_ms))
            self.parts.spawn(self._load(shard, partition), f"load {TXN_TOPIC}-{index}")
        elif shard is not None:
            self._unload(shard, "no longer the leader")

    def _unload(self, shard: TxnShard, why: str) -> None:
        if self.shards.get(shard.index) is shard:
            del self.shards[shard.index]
        log.info("%s-%d: unloaded %d transactional ids (leader epoch %d): %s", TXN_TOPIC,
                 shard.index, len(shard.state.ids), shard.leader_epoch, why)

    async def _load(self, shard: TxnShard, partition: Partition) -> None:
        started = time.monotonic()
        end = partition.log.log_end_offset
        records = 0
        async for r in self.topic.records(partition, end,
                                          lambda: self.shards.get(shard.index) is shard):
            records += 1
            try:
                transactional_id, entry = log_records.parse(r.key, r.value, r.offset)
            except log_records.BadRecord as exc:
                log.error("%s-%d: skipped: %s", TXN_TOPIC, shard.index, exc)
                continue
            shard.state.load(transactional_id, entry)
        if self.shards.get(shard.index) is not shard:
            return
        shard.loading = False
        self.counters.loads_total += 1
        for transactional_id in shard.state.unfinished():
            self._complete_soon(shard, transactional_id)
        log.info("%s-%d: loaded %d transactional ids from %d records (offsets %d-%d) at leader "
                 "epoch %d in %d ms", TXN_TOPIC, shard.index, len(shard.state.ids), records,
                 partition.log.log_start_offset, end, shard.leader_epoch,
                 (time.monotonic() - started) * 1000)

    def _shard(self, transactional_id: str) -> tuple[TxnShard | None, int]:
        """The shard that holds transactional_id, or the error to answer."""
        shard = self.shards.get(self.topic.partition_for(transactional_id))
        if shard is None:
            return None, E.NOT_COORDINATOR
        if self.topic.leading(shard.index, shard.leader_epoch) is None:
            self._unload(shard, "leadership lost")
            return None, E.NOT_COORDINATOR
        if shard.loading:
            return None, E.COORDINATOR_LOAD_IN_PROGRESS
        return shard, 0

    def _current(self, shard: TxnShard) -> bool:
        return (self.shards.get(shard.index) is shard
                and self.topic.leading(shard.index, shard.leader_epoch) is not None)

    async def close(self) -> None:
        for shard in list(self.shards.values()):
            self._unload(shard, "broker stopping")
        await self.markers.close()

    # -------------------------------------------------------------------------- the log
    async def _write(self, shard: TxnShard, transactional_id: str,
                     entry: log_records.TxnLogEntry) -> int:
        """Append the id's new state, wait until it is replicated, apply it: an error code."""
        error, _ = await self.topic.append(
            shard.index, shard.leader_epoch,
            [(log_records.txn_key(transactional_id), log_records.txn_value(entry))],
            _WRITE_ERRORS)
        error = _WRITE_ERRORS.get(error, error)
        if self.shards.get(shard.index) is not shard:
            return error or E.NOT_COORDINATOR  # unloaded meanwhile: the new leader reloads it
        if error:
            shard.state.write_failed(transactional_id)
            log.info("transactional id %s: writing %s failed: %s", transactional_id,
                     entry.status.kafka_name, E(error).name)
            return error
        shard.state.written(transactional_id, entry)
        return 0

    # -------------------------------------------------------------------------- requests
    async def find(self, transactional_id: str, listener: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of the transactional id's coordinator."""
        return await self.topic.find(transactional_id, listener)

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> ProducerIdAndEpoch:
        """InitProducerId with a transactional id: the id's producer id and a new epoch, which
        fences every earlier producer of the id."""
        shard, error = self._shard(transactional_id)
        if shard is None:
            return ProducerIdAndEpoch(error)
        try:
            answer = shard.state.init_producer_id(transactional_id, timeout_ms, self.clock(),
                                                  expected)
        except OSError as exc:  # the next block of producer ids could not be reserved
            log.warning("transactional id %s: no producer id: %s", transactional_id, exc)
            return ProducerIdAndEpoch(E.COORDINATOR_NOT_AVAILABLE)
        if answer.write is not None:
            error = await self._write(shard, transactional_id, answer.write)
            if error:
                return ProducerIdAndEpoch(error)
            if answer.write.status in PREPARED:  # fenced an open transaction: abort it
                self.counters.fenced_total += 1
                log.info("transactional id %s: a new producer fences epoch %d and aborts its "
                         "transaction", transactional_id, answer.write.producer_epoch - 1)
                self._complete_soon(shard, transactional_id)
            else:
                log.info("transactional id %s: producer id %d at epoch %d", transactional_id,
                         answer.write.producer_id, answer.write.producer_epoch)
        if not answer.error:
            self.counters.inits_total += 1
        return ProducerIdAndEpoch(answer.error, answer.producer_id, answer.producer_epoch)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Sequence[tuple[str, int]]) -> int:
        """AddPartitionsToTxn (and AddOffsetsToTxn's offsets partition): an error code."""
        shard, error = self._shard(transactional_id)
        if shard is None:
            return error
        answer = shard.state.add_partitions(transactional_id, producer_id, producer_epoch,
                                            partitions, self.clock())
        if answer.write is not None:
            return await self._write(shard, transactional_id, answer.write)
        return answer.error

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> int:
        """EndTxn: the decision written (Prepare*), the markers then on their way."""
        shard, error = self._shard(transactional_id)
        if shard is None:
            return error
        answer = shard.state.end_txn(transactional_id, producer_id, producer_epoch, commit,
                                     self.clock())
        if answer.write is None:
            return answer.error
        error = await self._write(shard, transactional_id, answer.write)
        if error:
            return error
        self._complete_soon(shard, transactional_id)
        return answer.error

    # ------------------------------------------------------------------- the second phase
    def _complete_soon(self, shard: TxnShard, transactional_id: str) -> None:
        if self._completing.get(transactional_id) is shard:
            return
        self._completing[transactional_id] = shard
        self.parts.spawn(self._complete(shard, transactional_id),
                         f"complete transaction {transactional_id}")

    async def _complete(self, shard: TxnShard, transactional_id: str) -> None:
        try:
            await self._write_markers_then_complete(shard, transactional_id)
        finally:
            if self._completing.get(transactional_id) is shard:
                del self._completing[transactional_id]

    async def _write_markers_then_complete(self, shard: TxnShard, transactional_id: str) -> None:
        m = shard.state.ids.get(transactional_id)
        if m is None or m.status not in PREPARED:
            return
        entry = m.entry
        commit = entry.status is Status.PREPARE_COMMIT
        try:
            written = await self.markers.write(
                transactional_id, entry.producer_id, entry.producer_epoch, commit,
                shard.leader_epoch, entry.partitions, lambda: self._current(shard))
        except CoordinatorFenced as exc:
            log.warning("transactional id %s: markers not written, %s", transactional_id, exc)
            return
        if not written:
            return  # no longer the coordinator: the next one writes them again
        delay_ms = RETRY_FIRST_MS
        while self._current(shard):
            answer = shard.state.markers_written(transactional_id, self.clock())
            if answer.write is None:
                return
            if not await self._write(shard, transactional_id, answer.write):
                if commit:
                    self.counters.committed_total += 1
                else:
                    self.counters.aborted_total += 1
                log.debug("transactional id %s: producer id %d epoch %d %s in %d partitions",
                         transactional_id, entry.producer_id, entry.producer_epoch,
                         "committed" if commit else "aborted", len(entry.partitions))
                return
            await asyncio.sleep(delay_ms / 1000)
            delay_ms = min(delay_ms * 2, RETRY_MAX_MS)

    # ------------------------------------------------------------------------- timeouts
    async def run(self) -> None:
        """Abort the transactions past their timeout (and fence their producers); now and then
        forget the ids idle past transactional_id_expiration_ms."""
        next_expiry_check = self.clock() + self.expiration_check_ms
        while True:
            now = self.clock()
            check_expiry = now >= next_expiry_check
            if check_expiry:
                next_expiry_check = now + self.expiration_check_ms
            for shard in list(self.shards.values()):
                if shard.loading or not self._current(shard):
                    continue
                for transactional_id in shard.state.timed_out(now):
                    answer = shard.state.abort_timed_out(transactional_id, now)
                    if answer.write is not None:
                        self.parts.spawn(self._abort(shard, transactional_id, answer.write),
                                         f"abort transaction {transactional_id}")
                if check_expiry:
                    expired = shard.state.expired(now, self.expiration_ms)
                    if expired:
                        self.parts.spawn(
                            self._expire(shard, expired),
                            f"expire transactional ids of {TXN_TOPIC}-{shard.index}")
            await asyncio.sleep(min(TICK_MS, self.expiration_check_ms) / 1000)

    async def _expire(self, shard: TxnShard, transactional_ids: list[str]) -> None:
        """A tombstone for each id (in one append of at most EXPIRE_BATCH_MAX; the rest wait for
        the next check), then the ids are forgotten."""
        ids = [t for t in transactional_ids[:EXPIRE_BATCH_MAX] if shard.state.begin_expire(t)]
        if not ids:
            return
        error, _ = await self.topic.append(
            shard.index, shard.leader_epoch,
            [(log_records.txn_key(t), None) for t in ids], _WRITE_ERRORS)
        if self.shards.get(shard.index) is not shard:
            return  # unloaded meanwhile: the next coordinator reads the log as it is
        for t in ids:
            if error:
                shard.state.write_failed(t)
            else:
                shard.state.expire_written(t)
        if error:
            log.info("%s-%d: expiring %d transactional ids failed: %s", TXN_TOPIC, shard.index,
                     len(ids), E(_WRITE_ERRORS.get(error, error)).name)
            return
        self.counters.expired_total += len(ids)
        log.info("%s-%d: %d transactional ids expired (no transaction for %d ms): %s",
                 TXN_TOPIC, shard.index, len(ids), self.expiration_ms,
                 ", ".join(ids[:EXPIRED_NAMED_MAX]) + (" ..." if len(ids) > EXPIRED_NAMED_MAX
                                                       else ""))

    async def _abort(self, shard: TxnShard, transactional_id: str,
                     entry: log_records.TxnLogEntry) -> None:
        if not await self._write(shard, transactional_id, entry):
            self.counters.timed_out_total += 1
            log.info("transactional id %s: aborting the transaction past its timeout of %d ms "
                     "(producer epoch now %d)", transactional_id, entry.timeout_ms,
                     entry.producer_epoch)
            self._complete_soon(shard, transactional_id)

    # ---------------------------------------------------------------------- describing
    def describe(self, transactional_id: str) -> tuple[int, TxnMetadata | None]:
        """DescribeTransactions: (error, the id's state)."""
        shard, error = self._shard(transactional_id)
        if shard is None:
            return error, None
        m = shard.state.ids.get(transactional_id)
        if m is None or m.entry.producer_epoch < 0:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return 0, m

    def list_transactions(self, states: set[Status] | None, producer_ids: set[int] | None,
                          open_longer_than_ms: int) -> tuple[int, list[TxnMetadata]]:
        """ListTransactions over the ids this broker coordinates: (error, their states).
        COORDINATOR_LOAD_IN_PROGRESS (with what is loaded) while a partition loads."""
        now = self.clock()
        error = 0
        found: list[TxnMetadata] = []
        for shard in list(self.shards.values()):
            if not self._current(shard):
                continue
            if shard.loading:
                error = E.COORDINATOR_LOAD_IN_PROGRESS
                continue
            for m in shard.state.ids.values():
                e = m.entry
                if e.producer_epoch < 0 or (states is not None and e.status not in states) or (
                        producer_ids is not None and e.producer_id not in producer_ids):
                    continue
                if open_longer_than_ms >= 0 and not (
                        e.status is Status.ONGOING and now - e.start_ms > open_longer_than_ms):
                    continue
                found.append(m)
        return error, sorted(found, key=lambda m: m.transactional_id)
