"""What a read_committed consumer drops (KIP-98): the records of aborted transactions.

A read_committed Fetch answer lists, per partition, the aborted transactions that hold offsets
of the records it carries, as (producer id, first offset). Walking the batches in offset order, a
transaction becomes "aborted here" once a batch reaches its first offset; from then on that
producer's transactional batches are dropped, until its ABORT marker (a control batch) ends it.
Kafka's consumers do the same; committed transactions need nothing (no entry, nothing dropped).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from epochlog.protocol.batch import CONTROL_MASK, TRANSACTIONAL_MASK, BatchHeader, CorruptBatch
from epochlog.protocol.control_records import read_marker


class AbortedTransactions:
    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._pending = [(first, producer_id) for producer_id, first in aborted]
        heapq.heapify(self._pending)
        self._producers: set[int] = set()  # whose aborted transaction we are inside

    def drops(self, header: BatchHeader, data: bytes | memoryview, pos: int) -> bool:
        """Whether the batch at data[pos:] belongs to an aborted transaction (a marker ending
        one is not dropped here: control batches are skipped anyway)."""
        if not header.attributes & TRANSACTIONAL_MASK:
            return False
        while self._pending and self._pending[0][0] <= header.last_offset:
            self._producers.add(heapq.heappop(self._pending)[1])
        if header.producer_id not in self._producers:
            return False
        if header.attributes & CONTROL_MASK:
            try:
                ends = not read_marker(data[pos:pos + header.size]).commit
            except CorruptBatch:
                ends = False
            if ends:
                self._producers.discard(header.producer_id)
            return False
        return True
