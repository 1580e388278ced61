"""A simulated broker of the transaction simulation: leader of some data partitions (real logs,
txn_partitions.py) and, while it leads `__transaction_state`, the transaction coordinator (the
real core, driven by txn_coordinator.py's `Coordinator`).

Requests it serves, as the real handlers would answer them:
- FIND (the simulation's FindCoordinator with key type 1): the coordinator of the moment, from
  any broker (COORDINATOR_NOT_AVAILABLE between leaders);
- InitProducerId v3, AddPartitionsToTxn v3, EndTxn v3 (the real messages): the core's answers
  (NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS included);
- PRODUCE (the simulation's: one partition, one real transactional batch; the answer is
  (error, base offset)), appended as produce.py's `append` does;
- WriteTxnMarkers v1 (the real message): each partition's marker appended as
  write_txn_markers.py's `_append` does; a partition led elsewhere is NOT_LEADER_OR_FOLLOWER.

The checkers hear of every batch and marker a log accepted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from epochlog.broker.txn.core import ProducerIdAndEpoch
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from epochlog.protocol.apis.end_txn import EndTxnRequest, EndTxnResponse
from epochlog.protocol.apis.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from epochlog.protocol.apis.write_txn_markers import (
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from epochlog.protocol.batch import read_header
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import decode_batch

from .scheduler import Node, Scheduler
from .txn_coordinator import Coordinator, TxnLog
from .txn_partitions import PartitionStore

if TYPE_CHECKING:
    from .network import Network
    from .txn_checkers import TxnCheckers

FIND = -20  # request: the transactional id; answer: (error, node id)
PRODUCE = -21  # request: (tp, batch bytes); answer: (error, base offset)
TP = tuple[str, int]


class TxnBroker(Node):
    def __init__(self, sim: Scheduler, node_id: int, network: Network, txn_log: TxnLog,
                 data_dir: str, tps: list[TP], checkers: TxnCheckers, segment_bytes: int,
                 broken: str = "") -> None:
        super().__init__(sim, node_id, f"broker{node_id}")
        self.network = network
        self.txn_log = txn_log
        self.checkers = checkers
        self.broken = broken
        self.store = PartitionStore(os.path.join(data_dir, f"broker{node_id}"), tps, sim.clock,
                                    segment_bytes)
        self.coordinator: Coordinator | None = None  # this process life's

    # ------------------------------------------------------------------------ lifecycle
    def on_start(self) -> None:
        self.store.open(self.life, skip_marker_check=self.broken == "no_marker_check")
        self.coordinator = Coordinator(self)
        self.coordinator.after_event()  # its first tick

    def on_crash(self) -> None:
        self.network.crashed(self)  # the kernel closes our connections at once
        self.store.close()
        self.coordinator = None
        self.txn_log.lost(self.node_id)

    def after_event(self) -> None:
        if self.coordinator is not None:
            self.coordinator.after_event()

    def not_leader(self, epoch: int) -> None:
        """A LeaderAndIsr of `epoch` names another leader of `__transaction_state`."""
        if self.coordinator is not None:
            self.coordinator.not_leader(epoch)

    @property
    def loading(self) -> bool:
        return self.coordinator is not None and self.coordinator.loading

    # ------------------------------------------------------------------------ requests
    def serve(self, key: int, version: int, request: Any, reply: Callable[[Any], None],
              source: int, conn: Any = None) -> None:
        if key == FIND:
            leader = self.txn_log.leader
            reply((E.COORDINATOR_NOT_AVAILABLE, -1) if leader is None else (0, leader))
        elif key == PRODUCE:
            reply(self._produce(*request))
        elif key == ApiKey.WRITE_TXN_MARKERS:
            reply(self._markers(request))
        else:
            assert self.coordinator is not None
            _COORDINATOR_HANDLERS[key](self.coordinator, request, reply)

    def _produce(self, tp: TP, batch: bytes) -> tuple[int, int]:
        if tp not in self.store.logs:
            return E.NOT_LEADER_OR_FOLLOWER, -1
        appended = self.store.produce(tp, batch)
        header = read_header(batch)
        if appended.error:
            self.sim.log(f"{self.name}: {tp[0]}-{tp[1]} refused a batch of producer "
                         f"{header.producer_id} epoch {header.producer_epoch}: "
                         f"{E(appended.error).name}")
            self.checkers.refused(f"batch_{E(appended.error).name}")
            return appended.error, -1
        _, records = decode_batch(batch)
        self.checkers.appended(tp, appended.offset, header.producer_id, header.producer_epoch,
                               [r.value or b"" for r in records])
        return 0, appended.offset

    def _markers(self, request: WriteTxnMarkersRequest) -> WriteTxnMarkersResponse:
        results = []
        for m in request.markers:
            topics = []
            for t in m.topics:
                answers = []
                for index in t.partition_indexes:
                    error = self._marker((t.name, index), m.producer_id, m.producer_epoch,
                                         m.transaction_result, m.coordinator_epoch)
                    answers.append(WritableTxnMarkerPartitionResult(partition_index=index,
                                                                    error_code=error))
                topics.append(WritableTxnMarkerTopicResult(name=t.name, partitions=answers))
            results.append(WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
        return WriteTxnMarkersResponse(markers=results)

    def _marker(self, tp: TP, producer_id: int, producer_epoch: int, commit: bool,
                coordinator_epoch: int) -> int:
        if tp not in self.store.logs:
            return E.NOT_LEADER_OR_FOLLOWER
        appended = self.store.marker(tp, producer_id, producer_epoch, commit, coordinator_epoch)
        what = (f"{'COMMIT' if commit else 'ABORT'} marker of producer {producer_id} epoch "
                f"{producer_epoch} from coordinator epoch {coordinator_epoch}")
        if appended.error:
            self.sim.log(f"{self.name}: {tp[0]}-{tp[1]} refused a {what}: "
                         f"{E(appended.error).name}")
            self.checkers.refused(f"marker_{E(appended.error).name}")
            return appended.error
        self.sim.log(f"{self.name}: {tp[0]}-{tp[1]} offset {appended.offset}: {what}")
        self.checkers.marker(tp, producer_id, producer_epoch, commit, coordinator_epoch)
        return 0


def _init(c: Coordinator, req: InitProducerIdRequest, reply: Callable[[Any], None]) -> None:
    tid = req.transactional_id or ""
    expected = (req.producer_id, req.producer_epoch) if req.producer_id >= 0 else None

    def answer(r: ProducerIdAndEpoch) -> None:
        if not r.error:
            c.checkers.handed_out(tid, r.producer_id, r.producer_epoch)
        reply(InitProducerIdResponse(error_code=r.error, producer_id=r.producer_id,
                                     producer_epoch=r.producer_epoch))

    c.ask(answer, lambda token: c.core.init_producer_id(c.now(), tid, req.transaction_timeout_ms,
                                                        expected, token))


def _add(c: Coordinator, req: AddPartitionsToTxnRequest, reply: Callable[[Any], None]) -> None:
    def answer(e: int) -> None:
        reply(AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[
            AddPartitionsToTxnTopicResult(name=t.name, results_by_partition=[
                AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=e)
                for p in t.partitions]) for t in req.v3_and_below_topics]))

    c.ask(answer, lambda token: c.core.add_partitions(
        c.now(), req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
        req.v3_and_below_producer_epoch,
        [(t.name, p) for t in req.v3_and_below_topics for p in t.partitions], token))


def _end(c: Coordinator, req: EndTxnRequest, reply: Callable[[Any], None]) -> None:
    c.ask(lambda e: reply(EndTxnResponse(error_code=e)), lambda token: c.core.end_txn(
        c.now(), req.transactional_id, req.producer_id, req.producer_epoch, req.committed,
        token))


_COORDINATOR_HANDLERS: dict[int, Callable[..., None]] = {
    ApiKey.INIT_PRODUCER_ID: _init,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add,
    ApiKey.END_TXN: _end,
}
