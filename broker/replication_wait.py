"""acks=all: waiting until the ISR has what a leader appended, for Produce, WriteTxnMarkers and
the coordinators' writes to their internal topics (internal_topics.py).

`replication_error` is the decision for one partition, a plain function: None while waiting,
else the answer's error code, as Kafka's checkEnoughReplicasReachOffset. `ReplicationWait` is
a request's wait over its partitions (sans-IO: `settled(final)`), which the simulation re-checks
after every event; `wait_for_replication` is its asyncio driver, on the produce purgatory, until
every partition has its answer or the timeout (REQUEST_TIMED_OUT).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from epochlog.protocol.error_codes import ErrorCode

from .partition import Partition

if TYPE_CHECKING:
    from .replicas import ReplicaManager

E = ErrorCode


def _still_leading(replicas: ReplicaManager, partition: Partition, epoch: int) -> bool:
    return (replicas.get(partition.topic, partition.index) is partition
            and partition.is_leader and partition.leader_epoch == epoch)


def replication_error(replicas: ReplicaManager, partition: Partition, epoch: int,
                      last_offset: int) -> int | None:
    """acks=all for one appended partition: None while waiting, else the answer's error code
    (Kafka's checkEnoughReplicasReachOffset)."""
    leading = _still_leading(replicas, partition, epoch)
    if partition.high_watermark > last_offset:
        # Committed by the ISR, whatever happened to our leadership since; while we lead, the
        # ISR it was committed by must still be big enough.
        if leading and partition.under_min_isr(maximal=True):
            return E.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return 0
    return None if leading else E.NOT_LEADER_OR_FOLLOWER


class _Answer(Protocol):
    error_code: int


Wait = tuple[_Answer, Partition, int, int]  # (answer, partition, leader epoch, last offset)


class ReplicationWait:
    """acks=all for one request: every appended partition waits until the ISR holds its last
    offset (replication_error). Re-checked on a poke; at the deadline, final."""

    __slots__ = ("replicas", "waits")

    def __init__(self, replicas: ReplicaManager, waits: Sequence[Wait]) -> None:
        self.replicas = replicas
        self.waits = waits

    def keys(self) -> list[tuple[str, int]]:
        """The partitions it waits on (what pokes it)."""
        return [(p.topic, p.index) for _, p, _, _ in self.waits]

    def answered(self) -> bool:
        """Every partition has its answer (0 or an error): nothing left to wait for."""
        return all(replication_error(self.replicas, p, epoch, last) is not None
                   for _, p, epoch, last in self.waits)

    def settled(self, final: bool = False) -> bool:
        """True, with each answer's error code set (0 if committed), once every partition has
        its answer, or at the deadline (final: those still waiting REQUEST_TIMED_OUT); False
        while one waits (no answer touched)."""
        if not final and not self.answered():
            return False
        for answer, p, epoch, last in self.waits:
            error = replication_error(self.replicas, p, epoch, last)
            answer.error_code = E.REQUEST_TIMED_OUT if error is None else error
        return True


async def wait_for_replication(replicas: ReplicaManager, waits: Sequence[Wait],
                               timeout_ms: int) -> None:
    """acks=all: until every appended partition's high watermark passes its last offset; then
    each (answer, partition, leader epoch, last offset) gets its error code (0 if committed).
    Produce and WriteTxnMarkers wait this way, in the produce purgatory."""
    wait = ReplicationWait(replicas, waits)
    if not wait.settled():
        await replicas.produce_purgatory.wait_until(wait.keys(), wait.answered, timeout_ms)
        wait.settled(final=True)
