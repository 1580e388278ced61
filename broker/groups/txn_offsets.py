"""Offsets committed inside transactions (TxnOffsetCommit, KIP-98 and KIP-447), waiting for their
transaction's outcome.

A transactional producer that consumes too (consume-transform-produce) sends its consumer's
offsets to the group coordinator within its transaction. They are written to the group's
`__consumer_offsets` partition at once, as a transactional batch of the producer, but take effect
only when the transaction's COMMIT marker reaches that partition; an ABORT marker drops them.
Until then a read that asks for stable offsets (OffsetFetch v7 require_stable) gets
UNSTABLE_OFFSET_COMMIT for them, and other reads the last committed offset.

`PendingOffsets` is that waiting room for one offsets partition, pure: the coordinator adds what
it wrote (and, loading, what the log holds), and hands it the markers.
"""

from __future__ import annotations

from .state import CommittedOffset

TopicPartition = tuple[str, int]
GroupOffset = tuple[str, TopicPartition]  # (group id, partition)


class PendingOffsets:
    def __init__(self) -> None:
        self._by_producer: dict[int, dict[GroupOffset, CommittedOffset]] = {}
        self._counts: dict[GroupOffset, int] = {}  # how many producers hold one for it

    def add(self, producer_id: int, group_id: str, tp: TopicPartition,
            committed: CommittedOffset) -> None:
        """An offset written in producer_id's open transaction (its record_offset set)."""
        held = self._by_producer.setdefault(producer_id, {})
        if (group_id, tp) not in held:
            self._counts[(group_id, tp)] = self._counts.get((group_id, tp), 0) + 1
        held[(group_id, tp)] = committed

    def end(self, producer_id: int, commit: bool) -> list[tuple[str, TopicPartition,
                                                                CommittedOffset]]:
        """The producer's transaction ended here: what now takes effect (nothing if aborted)."""
        held = self._by_producer.pop(producer_id, {})
        for key in held:
            self._counts[key] -= 1
            if not self._counts[key]:
                del self._counts[key]
        if not commit:
            return []
        return [(group_id, tp, committed) for (group_id, tp), committed in held.items()]

    def pending(self, group_id: str, tp: TopicPartition) -> bool:
        return (group_id, tp) in self._counts

    def __len__(self) -> int:
        return len(self._counts)
