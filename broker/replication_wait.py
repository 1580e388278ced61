"""acks=all: waiting until the ISR has what a leader appended, for Produce, WriteTxnMarkers and
the coordinators' writes to their internal topics (internal_topics.py).

`replication_error` is the decision, a plain function (a simulation calls it without an event
loop): None while waiting, else the answer's error code, as Kafka's
checkEnoughReplicasReachOffset; `wait_for_replication` waits on the produce purgatory until every
partition has its answer, or the timeout (REQUEST_TIMED_OUT).
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


async def wait_for_replication(replicas: ReplicaManager,
                               waits: Sequence[tuple[_Answer, Partition, int, int]],
                               timeout_ms: int) -> None:
    """acks=all: until every appended partition's high watermark passes its last offset; then
    each (answer, partition, leader epoch, last offset) gets its error code (0 if committed).
    Produce and WriteTxnMarkers wait this way."""
    await replicas.produce_purgatory.wait_until(
        [(p.topic, p.index) for _, p, _, _ in waits],
        lambda: all(replication_error(replicas, p, epoch, last) is not None
                    for _, p, epoch, last in waits), timeout_ms)
    for answer, p, epoch, last in waits:
        error = replication_error(replicas, p, epoch, last)
        answer.error_code = E.REQUEST_TIMED_OUT if error is None else error
