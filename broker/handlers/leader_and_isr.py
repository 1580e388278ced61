"""LeaderAndIsr (key 4), versions 2-4. Controller to broker.

v2 carries broker_epoch (KIP-380); v3 adds adding/removing replicas (not used: no reassignment);
v4 is flexible and is what the controller sends. Before anything, a request that arrives before
the controller has confirmed our generation (no registration answer yet, or the last generation
declared over) waits for that answer, bounded (app.control_request_ready; unanswered if none
comes, so the controller resends it): a LeaderAndIsr meant for our previous process must be judged
against our own generation, never adopted as it. Then fenced (fencing.ControlEpochs.admit):
an older broker epoch is STALE_BROKER_EPOCH, so the first LeaderAndIsr a restarted broker
processes can never be one sent before it started; an older controller epoch is
STALE_CONTROLLER_EPOCH; either way nothing is applied.

An admitted request is applied: first the settings of its topics, which every topic state
carries (epochlog's tagged field `configs`, protocol/apis/leader_and_isr.py;
replicas.ReplicaManager.take_topic_settings), so the logs it opens are created with them and a
change reaches the partitions open here; then each partition state, applied when newer
(replicas.ReplicaManager.apply_partition_state; not newer: per-partition STALE_CONTROLLER_EPOCH).
The first LeaderAndIsr of a generation from a controller epoch lists every partition placed here:
local partitions it leaves out are deleted.

Partition states are applied in slices (SLICE_PARTITIONS_MAX, or SLICE_MS_MAX of work), giving
the event loop YIELD_MS between slices: one naming 10,000 partitions, each opening or creating a
log, held the loop for minutes, so heartbeats went unsent and the controller ended our generation
(issue 33). Before each slice after the first the request must still be admitted
(fencing.ControlEpochs.still_admits): if our generation ended or a newer controller spoke
meanwhile, the rest is not applied, nothing is deleted, and the answer is that top-level error
(what was applied stays: it came before the newer event). Otherwise the answer is sent once every
partition is applied, as before. The deterministic simulation's broker (tests/sim) calls `apply`,
which applies it all at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.leader_and_isr import (
    LeaderAndIsrPartitionError,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
)

from ..partition import PartitionState
from . import register
from ._context import replicas_of
from ._control import admitted, carried_settings

if TYPE_CHECKING:
    from ._context import BrokerApp, RequestContext

log = logging.getLogger("epochlog.broker")

SLICE_PARTITIONS_MAX = 200  # partition states applied between two yields to the event loop,
SLICE_MS_MAX = 50  # or fewer when these have passed (creating a log fsyncs: a few ms each)
YIELD_MS = 2  # the loop's own between slices: a request's round trip takes a few loop turns


async def handle(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse | None:
    app = ctx.app
    error = await admitted(app, "LeaderAndIsr", request)
    if error is None:
        return None  # no generation to judge it against: unanswered, the controller resends
    if error:
        return LeaderAndIsrResponse(error_code=error)
    applying = Applying(app, request)
    generation = app.epochs.generation
    clock = replicas_of(app).clock
    while not applying.step(SLICE_PARTITIONS_MAX, clock() + SLICE_MS_MAX, clock):
        await asyncio.sleep(YIELD_MS / 1000)  # heartbeats, fetches, produces go on meanwhile
        error = app.epochs.still_admits("LeaderAndIsr", generation, request.controller_epoch)
        if error:
            log.info("broker %d: LeaderAndIsr of %d partitions stopped after %d: fenced "
                     "meanwhile", app.broker_id, applying.total, len(applying.listed))
            return LeaderAndIsrResponse(error_code=error)
    return applying.finish()


def apply(app: BrokerApp, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    """An admitted LeaderAndIsr, all at once (the simulation's broker)."""
    applying = Applying(app, request)
    while not applying.step(applying.total):
        pass  # one step does it all (no deadline)
    return applying.finish()


class Applying:
    """One admitted LeaderAndIsr being applied: its topics' settings at once, then its
    partition states a slice at a time; `finish` once all are applied."""

    def __init__(self, app: BrokerApp, request: LeaderAndIsrRequest) -> None:
        self.app = app
        self.request = request
        self.replicas = replicas_of(app)
        self.replicas.take_topic_settings(carried_settings(request.topic_states))
        self.states = [(topic.topic_name, ps) for topic in request.topic_states
                       for ps in topic.partition_states]
        self.total = len(self.states)
        self.errors: list[LeaderAndIsrPartitionError] = []
        self.listed: list[tuple[str, int]] = []

    def step(self, count: int, deadline_ms: int | None = None,
             clock: Callable[[], int] | None = None) -> bool:
        """Apply up to count more partition states, stopping early once clock() reaches
        deadline_ms; True when all are applied."""
        start = len(self.listed)
        with self.replicas.logs.creating_logs():  # one fsync of the data dir per slice
            for topic_name, ps in self.states[start:start + count]:
                if (deadline_ms is not None and clock is not None and len(self.listed) > start
                        and clock() >= deadline_ms):
                    break
                state = PartitionState(ps.leader, ps.leader_epoch, ps.partition_epoch,
                                       tuple(ps.replicas), tuple(ps.isr), ps.controller_epoch)
                code = self.replicas.apply_partition_state(topic_name, ps.partition_index,
                                                           state, ps.is_new)
                self.listed.append((topic_name, ps.partition_index))
                self.errors.append(LeaderAndIsrPartitionError(
                    topic_name=topic_name, partition_index=ps.partition_index,
                    error_code=code))
        return len(self.listed) == self.total

    def finish(self) -> LeaderAndIsrResponse:
        """After the last slice, with no await since the last admission check: the partitions
        a generation's first LeaderAndIsr leaves out are deleted, and the answer."""
        assert len(self.listed) == self.total, "a LeaderAndIsr answered before all was applied"
        app, replicas, request = self.app, self.replicas, self.request
        generation = app.epochs.generation
        first = replicas.synced_at != (generation, request.controller_epoch)
        deleted = replicas.forget_unlisted(self.listed, generation, request.controller_epoch)
        if first:
            log.info("broker %d generation %d: first LeaderAndIsr from controller epoch %d: %d "
                     "partitions, leading %d, %d deleted as no longer ours", app.broker_id,
                     generation, request.controller_epoch, len(self.listed),
                     replicas.leader_count(), len(deleted))
        return LeaderAndIsrResponse(partition_errors=self.errors)


register(ApiKey.LEADER_AND_ISR, 2, 4, handle)
