"""The coordinator's second phase on the simulated network: `MarkerSender` mirrors
broker/txn/markers.py's `MarkerWriter.write`.

One WriteTxnMarkers (the real request, through the real codec now and then) to each leader of
the transaction's partitions left, all at once; a partition is done when its leader answers NONE
or INVALID_PRODUCER_EPOCH (a later epoch's marker is there); TRANSACTION_COORDINATOR_FENCED stops
the sender (a newer coordinator wrote there); anything else, a lost connection or a timeout
included, is tried again after a backoff (RETRY_FIRST_MS doubling to RETRY_MAX_MS) for as long
as the coordinator still leads (`still_leading`). The outcome goes to `done`: "written",
"stopped" (no longer leading) or "fenced".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.write_txn_markers import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from epochlog.protocol.error_codes import ErrorCode as E

from .txn_partitions import leader_of

if TYPE_CHECKING:
    from .network import Network
    from .scheduler import Node

TP = tuple[str, int]
RETRY_FIRST_MS = 20  # markers.py's 50 ms and 1 s, scaled down as the sim's other timeouts
RETRY_MAX_MS = 200
REQUEST_TIMEOUT_MS = 400
VERSION = 1


class MarkerSender:
    def __init__(self, node: Node, network: Network, brokers: int, producer_id: int,
                 producer_epoch: int, commit: bool, coordinator_epoch: int,
                 partitions: Iterable[TP], still_leading: Callable[[], bool],
                 done: Callable[[str], None]) -> None:
        self.node = node
        self.network = network
        self.brokers = brokers
        self.marker = (producer_id, producer_epoch, commit, coordinator_epoch)
        self.left = set(partitions)
        self.still_leading = still_leading
        self.done = done
        self.delay_ms = RETRY_FIRST_MS
        self._waiting = 0
        self._fenced = False

    def start(self) -> None:
        if not self.left:
            self.done("written")
            return
        if not self.still_leading():
            self.done("stopped")
            return
        by_leader: dict[int, list[TP]] = {}
        for tp in sorted(self.left):
            by_leader.setdefault(leader_of(tp, self.brokers), []).append(tp)
        self._waiting = len(by_leader)
        for leader, tps in by_leader.items():
            self.network.call(self.node, leader, ApiKey.WRITE_TXN_MARKERS, VERSION,
                              self._request(tps), REQUEST_TIMEOUT_MS, self._answered,
                              lambda _why: self._answered(None))

    def _request(self, tps: list[TP]) -> WriteTxnMarkersRequest:
        producer_id, producer_epoch, commit, coordinator_epoch = self.marker
        by_topic: dict[str, list[int]] = {}
        for topic, index in tps:
            by_topic.setdefault(topic, []).append(index)
        return WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in by_topic.items()])])

    def _answered(self, answer: WriteTxnMarkersResponse | None) -> None:
        for result in answer.markers if answer is not None else ():
            for topic in result.topics:
                for p in topic.partitions:
                    tp = (topic.name, p.partition_index)
                    if p.error_code in (0, E.INVALID_PRODUCER_EPOCH):
                        self.left.discard(tp)
                    elif p.error_code == E.TRANSACTION_COORDINATOR_FENCED:
                        self._fenced = True
        self._waiting -= 1
        if self._waiting:
            return
        if self._fenced:
            self.done("fenced")
        elif not self.left:
            self.done("written")
        else:
            self.node.timer(self.delay_ms, self.start)
            self.delay_ms = min(self.delay_ms * 2, RETRY_MAX_MS)
