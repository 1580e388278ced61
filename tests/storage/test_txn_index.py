"""The aborted-transactions index, `<segment>.txnindex` (broker/storage/txn_index.py), on real
files: Kafka's exact bytes for a known abort, the round trip, what a damaged file becomes (an
error the log recovers from, by replaying its batches), truncation, deletion with the segment,
compaction carrying the entries over, and a crash that lost entries written after the last
flush."""

from __future__ import annotations

import logging
import os
import struct

import pytest

from epochlog.broker.storage import LogConfig
from epochlog.broker.storage.cleaner import LogCleaner
from epochlog.broker.storage.txn_index import ENTRY_BYTES, AbortedTxn, TxnIndex
from epochlog.protocol.control_records import marker_batch
from epochlog.protocol.records import build_batch

from .helpers import make_batch, open_log
from .test_cleaner import Compacted, records_of, updates

PID, OTHER = 4000, 5000
SMALL_SEGMENTS = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096,
                           flush_ms=2**63 - 1)


def txn(pid: int, sequence: int, value: bytes = b"v") -> bytes:
    return build_batch([(b"k", value, None, 1000)], producer_id=pid, producer_epoch=0,
                       base_sequence=sequence, is_transactional=True)


def abort(pid: int) -> bytes:
    return marker_batch(False, pid, 0, 0, 1000)


def test_the_txnindex_bytes_are_kafkas_layout_for_a_known_abort(tmp_path) -> None:
    """PID's transaction holds offsets 0 and 1, OTHER's opens at 2, PID's ABORT marker lands at
    3: one 34-byte entry, version 0, producer id, first offset 0, last offset 3 (the marker),
    last stable offset 2 (OTHER's transaction is still open), big-endian, in the segment
    holding the marker."""
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn(PID, 0), leader_epoch=0)
    log.append_as_leader(txn(PID, 1), leader_epoch=0)
    log.append_as_leader(txn(OTHER, 0), leader_epoch=0)
    log.append_as_leader(abort(PID), leader_epoch=0)
    log.flush()
    data = (tmp_path / "t-0" / "00000000000000000000.txnindex").read_bytes()
    assert data == bytes.fromhex(
        "0000"                  # version 0
        "0000000000000fa0"      # producer id 4000
        "0000000000000000"      # first offset 0
        "0000000000000003"      # last offset 3: the ABORT marker
        "0000000000000002")     # last stable offset 2: OTHER's open transaction
    assert len(data) == ENTRY_BYTES == 34
    assert log.aborted_in(0, 4) == [AbortedTxn(PID, 0, 3, 2)]
    log.close()


def test_a_commit_writes_no_entry_and_an_abort_with_nothing_open_ends_at_its_marker(
        tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn(PID, 0), leader_epoch=0)
    log.append_as_leader(marker_batch(True, PID, 0, 0, 1000), leader_epoch=0)  # 1: commit
    log.append_as_leader(abort(OTHER), leader_epoch=0)  # 2: aborts nothing written here
    assert log.aborted_in(0, 3) == [AbortedTxn(OTHER, 2, 2, 3)]
    log.close()


def test_entries_round_trip_and_collect_stops_where_kafka_does(tmp_path) -> None:
    index = TxnIndex(str(tmp_path / "00000000000000000100.txnindex"), 100)
    assert index.load(200, 1 << 20, cut_beyond=False) is None  # no file: no entries
    assert not os.path.exists(index.path)  # created with the first entry, as Kafka's
    entries = [AbortedTxn(1, 90, 105, 95), AbortedTxn(2, 95, 110, 111),
               AbortedTxn(3, 120, 130, 131)]
    for entry in entries:
        index.append(entry)
    index.close()
    again = TxnIndex(index.path, 100)
    assert again.load(200, 1 << 20, cut_beyond=False) is None
    assert list(again.entries()) == entries
    assert list(again.entries(106)) == entries[1:]
    assert (again.first_offset_min, again.last_offset, again.last_stable_offset_max) == \
        (90, 130, 131)
    # [100, 111): the second entry's last stable offset (111) says no later marker can matter
    assert again.collect(100, 111) == (entries[:2], True)
    assert again.collect(131, 140) == ([], False)  # markers all below the range
    assert again.collect(0, 100) == (entries[:2], True)
    assert again.collect(0, 200) == (entries, False)  # on to the next segment's index
    again.append(AbortedTxn(4, 131, 140, 141))  # appends go on after a load
    again.close()
    assert os.path.getsize(index.path) == 4 * ENTRY_BYTES


def _entry(version: int, pid: int, first: int, last: int, stable: int) -> bytes:
    return struct.pack(">hqqqq", version, pid, first, last, stable)


@pytest.mark.parametrize("damage", ["cut mid-entry", "version 1", "marker past the segment",
                                    "markers out of order", "negative producer id",
                                    "first offset after the marker", "too many entries"])
def test_a_damaged_file_is_reported_and_emptied(tmp_path, damage: str) -> None:
    good = _entry(0, 7, 100, 105, 106) + _entry(0, 8, 101, 110, 111)
    data = {
        "cut mid-entry": good[:-5],
        "version 1": good[:ENTRY_BYTES] + _entry(1, 8, 101, 110, 111),
        "marker past the segment": good + _entry(0, 9, 150, 250, 251),
        "markers out of order": good + _entry(0, 9, 100, 108, 109),
        "negative producer id": _entry(0, -1, 100, 105, 106),
        "first offset after the marker": _entry(0, 7, 106, 105, 106),
        "too many entries": good * 40,
    }[damage]
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(data)
    index = TxnIndex(str(path), 100)
    problem = index.load(200, 1000, cut_beyond=False)
    assert problem is not None and str(path) in problem, problem
    assert len(index) == 0 and path.stat().st_size == 0


def test_recovery_drops_the_entries_past_a_cut_tail(tmp_path) -> None:
    path = tmp_path / "00000000000000000100.txnindex"
    path.write_bytes(_entry(0, 7, 100, 105, 106) + _entry(0, 8, 101, 180, 181))
    index = TxnIndex(str(path), 100)
    assert index.load(150, 1 << 20, cut_beyond=True) is None  # recovery cut the log at 150
    assert list(index.entries()) == [AbortedTxn(7, 100, 105, 106)]
    assert path.stat().st_size == ENTRY_BYTES


def _log_with_aborts(path, count: int = 12):
    """A log of small segments where PID and OTHER take turns: each writes two batches and
    aborts, PID's transactions spanning a roll now and then; the aborted offsets, expected."""
    log = open_log(path, SMALL_SEGMENTS)
    sequences = {PID: 0, OTHER: 0}
    for i in range(count):
        pid = PID if i % 2 else OTHER
        for _ in range(2):
            log.append_as_leader(txn(pid, sequences[pid], b"x" * 200), leader_epoch=0)
            sequences[pid] += 1
        log.append_as_leader(abort(pid), leader_epoch=0)
    assert len(log.segments) >= count // 4
    return log


def test_a_damaged_txnindex_is_rebuilt_from_the_batches_at_open(tmp_path, caplog) -> None:
    log = _log_with_aborts(tmp_path / "t-0")
    expected = log.aborted_in(0, log.log_end_offset)
    end = log.log_end_offset
    log.close()
    victim = sorted((tmp_path / "t-0").glob("*.txnindex"))[1]
    with open(victim, "r+b") as f:
        f.truncate(victim.stat().st_size - 3)
    with caplog.at_level(logging.WARNING):
        again = open_log(tmp_path / "t-0", SMALL_SEGMENTS, clean_shutdown=True,
                         recovery_point=end)
    assert "whole number of 34-byte entries" in caplog.text
    assert again.aborted_in(0, end) == expected
    assert again.producer_batches_replayed > 0  # replayed from below the damaged segment
    again.close()


def test_truncation_drops_the_entries_of_markers_cut_away(tmp_path) -> None:
    log = _log_with_aborts(tmp_path / "t-0")
    all_aborts = log.aborted_in(0, log.log_end_offset)
    cut = all_aborts[len(all_aborts) // 2].last_offset  # the marker goes, and those after it
    log.truncate_to(cut, "test")
    kept = [a for a in all_aborts if a.last_offset < cut]
    assert log.aborted_in(0, cut) == kept
    on_disk = []
    for path in sorted((tmp_path / "t-0").glob("*.txnindex")):
        data = path.read_bytes()
        on_disk += [AbortedTxn(*struct.unpack_from(">hqqqq", data, pos)[1:])
                    for pos in range(0, len(data), ENTRY_BYTES)]
    assert on_disk == kept
    # the aborts are written again as a follower appends them
    log.close()


def test_a_txnindex_goes_with_its_segment(tmp_path) -> None:
    log = _log_with_aborts(tmp_path / "t-0")
    first = log.segments[0]
    assert os.path.exists(first.txn_index.path)
    log.update_high_watermark(log.log_end_offset)
    log.advance_log_start_offset(log.segments[2].base_offset)
    assert not os.path.exists(first.txn_index.path)
    assert log.aborted_in(log.log_start_offset, log.log_end_offset) == \
        [a for a in _aborts_of(log) if a.last_offset >= log.log_start_offset]
    log.close()


def _aborts_of(log) -> list[AbortedTxn]:
    return [t for s in log.segments for t in s.txn_index.entries()]


def test_lost_entries_written_after_the_last_flush_come_back_after_a_crash(tmp_path) -> None:
    """A SIGKILL between a marker's append and its entry's write (or a power loss of the
    unflushed page cache): the open after the crash replays from a snapshot at or below the
    recovery point, so every marker past it gets its entry again."""
    log = _log_with_aborts(tmp_path / "t-0", 4)
    log.flush()
    recovery_point = log.log_end_offset
    expected = log.aborted_in(0, recovery_point)
    sequence = log.producer_state.last_sequence(PID) + 1
    for _ in range(3):
        log.append_as_leader(txn(PID, sequence), leader_epoch=0)
        log.append_as_leader(abort(PID), leader_epoch=0)
        sequence += 1
    late = log.aborted_in(recovery_point, log.log_end_offset)
    assert len(late) == 3
    log.files.close_all()  # a crash: nothing more is written
    for path in (tmp_path / "t-0").glob("*.txnindex"):  # the entries after the flush are lost
        data = path.read_bytes()
        kept = [data[pos:pos + ENTRY_BYTES] for pos in range(0, len(data), ENTRY_BYTES)
                if struct.unpack_from(">q", data, pos + 18)[0] < recovery_point]
        path.write_bytes(b"".join(kept))
    again = open_log(tmp_path / "t-0", SMALL_SEGMENTS, recovery_point=recovery_point)
    assert again.aborted_in(0, again.log_end_offset) == expected + late
    again.close()


def test_compaction_carries_the_entries_into_the_cleaned_segment(tmp_path) -> None:
    """The cleaner drops an aborted transaction's records but keeps its marker, so the cleaned
    segment holds the entries of the segments it replaced; read_committed answers the same,
    and a reopened log reads them back."""
    c = Compacted(tmp_path)
    c.put([(b"k", b"committed" + b"." * 40)])
    c.put([(b"k", b"aborted" + b"." * 40)], producer_id=PID, producer_epoch=0, base_sequence=0,
          is_transactional=True)
    c.log.append_as_leader(abort(PID), 0)
    updates(c, 60, keys=3)
    c.log.update_high_watermark(c.log.log_end_offset)
    before = c.log.aborted_in(0, c.log.log_end_offset)
    assert before == [AbortedTxn(PID, 1, 2, 3)]
    assert c.cleaner.clean_once()
    first = c.log.segments[0]
    assert list(first.txn_index.entries()) == before  # in the cleaned segment, from its file
    assert c.log.aborted_in(0, c.log.log_end_offset) == before
    assert {v for _, k, v in records_of(c.log) if k == b"k"} == {b"committed" + b"." * 40}
    c.manager.close()
    c.open(clean=True)
    assert c.log.aborted_in(0, c.log.log_end_offset) == before
    assert isinstance(c.cleaner, LogCleaner)


def test_the_aborted_list_costs_no_memory_per_transaction(tmp_path) -> None:
    """Every abort's entry is in a file; the log holds four numbers per segment."""
    log = open_log(tmp_path / "t-0", LogConfig(flush_ms=2**63 - 1))
    for sequence in range(300):
        log.append_as_leader(txn(PID, sequence), leader_epoch=0)
        log.append_as_leader(abort(PID), leader_epoch=0)
    log.append_as_leader(make_batch(1), leader_epoch=0)
    index = log.active_segment.txn_index
    assert len(index) == 300 and not index._pending
    assert not hasattr(log.producer_state, "aborted")
    assert len(log.aborted_in(0, log.log_end_offset)) == 300
    log.close()


@pytest.mark.parametrize("step", ["swap decided", "old segments deleted", "txnindex renamed"])
def test_a_crash_mid_swap_keeps_the_aborted_transactions(tmp_path, step: str) -> None:
    """Compaction swaps in a cleaned segment whose `.txnindex` holds the entries of the segments
    it replaced (two aborts here, in its first and in a later one). Killed at any step of the
    swap, the open completes it and read_committed answers as before: the cleaned `.txnindex`
    takes the first segment's name, the later segments' files (their `.txnindex` too) go."""
    from epochlog.broker.storage.segment_swap import DELETED_SUFFIX, SWAP_SUFFIX, segment_paths

    c = Compacted(tmp_path)
    c.put([(b"k", b"committed" + b"." * 40)])
    c.put([(b"k", b"aborted" + b"." * 40)], producer_id=PID, producer_epoch=0, base_sequence=0,
          is_transactional=True)
    c.log.append_as_leader(abort(PID), 0)
    c.log.roll()  # small segments, so that one cleaned group replaces several
    updates(c, 1, keys=3)
    c.log.roll()
    c.put([(b"o", b"aborted" + b"." * 40)], producer_id=OTHER, producer_epoch=0,
          base_sequence=0, is_transactional=True)
    c.log.append_as_leader(abort(OTHER), 0)
    updates(c, 2, keys=3)
    c.log.roll()
    updates(c, 60, keys=3)
    c.log.update_high_watermark(c.log.log_end_offset)
    before = c.log.aborted_in(0, c.log.log_end_offset)
    assert [t.producer_id for t in before] == [PID, OTHER]
    second = next(s for s in c.log.segments if s.txn_index.last_offset == before[1].last_offset)
    assert second.base_offset > 0 and os.path.exists(second.txn_index.path)
    c.log.flush()  # the open after the crash replays from a snapshot past both aborts: it
    c.manager.write_checkpoints()  # must find their entries in the files, not re-derive them

    job = c.cleaner.choose()
    assert job is not None
    result = job.run()
    assert result.error is None and result.groups
    group = result.groups[0]
    assert group.base_offset == 0 and group.next_offset > before[1].last_offset, \
        "both aborts must lie in the first cleaned group"
    directory = c.log.directory
    cleaned = segment_paths(directory, 0, ".cleaned")
    swapped = segment_paths(directory, 0, SWAP_SUFFIX)
    for source, target in zip(cleaned, swapped, strict=True):
        os.rename(source, target)
    if step in ("old segments deleted", "txnindex renamed"):
        for view in group.views:
            for path in segment_paths(directory, view.base_offset):
                if os.path.exists(path):
                    os.rename(path, path + DELETED_SUFFIX)
    if step == "txnindex renamed":  # step 3 names the .txnindex first and the .log last
        os.rename(swapped[3], segment_paths(directory, 0)[3])
    c.crash_and_reopen()

    assert c.log.aborted_in(0, c.log.log_end_offset) == before
    assert list(c.log.segments[0].txn_index.entries()) == before
    assert c.log.segments[0].next_offset == group.next_offset, "the swap was not completed"
    names = os.listdir(directory)
    assert not [n for n in names if n.endswith((SWAP_SUFFIX, DELETED_SUFFIX, ".cleaned"))]
    logs = {n.partition(".")[0] for n in names if n.endswith(".log")}
    assert not [n for n in names if n.endswith(".txnindex") and n.partition(".")[0] not in logs]
    assert {v for _, k, v in records_of(c.log) if k == b"k"} == {b"committed" + b"." * 40}
