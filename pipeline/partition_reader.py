"""An executor's read of one offset range: validated start, records as Arrow batches, data loss.

Runs inside Spark's Python worker on an executor, a separate process from the driver: it gets a
picklable `ReaderSettings` and an `OffsetRange`, and builds everything else itself. Each call
makes its own event loop and Consumer and closes both in `finally`, because Spark closes the
generator early when it needs no more rows (`limit()`), and a worker process runs many tasks one
after another.

Theory of operation
-------------------
The Consumer is assigned the range's one partition with auto_offset_reset "none" and seeked to
the start *with the start's leader epoch*, so before the first fetch it asks the leader
OffsetForLeaderEpoch (KIP-320) whether the log still holds what the query read before that
offset. Then it polls whole batches (Consumer.poll_batches) and decodes them straight into Arrow
columns (pipeline.arrow_records), until the position reaches the end.

What can go wrong, and what happens (as Spark's Kafka source, but exact):

- The log diverged below the position (an unclean election truncated it; it may have grown
  back past the offset since): the Consumer raises LogTruncationError with the divergence point.
  failOnDataLoss=true fails the task, naming the partition, the checkpointed offset and epoch,
  the divergence offset and how to recover. false logs the lost range and reads on from the
  exact divergence point: the records now at those offsets are new and are read; nothing
  before them is read twice.
- The start is below the log start (retention deleted it): true fails; false logs the lost
  range and reads from the earliest offset.
- The position is past the end of the log and no epoch tells where it diverged: true fails;
  false logs and ends the range there.
- No progress for kafkaConsumer.pollTimeoutMs: the task fails, naming the partition and offsets.

Memory: the Consumer prefetches at most PREFETCH_BYTES_MAX, and each Arrow batch holds at most
POLL_BYTES_MAX of records (plus the columns' offsets): a worker's footprint is bounded whatever
the range's size.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from epochlog.client import Consumer, LogTruncationError
from epochlog.client.errors import OffsetOutOfRangeError

from .arrow_records import decode
from .lookup import new_event_loop
from .planning import NO_EPOCH, OffsetRange

log = logging.getLogger("epochlog.pipeline")

PREFETCH_BYTES_MAX = 16 * 1024 * 1024
POLL_BYTES_MAX = 4 * 1024 * 1024
POLL_WAIT_MS = 1000
VALIDATE_WAIT_MS = 100


class DataLossError(RuntimeError):
    """Records the query should have read are gone, and failOnDataLoss is true."""


@dataclass(frozen=True)
class ReaderSettings:
    """What an executor needs to read: picklable, no connection or loop in it."""

    consumer: dict[str, Any] = field(default_factory=dict)
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000


def read_range(settings: ReaderSettings, rng: OffsetRange) -> Iterator[Any]:
    """The range's records as pyarrow.RecordBatches, in offset order."""
    if rng.end == rng.start:
        return
    loop = new_event_loop()
    kwargs = {"client_id": "epochlog-spark-executor", "prefetch_max_bytes": PREFETCH_BYTES_MAX,
              **settings.consumer, "auto_offset_reset": "none"}
    consumer = Consumer(**kwargs)
    try:
        loop.run_until_complete(consumer.start())
        yield from _RangeRead(settings, rng, consumer, loop).batches()
    finally:
        try:
            loop.run_until_complete(consumer.close())
        finally:
            loop.close()


class _RangeRead:
    def __init__(self, settings: ReaderSettings, rng: OffsetRange, consumer: Consumer,
                 loop: Any) -> None:
        self.settings = settings
        self.rng = rng
        self.tp = rng.tp
        self.consumer = consumer
        self.loop = loop
        self.position = rng.start
        self.epoch = rng.start_epoch
        self.lost: list[tuple[int, int]] = []  # offsets first..last lost, as they were found
        self._validated_once = False

    def batches(self) -> Iterator[Any]:
        self.consumer.assign([self.tp])
        self._seek(self.position, self.epoch)
        # A range planned with its end below its start: the log's end went below the
        # checkpoint. Only validating the start can tell where it diverged.
        unvalidated = self.rng.end < self.rng.start
        if unvalidated and self.epoch < 0:
            self._went_back()
            return
        timeout_s = self.settings.poll_timeout_ms / 1000
        progress_at = time.monotonic()
        while self.position < self.rng.end or unvalidated:
            try:
                fetched = self.loop.run_until_complete(self.consumer.poll_batches(
                    timeout_ms=POLL_WAIT_MS if not unvalidated else VALIDATE_WAIT_MS,
                    max_bytes=POLL_BYTES_MAX))
            except LogTruncationError as exc:
                unvalidated = False
                self._truncated(*exc.divergent_offsets[self.tp])
                progress_at = time.monotonic()
                continue
            except OffsetOutOfRangeError:
                unvalidated = False
                if not self._out_of_range():
                    break
                progress_at = time.monotonic()
                continue
            if unvalidated:
                if self.consumer.metrics()["validations"]:
                    # Validated, and the next poll() raises if it found a divergence: one more
                    if self._validated_once:
                        log.info("%s: the position %d (leader epoch %d) is still in the log, "
                                 "whose end went below it for a while: nothing to read",
                                 self._name(), self.position, self.epoch)
                        return
                    self._validated_once = True
                elif time.monotonic() - progress_at > timeout_s:
                    raise TimeoutError(f"{self._name()}: the position {self.position} (leader "
                                       f"epoch {self.epoch}) was not validated within "
                                       f"{self.settings.poll_timeout_ms} ms")
                continue
            if not fetched:
                if time.monotonic() - progress_at > timeout_s:
                    raise TimeoutError(
                        f"{self._name()}: no records for {self.settings.poll_timeout_ms} ms "
                        f"(kafkaConsumer.pollTimeoutMs) at offset {self.position}, reading "
                        f"up to {self.rng.end}")
                continue
            progress_at = time.monotonic()
            decoded = decode(fetched, self.rng.end, self.settings.include_headers)
            self.position, self.epoch = decoded.next_offset, decoded.next_epoch
            if decoded.rows:
                yield decoded.batch
        if self.lost:
            log.warning("%s: %d records lost in all, at offsets %s (failOnDataLoss=false)",
                        self._name(), sum(last - first + 1 for first, last in self.lost),
                        ", ".join(f"{first}..{last}" for first, last in self.lost))

    def _went_back(self) -> None:
        """The log's end is below the planned start and no epoch says where it diverged."""
        what = (f"the partition's offset went back from {self.rng.start} to {self.rng.end} "
                "(the log was truncated, or the topic deleted and recreated) and no leader "
                "epoch is known to find where it diverged")
        if self.settings.fail_on_data_loss:
            raise DataLossError(f"{self._name()}: some data may have been lost: {what}. If you "
                                "do not want the query to fail on such cases, set the source "
                                "option failOnDataLoss to false.")
        log.warning("%s: %s; skipping to offset %d (failOnDataLoss=false)", self._name(), what,
                    self.rng.end)

    def _seek(self, offset: int, epoch: int) -> None:
        self.consumer.seek(self.tp, offset, epoch if epoch >= 0 else None)
        self.position, self.epoch = offset, epoch

    def _name(self) -> str:
        return f"{self.tp.topic}-{self.tp.partition}"

    def _truncated(self, offset: int, epoch: int) -> None:
        """KIP-320: the leader's log diverges from what we read at (offset, epoch)."""
        if epoch < 0 or offset > self.position:
            # The leader knows no epoch that old: no exact point (Spark would read on)
            offset = self.position
        lost = max(self.position - offset, 0)
        if self.settings.fail_on_data_loss:
            restart = json.dumps({self.tp.topic: {str(self.tp.partition): {
                "offset": offset, "epoch": epoch}}} if epoch >= 0 else
                {self.tp.topic: {str(self.tp.partition): offset}})
            raise DataLossError(
                f"{self._name()}: the log was truncated below the checkpointed position: "
                f"offset {self.position} (leader epoch {self.epoch}) is past the leader's log, "
                f"which diverges from what this query read at offset {offset} (leader epoch "
                f"{epoch}), an unclean leader election. The {lost} records at offsets "
                f"{offset}..{self.position - 1} that the query read are no longer in the log, "
                f"and the records now at those offsets were never read. To recover: restart "
                f"the query with failOnDataLoss=false to resume from the divergence point, "
                f"offset {offset}, reading the new records there; or start a new checkpoint "
                f"with startingOffsets={restart}.")
        if lost:
            self.lost.append((offset, self.position - 1))
        log.warning("%s: log truncated: %d records read before at offsets %d..%d are no longer "
                    "in the log (position %d, leader epoch %d; divergence at offset %d, leader "
                    "epoch %d); resuming from offset %d (failOnDataLoss=false)", self._name(),
                    lost, offset, self.position - 1, self.position, self.epoch, offset, epoch,
                    offset)
        self._seek(offset, epoch)

    def _out_of_range(self) -> bool:
        """The position is outside the log: below its start (retention) or past its end with
        no epoch to find where it diverged. Returns whether to read on."""
        self.consumer.seek_to_beginning(self.tp)
        earliest = self.loop.run_until_complete(self.consumer.position(self.tp))
        self.consumer.seek_to_end(self.tp)
        latest = self.loop.run_until_complete(self.consumer.position(self.tp))
        if self.position < earliest:
            what = (f"offsets {self.position}..{min(earliest, self.rng.end) - 1} are no longer "
                    f"in the log (deleted by retention, or the topic was deleted and "
                    f"recreated); its earliest offset is {earliest}")
            lost, resume = min(earliest, self.rng.end) - self.position, earliest
        else:
            what = (f"offset {self.position} is past the log's end ({latest}), with no leader "
                    "epoch to tell where it diverged (the log was truncated, or the topic "
                    "recreated)")
            lost, resume = self.rng.end - self.position, self.rng.end
        if self.settings.fail_on_data_loss:
            raise DataLossError(
                f"{self._name()}: some data may have been lost: {what}. If you do not want the "
                "query to fail on such cases, set the source option failOnDataLoss to false.")
        if lost > 0:
            self.lost.append((self.position, self.position + lost - 1))
        log.warning("%s: %s: %d records lost; reading on from offset %d (failOnDataLoss=false)",
                    self._name(), what, lost, resume)
        if resume >= self.rng.end:
            return False
        self._seek(resume, NO_EPOCH)
        return True
