"""A simulated client producing acks=all batches, and recording what was acknowledged.

One request in flight at a time. It learns leaders by asking a random broker's metadata cache
(the simulation's own METADATA_KEY request: what a Metadata request would answer), sends Produce
v9 with the KIP-359 CurrentLeaderEpoch it believes, and forgets the leader on any error or
timeout. Each record's value is unique, so an acknowledgement names exactly which payload must be
found at which offset: the checkers hold the cluster to it. Not idempotent: a retry is a new
batch (a duplicate is no loss, and the checkers only follow acknowledged offsets).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.records import build_batch

from .broker_node import METADATA_KEY
from .scheduler import Node, Scheduler

if TYPE_CHECKING:
    from .checkers import Checkers
    from .harness import Settings
    from .network import Network

THINK_MS_MAX = 40
RECORDS_PER_BATCH_MAX = 3


class SimProducer(Node):
    def __init__(self, sim: Scheduler, net: Network, settings: Settings, node_id: int,
                 partitions: list[tuple[str, int]], brokers: list[int],
                 checkers: Checkers) -> None:
        super().__init__(sim, node_id, f"producer{node_id}")
        self.net = net
        self.settings = settings
        self.partitions = partitions
        self.brokers = brokers
        self.checkers = checkers
        self.leaders: dict[tuple[str, int], tuple[int, int]] = {}
        self.sequence = 0
        self.active = True
        self.sent = 0
        self.acked = 0
        self.errors: dict[int, int] = {}

    def on_start(self) -> None:
        self.timer(self.sim.rng.randint(0, THINK_MS_MAX), self._next)

    def _again(self, delay_ms: int | None = None) -> None:
        if self.active:
            self.timer(self.sim.rng.randint(0, THINK_MS_MAX) if delay_ms is None else delay_ms,
                       self._next)

    def _next(self) -> None:
        if not self.active:
            return
        tp = self.sim.rng.choice(self.partitions)
        known = self.leaders.get(tp)
        if known is None:
            self._ask_metadata(tp)
            return
        leader, epoch = known
        self.sequence += 1
        count = self.sim.rng.randint(1, RECORDS_PER_BATCH_MAX)
        values = [f"{self.name}-{self.sequence}-{i}".encode() for i in range(count)]
        batch = build_batch([(None, v, None, self.sim.now_ms) for v in values])
        request = ProduceRequest(acks=-1, timeout_ms=self.settings.produce_timeout_ms,
                                 topic_data=[TopicProduceData(name=tp[0], partition_data=[
                                     PartitionProduceData(index=tp[1], records=batch,
                                                          current_leader_epoch=epoch)])])
        self.sent += 1
        self.net.call(self, leader, 0, 9, request,
                      self.settings.produce_timeout_ms + self.settings.request_timeout_ms,
                      lambda answer: self._answered(tp, leader, epoch, values, answer),
                      lambda reason: self._failed(tp))

    def _answered(self, tp: tuple[str, int], leader: int, epoch: int, values: list[bytes],
                  answer: Any) -> None:
        part = answer.responses[0].partition_responses[0]
        if part.error_code == 0:
            self.acked += 1
            self.checkers.on_ack(tp, part.base_offset, values, leader, epoch)
            self._again()
            return
        self.errors[part.error_code] = self.errors.get(part.error_code, 0) + 1
        self.leaders.pop(tp, None)
        self._again(self.settings.retry_backoff_ms)

    def _failed(self, tp: tuple[str, int]) -> None:
        self.leaders.pop(tp, None)
        self._again(self.settings.retry_backoff_ms)

    def _ask_metadata(self, tp: tuple[str, int]) -> None:
        broker = self.sim.rng.choice(self.brokers)
        self.net.call(self, broker, METADATA_KEY, 0, tp, self.settings.request_timeout_ms,
                      lambda info: self._learned(tp, info), lambda reason: self._failed(tp))

    def _learned(self, tp: tuple[str, int], info: Any) -> None:
        if info is not None and info.leader >= 0:
            self.leaders[tp] = (info.leader, info.leader_epoch)
            self._again(0)
        else:
            self._again(self.settings.retry_backoff_ms)
