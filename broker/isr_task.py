"""The broker's ISR task: drives `isr.IsrManager` on the event loop and talks to the controller.

When it runs is `isr_schedule.IsrSchedule`'s (sans-IO): every `replica_lag_time_max_ms / 2`
(at least TICK_MS_MIN), or sooner when a follower outside the ISR has caught up
(`Partition.on_isr_candidate` wakes it; runs at least WAKE_GAP_MS apart) or a retry is due. A
run asks the manager for due proposals and sends them in AlterPartition requests to the
controller (ControllerLink.alter_partition, its own connection), one at a time, then hands each
partition's answer back to the manager and pokes the partitions that changed, so acks=all
waiters re-check. A connection failure or a top-level error is each proposal's answer (retried
with backoff).

Version: AlterPartition v2+ names topics by id, and no control request gives a broker topic ids
(LeaderAndIsr v4, UpdateMetadata v6 carry names only), so we send at most v1, by name; the
controller still checks that every new member is a live, unfenced broker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from epochlog.protocol.apis.alter_partition import (
    AlterPartitionPartitionData,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionTopicData,
)
from epochlog.protocol.error_codes import ErrorCode

from .controller_link import ControllerUnavailable
from .isr import IsrManager, IsrProposal
from .isr_schedule import IsrSchedule
from .partition import Partition, PartitionState
from .parts import BrokerParts
from .replicas import ReplicaManager

log = logging.getLogger("epochlog.broker")

ALTER_PARTITION_VERSION_MAX = 1  # see the module docstring: v2+ needs topic ids


def build_request(broker_id: int, broker_epoch: int,
                  proposals: list[IsrProposal]) -> AlterPartitionRequest:
    topics: dict[str, AlterPartitionTopicData] = {}
    for pr in proposals:
        topic = topics.setdefault(pr.topic, AlterPartitionTopicData(topic_name=pr.topic))
        topic.partitions.append(AlterPartitionPartitionData(
            partition_index=pr.index, leader_epoch=pr.leader_epoch,
            partition_epoch=pr.partition_epoch, new_isr=list(pr.isr)))
    return AlterPartitionRequest(broker_id=broker_id, broker_epoch=broker_epoch,
                                 topics=list(topics.values()))


def read_answers(answer: Any, proposals: list[IsrProposal], replicas_of: dict[tuple[str, int],
                 tuple[int, ...]]) -> list[tuple[IsrProposal, int, PartitionState | None]]:
    """Each proposal with its error and the answered state (None where there is none)."""
    if answer.error_code:
        return [(pr, answer.error_code, None) for pr in proposals]
    found: dict[tuple[str, int], tuple[int, PartitionState | None]] = {}
    for t in answer.topics:
        for p in t.partitions:
            key = (t.topic_name, p.partition_index)
            state = None
            if p.leader_epoch >= 0 and key in replicas_of:
                state = PartitionState(p.leader_id, p.leader_epoch, p.partition_epoch,
                                       replicas_of[key], tuple(p.isr))
            found[key] = (p.error_code, state)
    return [(pr, *found.get((pr.topic, pr.index), (ErrorCode.UNKNOWN_SERVER_ERROR, None)))
            for pr in proposals]


class IsrTask:
    def __init__(self, parts: BrokerParts, manager: IsrManager) -> None:
        self.parts = parts
        self.manager = manager
        self.schedule = IsrSchedule(manager)  # when to run: isr_schedule.py
        self._wake = asyncio.Event()

    def wake(self, partition: Partition | None = None) -> None:
        self.schedule.wake(self.manager.clock())
        self._wake.set()

    async def run(self) -> None:
        """Run when the schedule says, sending what it says, one request at a time."""
        schedule, clock = self.schedule, self.manager.clock
        schedule.start(clock())
        while True:
            deadline = schedule.next_deadline_ms()
            assert deadline is not None, "between runs the schedule always has a deadline"
            try:
                async with asyncio.timeout(max(0, deadline - clock()) / 1000):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            actions = schedule.tick(clock(), list(self.parts.replicas.partitions.values()))
            while actions:
                [send] = actions
                await self._send(list(send.proposals))
                actions = schedule.answered(clock())

    async def _send(self, proposals: list[IsrProposal]) -> None:
        parts = self.parts
        request = build_request(parts.broker_id, parts.epochs.generation, proposals)
        try:
            answer = await parts.controller.alter_partition(request, ALTER_PARTITION_VERSION_MAX)
        except ControllerUnavailable as exc:
            log.debug("AlterPartition not sent: %s", exc)
            answer = None
        apply_answer(parts.replicas, self.manager, proposals, answer)


def apply_answer(replicas: ReplicaManager, manager: IsrManager, proposals: list[IsrProposal],
                 answer: AlterPartitionResponse | None) -> None:
    """An AlterPartition answer (None: it could not be sent) applied to each proposal's
    partition through the IsrManager; partitions that changed are poked. Sync, so the
    simulation applies answers with this same code."""
    results: list[tuple[IsrProposal, int, PartitionState | None]]
    if answer is None:
        results = [(pr, int(ErrorCode.NETWORK_EXCEPTION), None) for pr in proposals]
    else:
        replicas_of = {}
        for pr in proposals:
            p = replicas.get(pr.topic, pr.index)
            if p is not None and p.state is not None:
                replicas_of[(pr.topic, pr.index)] = p.state.replicas
        results = read_answers(answer, proposals, replicas_of)
    for proposal, error, state in results:
        partition = replicas.get(proposal.topic, proposal.index)
        if partition is not None and manager.on_answer(partition, proposal, error, state):
            replicas.poke((proposal.topic, proposal.index))
