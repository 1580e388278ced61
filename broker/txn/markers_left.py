"""`MarkersLeft`: the partitions of one transaction still waiting for its COMMIT or ABORT marker,
and when to try them again: the rules of the coordinator's second phase, sans-IO (no I/O, no
clock, no asyncio). markers.py's `MarkerWriter` drives it over connections to the leaders, the
transaction simulation (tests/sim/txn_markers.py) over its simulated network.

Theory of operation
-------------------
A round sends one WriteTxnMarkers (`request`) to each leader of the partitions left, all at
once, and gives every answer back (`answered`; None for one that never came):
- a partition is done when its leader answers NONE, or INVALID_PRODUCER_EPOCH (a marker of a
  later producer epoch is already there: this one has nothing left to close);
- TRANSACTION_COORDINATOR_FENCED means a newer coordinator wrote there: `fenced` says where, and
  the driver stops (its shard is stale);
- anything else (no leader yet, a leader that moved, too few replicas, a timeout, a lost
  connection) is tried again in the next round, `retry_after_ms()` later: from retry_first_ms,
  doubling, at most retry_max_ms; a WARNING every WARN_EVERY_ATTEMPTS rounds says what is still
  missing. Whether to go on at all (we still lead the transaction's state partition) is the
  driver's to ask before each round.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from epochlog.protocol.apis.write_txn_markers import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from epochlog.protocol.error_codes import ErrorCode as E

log = logging.getLogger("epochlog.broker")

RETRY_FIRST_MS = 50
RETRY_MAX_MS = 1000
WARN_EVERY_ATTEMPTS = 60

TopicPartition = tuple[str, int]


class MarkersLeft:
    def __init__(self, transactional_id: str, producer_id: int, producer_epoch: int,
                 commit: bool, coordinator_epoch: int, partitions: Iterable[TopicPartition], *,
                 retry_first_ms: int = RETRY_FIRST_MS, retry_max_ms: int = RETRY_MAX_MS) -> None:
        self.transactional_id = transactional_id
        self.marker = (producer_id, producer_epoch, commit, coordinator_epoch)
        self.left = set(partitions)
        self.fenced: str | None = None  # where a newer coordinator's marker is
        self.attempts = 0
        self._delay_ms = retry_first_ms
        self._retry_max_ms = retry_max_ms

    def request(self, tps: Iterable[TopicPartition]) -> WriteTxnMarkersRequest:
        """The WriteTxnMarkers for these partitions (all of one leader)."""
        producer_id, producer_epoch, commit, coordinator_epoch = self.marker
        by_topic: dict[str, list[int]] = {}
        for topic, index in tps:
            by_topic.setdefault(topic, []).append(index)
        return WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in by_topic.items()])])

    def answered(self, answer: WriteTxnMarkersResponse | None) -> None:
        """A leader's answer (None: none came): the partitions it wrote leave."""
        for result in answer.markers if answer is not None else ():
            for topic in result.topics:
                for p in topic.partitions:
                    tp = (topic.name, p.partition_index)
                    if p.error_code in (0, E.INVALID_PRODUCER_EPOCH):
                        self.left.discard(tp)
                    elif p.error_code == E.TRANSACTION_COORDINATOR_FENCED and self.fenced is None:
                        self.fenced = f"{tp[0]}-{tp[1]}: a newer coordinator's marker is there"

    def retry_after_ms(self) -> int:
        """A round ended with partitions left: how long to wait before the next."""
        self.attempts += 1
        if self.attempts % WARN_EVERY_ATTEMPTS == 0:
            log.warning("transactional id %s: %s markers still missing on %s after %d attempts",
                        self.transactional_id, "COMMIT" if self.marker[2] else "ABORT",
                        sorted(self.left), self.attempts)
        delay_ms, self._delay_ms = self._delay_ms, min(self._delay_ms * 2, self._retry_max_ms)
        return delay_ms
