"""Producer ids for idempotent producers (InitProducerId without a transactional id).

Kafka's controller hands brokers blocks of producer ids; ours does not, so a broker makes ids that
no other broker and no earlier run of itself can make:

    producer_id = (broker_id << 40) | counter        (broker ids < 2**23: config.BROKER_ID_MAX)

The counter's next free block is kept in `<data-dir>/producer-id-block` (text: the version `0`,
then the first counter value not yet handed out). Before any id of a block is given out, the
file is rewritten (temp file, fsync, rename: storage's write_atomically) to point past the
block, so after a crash at most the rest of one block is skipped and nothing repeats. A block is
`BLOCK_IDS` ids; a counter that would pass 2**40 is a broken invariant (a trillion producers).
"""

from __future__ import annotations

import os

from .storage.checkpoints import write_atomically

FILE_NAME = "producer-id-block"
BROKER_SHIFT = 40
COUNTER_MAX = (1 << BROKER_SHIFT) - 1
BLOCK_IDS = 1000
FILE_BYTES_MAX = 4096


class ProducerIdFileError(ValueError):
    """The producer-id-block file does not hold what we write there."""


class ProducerIdAllocator:
    def __init__(self, data_dir: str, broker_id: int) -> None:
        self.path = os.path.join(data_dir, FILE_NAME)
        self.broker_id = broker_id
        self._next = self._read()  # next counter value to hand out
        self._block_end = self._next  # counter values below this are reserved on disk

    def _read(self) -> int:
        if not os.path.exists(self.path):
            return 0
        with open(self.path, "rb") as f:
            data = f.read(FILE_BYTES_MAX + 1)
        lines = data.decode("ascii", "replace").split("\n")
        if len(data) > FILE_BYTES_MAX or len(lines) != 3 or lines[0] != "0" or lines[2] != "" \
                or not lines[1].isdigit():
            raise ProducerIdFileError(f"{self.path}: expected '0' and a counter, got {data!r}")
        return int(lines[1])

    def allocate(self) -> int:
        """A new producer id; OSError if the next block cannot be reserved on disk (then
        nothing changed: no id is handed out that a restart could hand out again)."""
        if self._next >= self._block_end:
            block_end = self._next + BLOCK_IDS
            assert block_end <= COUNTER_MAX, "producer id counter exhausted"
            write_atomically(self.path, f"0\n{block_end}\n".encode())
            self._block_end = block_end
        counter = self._next
        self._next += 1
        return (self.broker_id << BROKER_SHIFT) | counter
