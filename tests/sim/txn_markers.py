"""The coordinator's second phase on the simulated network: `MarkerSender` carries out the core's
`WriteMarkers` by driving the broker's `MarkersLeft` (broker/txn/markers_left.py: which
partitions are done, a newer coordinator's marker stopping us, the backoff between rounds) as
markers.py's `MarkerWriter.write` does.

Each round, one WriteTxnMarkers (the real request, through the real codec now and then) to each
leader of the transaction's partitions left, all at once, while the coordinator still leads
(`still_leading`); a lost connection or a timeout is an answer that never came. The outcome goes
to `done`: "written", "stopped" (no longer leading) or "fenced" (with where).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from epochlog.broker.txn.core import WriteMarkers
from epochlog.broker.txn.markers_left import MarkersLeft
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.write_txn_markers import WriteTxnMarkersResponse

from .txn_partitions import leader_of

if TYPE_CHECKING:
    from .network import Network
    from .scheduler import Node

TP = tuple[str, int]
RETRY_FIRST_MS = 20  # markers_left.py's 50 ms and 1 s, scaled down as the sim's other timeouts
RETRY_MAX_MS = 200
REQUEST_TIMEOUT_MS = 400
VERSION = 1


class MarkerSender:
    def __init__(self, node: Node, network: Network, brokers: int, w: WriteMarkers,
                 still_leading: Callable[[], bool], done: Callable[[str, str | None], None]
                 ) -> None:
        self.node = node
        self.network = network
        self.brokers = brokers
        self.markers = MarkersLeft(w.transactional_id, w.producer_id, w.producer_epoch,
                                   w.commit, w.leader_epoch, w.partitions,
                                   retry_first_ms=RETRY_FIRST_MS, retry_max_ms=RETRY_MAX_MS)
        self.still_leading = still_leading
        self.done = done
        self._waiting = 0

    def start(self) -> None:
        if not self.markers.left:
            self.done("written", None)
            return
        if not self.still_leading():
            self.done("stopped", None)
            return
        by_leader: dict[int, list[TP]] = {}
        for tp in sorted(self.markers.left):
            by_leader.setdefault(leader_of(tp, self.brokers), []).append(tp)
        self._waiting = len(by_leader)
        for leader, tps in by_leader.items():
            self.network.call(self.node, leader, ApiKey.WRITE_TXN_MARKERS, VERSION,
                              self.markers.request(tps), REQUEST_TIMEOUT_MS, self._answered,
                              lambda _why: self._answered(None))

    def _answered(self, answer: WriteTxnMarkersResponse | None) -> None:
        self.markers.answered(answer)
        self._waiting -= 1
        if self._waiting:
            return
        if self.markers.fenced is not None:
            self.done("fenced", self.markers.fenced)
        elif not self.markers.left:
            self.done("written", None)
        else:
            self.node.timer(self.markers.retry_after_ms(), self.start)
