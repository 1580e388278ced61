"""The data partitions a simulated broker leads, each a real storage `Log` (its real producer
state), appended to as the Produce and WriteTxnMarkers handlers append.

Theory of operation
-------------------
Every data partition has one replica, on a fixed broker (`leader_of`); acks=all is then the
leader's append, and the high watermark is the log end. A produce is `Log.append_as_leader` of a
real transactional batch (protocol.records.build_batch), so the real producer state decides:
epochs (InvalidProducerEpoch), sequences, a write outside an open transaction. A marker is a real
control batch (control_records.marker_batch) through the same append, so storage's
`check_marker` judges its producer and coordinator epochs, as handlers/write_txn_markers.py's
`_append` does. A refusal is the StorageError's error code.

A crash closes the files without a flush (the page cache keeps what was written: a process
crash loses nothing that write() took); the restart reopens each log uncleanly, so recovery and
the rebuild of the producer state from the batches run, as at a real broker's start.

`read_committed` is what a read_committed consumer gets, built from the real pieces: the log's
last stable offset, the aborted transactions `Log.aborted_in` lists from its .txnindex files
(what fetch.py answers) and the client's `AbortedTransactions` filter (client/aborted.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

from epochlog.broker.storage import StorageError
from epochlog.broker.storage.config import LogConfig
from epochlog.broker.storage.log import Log
from epochlog.client.aborted import AbortedTransactions
from epochlog.protocol.batch import iter_headers
from epochlog.protocol.control_records import marker_batch
from epochlog.protocol.records import decode_batch

TP = tuple[str, int]
READ_BYTES_MAX = 1 << 22


class Appended(NamedTuple):
    error: int
    offset: int = -1


def leader_of(tp: TP, brokers: int) -> int:
    """The broker id (1..brokers) leading a data partition."""
    return tp[1] % brokers + 1


class PartitionStore:
    """The data partitions of one broker: real logs under `data_dir`."""

    def __init__(self, data_dir: str, tps: list[TP], clock: Callable[[], int],
                 segment_bytes: int) -> None:
        self.data_dir = data_dir
        self.tps = tps
        self.clock = clock
        self.config = LogConfig(retention_ms=-1, segment_bytes=segment_bytes)
        self.logs: dict[TP, Log] = {}
        self.leader_epoch = -1

    def open(self, leader_epoch: int, skip_marker_check: bool = False) -> None:
        """A (re)start: every log reopened as after a crash, its producer state rebuilt."""
        self.leader_epoch = leader_epoch
        for tp in self.tps:
            log = Log.open(os.path.join(self.data_dir, f"{tp[0]}-{tp[1]}"), self.config,
                           self.clock, clean_shutdown=False)
            log.auto_flush = False
            log.update_high_watermark(log.log_end_offset)
            if skip_marker_check:  # the broken variant `no_marker_check`
                log.producer_state.check_marker = lambda *_: None  # type: ignore[method-assign]
            self.logs[tp] = log

    def close(self) -> None:
        """The process died: the fds close, nothing is flushed."""
        for log in self.logs.values():
            log.close()
        self.logs = {}

    # ------------------------------------------------------------------------- appends
    def produce(self, tp: TP, batch: bytes) -> Appended:
        return self._append(tp, batch)

    def marker(self, tp: TP, producer_id: int, producer_epoch: int, commit: bool,
               coordinator_epoch: int) -> Appended:
        return self._append(tp, marker_batch(commit, producer_id, producer_epoch,
                                             coordinator_epoch, self.clock()))

    def _append(self, tp: TP, batch: bytes) -> Appended:
        log = self.logs[tp]
        try:
            info = log.append_as_leader(batch, self.leader_epoch)
        except StorageError as exc:
            return Appended(exc.error_code)
        log.update_high_watermark(log.log_end_offset)
        return Appended(0, info.first_offset)

    # ------------------------------------------------------------------------- reading
    def open_transactions(self, tp: TP) -> dict[int, int]:
        return self.logs[tp].producer_state.open_transactions()

    def read_committed(self, tp: TP) -> list[tuple[int, bytes]]:
        """(offset, value) of every record a read_committed consumer reading from the log start
        is given."""
        log = self.logs[tp]
        stable = log.last_stable_offset
        if stable <= log.log_start_offset:
            return []
        aborted = AbortedTransactions(
            (a.producer_id, a.first_offset)
            for a in log.aborted_in(log.log_start_offset, stable))
        seen: list[tuple[int, bytes]] = []
        offset = log.log_start_offset
        while offset < stable:  # a read stops at its segment's end
            data = log.read(offset, READ_BYTES_MAX, stable)
            assert data, (tp, offset, stable)
            view = memoryview(data)
            for pos, header in iter_headers(data):
                offset = header.next_offset
                if aborted.drops(header, view, pos) or header.is_control:
                    continue
                _, records = decode_batch(data, pos)
                seen += [(r.offset, r.value or b"") for r in records]
        return seen
