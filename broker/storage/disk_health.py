"""`DiskHealth`: whether the data dir takes writes, as the broker's logs and metrics tell it.

A write that fails (ENOSPC on a full disk, EIO, EDQUOT...) is undone where it can be (a segment
is cut back to where the write began, a checkpoint's temp file removed) and reported here; the
caller answers with KAFKA_STORAGE_ERROR (`DiskWriteFailed`) or tries again on its next interval.
Reads go on from what is on disk. One log line when writes start failing, naming what failed and
why, and one when they succeed again: never a line per failed request. The failing state ends
with a successful write (log data or the checkpoints, written every few seconds) once no write has
failed for RECOVERED_AFTER_MS: on a nearly full disk small writes fit between refused big ones,
and that is not yet recovery. Writes are never refused because of the state: each is tried.

Running out of file descriptors (EMFILE, ENFILE) is no failure of the disk: `failed` answers it
with DescriptorsExhausted (descriptors.py), counts nothing and changes no state.

An fsync that fails is not a failed write: what was written may have been dropped from the page
cache, so the broker stops (broker/replicas.py's flush) and recovery checks the log at the next
start, as Kafka halts on a failed log dir that is its only one. That next start waits, up and
serving nothing, until the data dir makes a write durable again (durability.py), so a supervisor
that restarts the broker does not loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from .descriptors import exhausted, is_exhaustion
from .errors import DescriptorsExhausted, DiskWriteFailed

log = logging.getLogger("epochlog.storage")
RECOVERED_AFTER_MS = 10_000


class DiskHealth:
    def __init__(self, data_dir: str, clock: Callable[[], int]) -> None:
        self.data_dir = data_dir
        self.clock = clock
        self.last_failure_ms = 0
        self.failing = False
        self.failures_total = 0
        self.last_error = ""
        self._failures_before = 0  # failures_total when the failing state began

    def failed(self, what: str, exc: OSError) -> DiskWriteFailed | DescriptorsExhausted:
        """Count a failed write; the exception for the caller to raise (or keep). Out of file
        descriptors is not the disk's failure: not counted, the state unchanged, said in a
        rate-limited line instead (descriptors.py)."""
        if is_exhaustion(exc):
            return exhausted(what, exc)
        error = DiskWriteFailed(what, exc)
        self.failures_total += 1
        self.last_failure_ms = self.clock()
        self.last_error = str(error)
        if not self.failing:
            self.failing = True
            self._failures_before = self.failures_total - 1
            log.error("data dir %s: %s: writes are refused with KAFKA_STORAGE_ERROR until "
                      "the disk takes them again; reads go on", self.data_dir, error)
        return error

    def succeeded(self) -> None:
        if self.failing and self.clock() - self.last_failure_ms >= RECOVERED_AFTER_MS:
            self.failing = False
            log.info("data dir %s: writes succeed again (%d failed meanwhile)", self.data_dir,
                     self.failures_total - self._failures_before)
