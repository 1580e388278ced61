"""`TxnCoordinator`: the transactional ids of the `__transaction_state` partitions this broker
leads (KIP-98).

Theory of operation
-------------------
A transactional id belongs to partition `abs(java_hashcode(id)) % partitions` of
`__transaction_state` (Kafka's rule), and its coordinator is that partition's leader, as a group's
is the leader of its `__consumer_offsets` partition (internal_topics.py does the finding, the
creating on first lookup, the replicated appends and the reading back for both).

    leader at a new epoch   a shard is made, LOADING (coordinator_shards.py): the partition's log
                            is replayed from its start (log_records.py) into the shard's
                            `TxnState`; requests for its ids get COORDINATOR_LOAD_IN_PROGRESS
                            meanwhile. Then ACTIVE.
    follower, offline, gone the shard is dropped: its requests get NOT_COORDINATOR, so clients
                            look up the new coordinator, which loads the same log.

Every decision is the sans-IO core's (core.py; the state machine below it, state.py): a
request either gets an error at once or a transition, which is appended to the partition and
waited for until replicated (acks=all within WRITE_TIMEOUT_MS) before it is applied (`written`)
and the request answered; a failed write leaves the id as it was (`write_failed`). Append errors
map as Kafka's transaction state manager maps them: a lost leadership is NOT_COORDINATOR, too
few replicas or a timeout COORDINATOR_NOT_AVAILABLE, both retried by clients after a new
lookup. This module is the core's asyncio shell (coordinator_driver.py does what both
coordinators' shells do alike): it feeds the core the replica manager's partition states, the
requests (each under a token, answered when the core resolves it), the appends' outcomes and
its timer, and carries out its actions: appends through internal_topics.py, the log's loading,
and the markers (markers.py's `MarkerWriter`, one task per transaction's second phase).

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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ..clock import wall_clock_ms
from ..coordinator_driver import CoordinatorDriver
from ..internal_topics import InternalTopic
from ..partition import Partition
from .core import TXN_TOPIC, ProducerIdAndEpoch, TxnCore, WriteMarkers
from .log_records import Status
from .markers import CoordinatorFenced, MarkerWriter
from .state import TxnMetadata

if TYPE_CHECKING:
    from ..parts import BrokerParts
    from ..producer_ids import ProducerIdAllocator

__all__ = ["TXN_TOPIC", "ProducerIdAndEpoch", "TxnCoordinator"]

TXN_SEGMENT_BYTES = 100 << 20  # Kafka's transaction.state.log.segment.bytes
WRITE_TIMEOUT_MS = 30_000  # Kafka's coordinator waits its request.timeout.ms for an append


class TxnCoordinator(CoordinatorDriver):
    core: TxnCore

    def __init__(self, parts: BrokerParts, producer_ids: ProducerIdAllocator, *,
                 clock: Callable[[], int] = wall_clock_ms) -> None:
        c = parts.config
        topic = InternalTopic(
            parts, TXN_TOPIC, partitions=c.transaction_state_log_num_partitions,
            replication_factor=c.transaction_state_log_replication_factor,
            configs=[("cleanup.policy", "compact"), ("segment.bytes", str(TXN_SEGMENT_BYTES))],
            timeout_ms=WRITE_TIMEOUT_MS, wall_clock=clock)
        # clock: the wall clock, the log's timestamps and the transactions' timeouts
        super().__init__(parts, topic, clock)
        self.producer_ids = producer_ids  # shared with idempotent producers (producer_ids.py)
        self.markers = MarkerWriter(parts.broker_id, parts.metadata,
                                    parts.config.listener_plan.inter_broker, parts.inter_broker_tls)
        self.core = TxnCore(
            producer_ids.allocate, partition_of=topic.partition_for,
            timeout_max_ms=c.transaction_max_timeout_ms,
            expiration_ms=c.transactional_id_expiration_ms,
            expiration_check_ms=c.transaction_remove_expired_transaction_cleanup_interval_ms)
        self.counters = self.core.counters  # the metrics read them

    # -------------------------------------------------------------------- the core's clock
    def _appended(self, append_id: int, error: int, first_offset: int) -> Sequence[object]:
        return self.core.appended(self.clock(), append_id, error, first_offset)

    def _tick(self) -> Sequence[object]:
        return self.core.tick(self.clock())

    def _perform(self, action: object) -> None:
        if isinstance(action, WriteMarkers):
            self.parts.spawn(self._write_markers(action),
                             f"complete transaction {action.transactional_id}")
        # CoordinatorAbort: nothing to do here (core.py logs and counts it)

    # -------------------------------------------------------------------- partitions, shards
    def on_partition(self, topic: str, index: int, partition: Partition | None) -> None:
        """The replica manager applied a state of one of our partitions (None: gone)."""
        if topic != TXN_TOPIC:
            return
        epoch = partition.leader_epoch if partition is not None and partition.is_leader else None
        self._run(self.core.partition_applied(index, epoch))

    def _leads(self, index: int, leader_epoch: int) -> bool:
        shard = self.core.shards.get(index)
        return (shard is not None and shard.leader_epoch == leader_epoch
                and self.topic.leading(index, leader_epoch) is not None)

    async def close(self) -> None:
        self._run(self.core.unload_all("broker stopping"))
        await self.markers.close()

    # -------------------------------------------------------------------------- requests
    async def find(self, transactional_id: str, listener: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of the transactional id's coordinator."""
        return await self.topic.find(transactional_id, listener)

    async def init_producer_id(self, transactional_id: str, timeout_ms: int,
                               expected: tuple[int, int] | None) -> ProducerIdAndEpoch:
        """InitProducerId with a transactional id: the id's producer id and a new epoch, which
        fences every earlier producer of the id."""
        self._check(transactional_id)
        return await self._call(lambda token: self.core.init_producer_id(
            self.clock(), transactional_id, timeout_ms, expected, token), ProducerIdAndEpoch)

    async def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int,
                             partitions: Sequence[tuple[str, int]]) -> int:
        """AddPartitionsToTxn (and AddOffsetsToTxn's offsets partition): an error code."""
        self._check(transactional_id)
        return await self._call(lambda token: self.core.add_partitions(
            self.clock(), transactional_id, producer_id, producer_epoch, partitions, token), int)

    async def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int,
                      commit: bool) -> int:
        """EndTxn: the decision written (Prepare*), the markers then on their way."""
        self._check(transactional_id)
        return await self._call(lambda token: self.core.end_txn(
            self.clock(), transactional_id, producer_id, producer_epoch, commit, token), int)

    # ------------------------------------------------------------------- the second phase
    async def _write_markers(self, w: WriteMarkers) -> None:
        try:
            written = await self.markers.write(
                w.transactional_id, w.producer_id, w.producer_epoch, w.commit, w.leader_epoch,
                w.partitions, lambda: self._leads(w.index, w.leader_epoch))
        except CoordinatorFenced as exc:
            self._run(self.core.markers_given_up(w, str(exc)))
            return
        if written:
            self._run(self.core.markers_done(self.clock(), w))
        else:  # no longer the coordinator: the next one writes them again
            self._run(self.core.markers_given_up(w, None))

    # ---------------------------------------------------------------------- describing
    def describe(self, transactional_id: str) -> tuple[int, TxnMetadata | None]:
        """DescribeTransactions: (error, the id's state)."""
        self._check(transactional_id)
        return self.core.describe(transactional_id)

    def list_transactions(self, states: set[Status] | None, producer_ids: set[int] | None,
                          open_longer_than_ms: int) -> tuple[int, list[TxnMetadata]]:
        """ListTransactions over the ids this broker coordinates: (error, their states).
        COORDINATOR_LOAD_IN_PROGRESS (with what is loaded) while a partition loads."""
        self._unload_lost()
        return self.core.list_transactions(self.clock(), states, producer_ids,
                                           open_longer_than_ms)

    def id_counts(self) -> dict[str, int]:
        """Ids coordinated here by state (Kafka's names), for the metrics."""
        return self.core.id_counts()
