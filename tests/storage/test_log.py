"""Log behaviour, one rule per test: appends on both paths, refusals that change nothing, reads and
their limits, rolls, truncation, log start, retention, producer state, flush and recovery point."""

from __future__ import annotations

import logging
import os

import pytest

from epochlog.broker.storage import (
    CorruptRecords,
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidTimestamp,
    LogConfig,
    LogConfigError,
    OffsetOutOfRange,
    OffsetsNotIncreasing,
    OutOfOrderSequence,
    RecordTooLarge,
    StaleLeaderEpoch,
)
from epochlog.broker.storage.errors import CorruptLog, DuplicateSequence
from epochlog.protocol.batch import check_all, read_header
from epochlog.protocol.records import build_batch

from .helpers import FakeClock, make_batch, open_log, read_all


def headers_of(data):
    return check_all(data)


def test_leader_append_assigns_offsets_and_stamps_epoch(tmp_path):
    log = open_log(tmp_path / "t-0")
    first = log.append_as_leader(make_batch(3, base_offset=99, epoch=7), leader_epoch=2)
    second = log.append_as_leader(make_batch(2), leader_epoch=2)
    assert (first.first_offset, first.last_offset) == (0, 2)
    assert (second.first_offset, second.last_offset) == (3, 4)
    assert [(h.base_offset, h.partition_leader_epoch) for h in headers_of(log.read(0, 1 << 20))] \
        == [(0, 2), (3, 2)]
    assert log.epoch_cache.entries == [(2, 0)]
    assert log.log_end_offset == 5


def test_follower_append_keeps_offsets_and_epochs(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(make_batch(2, base_offset=0, epoch=1))
    log.append_as_follower(make_batch(2, base_offset=2, epoch=3))
    assert log.log_end_offset == 4
    assert log.epoch_cache.entries == [(1, 0), (3, 2)]


def test_empty_follower_takes_a_batch_its_log_start_falls_inside(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.truncate_fully_and_start_at(12)  # the leader's log starts at 12, inside batch 10-14
    log.append_as_follower(make_batch(5, base_offset=10, epoch=1))
    assert (log.log_start_offset, log.log_end_offset) == (12, 15)
    assert read_header(log.read(12, 100)).base_offset == 10


@pytest.mark.parametrize("records, error", [
    (make_batch(2, base_offset=1), OffsetsNotIncreasing),
    (make_batch(2, base_offset=3) + make_batch(2, base_offset=4), OffsetsNotIncreasing),
    (make_batch(2, base_offset=3)[:-1], CorruptRecords),
    (b"", CorruptRecords),
])
def test_follower_refusals_change_nothing(tmp_path, records, error):
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(make_batch(3, base_offset=0, epoch=1))
    before = read_all(log)
    with pytest.raises(error):
        log.append_as_follower(records)
    assert read_all(log) == before and log.log_end_offset == 3


def test_leader_refuses_bad_crc_and_too_large_with_named_reason(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(max_message_bytes=200, flush_ms=2**63 - 1))
    bad = bytearray(make_batch(1, value_bytes=10))
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecords, match="CRC"):
        log.append_as_leader(bytes(bad), 0)
    with pytest.raises(RecordTooLarge, match="max_message_bytes"):
        log.append_as_leader(make_batch(1, value_bytes=500), 0)
    assert log.log_end_offset == 0 and log.active_segment.size_bytes == 0


def test_leader_refuses_an_older_epoch(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch(1), 5)
    with pytest.raises(StaleLeaderEpoch):
        log.append_as_leader(make_batch(1), 4)
    assert log.log_end_offset == 1


def test_read_limits_whole_batches_and_at_least_one(tmp_path):
    log = open_log(tmp_path / "t-0", LogConfig(flush_ms=2**63 - 1))
    for _ in range(5):
        log.append_as_leader(make_batch(2, value_bytes=100), 0)
    size = read_header(log.read(0, 1)).size
    assert len(log.read(0, 1)) == size  # one whole batch even past the limit
    assert len(log.read(0, size * 2 + size // 2)) == size * 2
    assert headers_of(log.read(3, 1 << 20))[0].base_offset == 2  # the batch holding offset 3
    assert len(headers_of(log.read(0, 1 << 20, offset_max=4))) == 2
    assert log.read(10, 100) == b""


def test_read_out_of_range_carries_both_ends(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch(4), 0)
    log.update_high_watermark(4)
    log.advance_log_start_offset(2)
    for offset in (1, 5):
        with pytest.raises(OffsetOutOfRange) as e:
            log.read(offset, 100)
        assert (e.value.log_start_offset, e.value.log_end_offset) == (2, 4)


def test_rolls_on_segment_bytes_segment_ms_and_full_index(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", LogConfig(segment_bytes=1000, flush_ms=2**63 - 1,
                                               segment_ms=60_000), clock)
    for _ in range(4):
        log.append_as_leader(make_batch(1, value_bytes=300, timestamp_ms=clock.now_ms), 0)
    assert [s.base_offset for s in log.segments] == [0, 2]
    clock.advance(60_001)
    log.append_as_leader(make_batch(1, timestamp_ms=clock.now_ms), 0)
    assert [s.base_offset for s in log.segments] == [0, 2, 4]

    log2 = open_log(tmp_path / "u-0", LogConfig(segment_index_bytes=16, index_interval_bytes=0,
                                                flush_ms=2**63 - 1))
    for _ in range(6):
        log2.append_as_leader(make_batch(1), 0)
    assert all(len(s.offset_index) <= 2 for s in log2.segments)
    assert len(log2.segments) >= 2


def with_offset_delta(batch: bytes, last_offset_delta: int) -> bytes:
    """The batch claiming last_offset_delta (as a compacted batch may), CRC recomputed."""
    import struct

    from epochlog.protocol.batch import crc_of
    buf = bytearray(batch)
    struct.pack_into(">i", buf, 23, last_offset_delta)
    struct.pack_into(">I", buf, 17, crc_of(buf, 0, len(buf)))
    return bytes(buf)


def test_follower_rolls_before_offsets_outgrow_int32(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_follower(with_offset_delta(make_batch(1), 2**31 - 10))
    log.append_as_follower(with_offset_delta(make_batch(1, base_offset=2**31 - 9), 19))
    assert [s.base_offset for s in log.segments] == [0, 2**31 - 9]


def test_leader_refuses_offset_count_mismatch(tmp_path):
    log = open_log(tmp_path / "t-0")
    with pytest.raises(CorruptRecords, match="claims"):
        log.append_as_leader(with_offset_delta(make_batch(2), 1000), 0)
    assert log.log_end_offset == 0


def test_truncate_drops_later_segments_and_cuts_indexes(tmp_path, caplog):
    log = open_log(tmp_path / "t-0")
    for i in range(40):
        log.append_as_leader(make_batch(2), i // 10)
    segments_before = len(log.segments)
    with caplog.at_level(logging.INFO, "epochlog.storage"):
        log.truncate_to(21)  # 21 lies inside the batch 20-21, which goes whole
    assert "truncated from offset 80 to 20" in caplog.text
    assert log.log_end_offset == 20 and len(log.segments) < segments_before
    assert [e.epoch for e in log.epoch_cache.entries] == [0]  # epoch 1 began at 20
    assert all(k < 20 for s in log.segments for k, _ in s.offset_index.entries())
    assert read_all(log)[-1][0] == 18
    log.append_as_leader(make_batch(1), 5)
    assert log.log_end_offset == 21


def test_truncate_below_first_segment_restarts_empty(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.truncate_fully_and_start_at(100)  # a follower whose leader's log starts at 100
    log.append_as_follower(make_batch(5, base_offset=100, epoch=1))
    log.truncate_to(50)
    assert (log.log_start_offset, log.log_end_offset) == (50, 50)
    assert log.epoch_cache.entries == []


def test_advance_log_start_deletes_whole_old_segments(tmp_path):
    log = open_log(tmp_path / "t-0")
    for _ in range(30):
        log.append_as_leader(make_batch(2), 0)
    log.update_high_watermark(60)
    second = log.segments[1].base_offset
    log.advance_log_start_offset(second + 1)
    assert log.segments[0].base_offset == second
    assert log.log_start_offset == second + 1
    assert not os.path.exists(os.path.join(log.directory, f"{0:020d}.log"))
    assert log.epoch_cache.entries == [(0, second + 1)]


def test_retention_by_bytes_and_by_time_stops_at_high_watermark(tmp_path):
    clock = FakeClock()
    config = LogConfig(segment_bytes=1000, retention_bytes=2000, retention_ms=10_000,
                       flush_ms=2**63 - 1)
    log = open_log(tmp_path / "t-0", config, clock)
    for _ in range(20):
        log.append_as_leader(make_batch(1, value_bytes=300, timestamp_ms=clock.now_ms), 0)
    assert log.delete_retained_segments() == 0  # nothing is below the high watermark yet
    log.update_high_watermark(log.log_end_offset)
    assert log.delete_retained_segments() > 0
    assert log.size_bytes - log.segments[0].size_bytes < 2000
    assert log.log_start_offset == log.segments[0].base_offset
    clock.advance(10_001)
    log.delete_retained_segments()
    assert len(log.segments) == 1


def test_offset_for_timestamp(tmp_path):
    log = open_log(tmp_path / "t-0")
    for i in range(20):
        log.append_as_leader(make_batch(3, timestamp_ms=1000 + 10 * i), 0)
    assert log.offset_for_timestamp(1000) == (0, 1000)
    assert log.offset_for_timestamp(1101) == (31, 1101)
    assert log.offset_for_timestamp(1105) == (33, 1110)
    assert log.offset_for_timestamp(9999) is None
    assert log.offset_for_timestamp(-1) == (60, -1)
    assert log.offset_for_timestamp(-2) == (0, -1)


def test_idempotent_producer_rules(tmp_path):
    log = open_log(tmp_path / "t-0")
    def send(seq, n=2, epoch=0, pid=7):
        return log.append_as_leader(make_batch(n, producer_id=pid, producer_epoch=epoch,
                                               base_sequence=seq), 0)
    send(0)
    second = send(2)
    retry = send(2)
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (2, 3)
    assert log.log_end_offset == 4
    with pytest.raises(OutOfOrderSequence):
        send(5)
    with pytest.raises(OutOfOrderSequence):
        send(3, epoch=1)  # a new epoch starts at 0
    send(0, epoch=1)
    with pytest.raises(InvalidProducerEpoch):
        send(4, epoch=0)
    two = make_batch(2, producer_id=7, producer_epoch=1, base_sequence=0) + \
        make_batch(1, producer_id=7, producer_epoch=1, base_sequence=2)
    with pytest.raises(DuplicateSequence):
        log.append_as_leader(two, 0)
    state = dict(log.producer_state.producers)
    log.close()
    reopened = open_log(tmp_path / "t-0", clean_shutdown=True)
    assert reopened.producer_state.producers == state
    assert second.first_offset == 2


def test_flush_policy_and_recovery_point(tmp_path):
    clock = FakeClock()
    log = open_log(tmp_path / "t-0", LogConfig(flush_messages=5, flush_ms=1000), clock)
    log.append_as_leader(make_batch(3), 0)
    assert log.recovery_point == 0
    log.append_as_leader(make_batch(3), 0)  # 6 messages >= flush_messages
    assert log.recovery_point == 6
    log.append_as_leader(make_batch(1), 0)
    clock.advance(1000)
    assert log.flush_due()
    log.auto_flush = False
    log.append_as_leader(make_batch(1), 0)
    assert log.recovery_point == 6
    job = log.begin_flush()
    job.run()  # may run on another thread
    log.end_flush(job)
    assert log.recovery_point == 8


def test_flush_job_does_not_move_recovery_point_across_a_truncation(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch(4), 0)
    job = log.begin_flush()
    log.truncate_to(0)
    log.append_as_leader(make_batch(6), 1)
    job.run()
    log.end_flush(job)
    assert log.recovery_point == 0


@pytest.mark.parametrize("field, value", [
    ("segment_bytes", 5), ("retention_ms", -2), ("flush_messages", 0),
    ("cleanup_policy", "shred"), ("segment_ms", "soon"),
])
def test_bad_settings_name_the_setting(field, value):
    with pytest.raises(LogConfigError, match=field):
        LogConfig(**{field: value})


def test_clean_reopen_keeps_everything(tmp_path):
    log = open_log(tmp_path / "t-0")
    for i in range(30):
        log.append_as_leader(make_batch(2, timestamp_ms=1000 + i), i // 7)
    before = read_all(log), log.epoch_cache.entries, log.offset_for_timestamp(1010)
    log.flush()
    log.close()
    again = open_log(tmp_path / "t-0", clean_shutdown=True, recovery_point=60)
    assert (read_all(again), again.epoch_cache.entries, again.offset_for_timestamp(1010)) == before
    assert [s.offset_index.entries() for s in again.segments] == \
        [s.offset_index.entries() for s in log.segments]


def test_an_index_entry_pointing_inside_a_batch_is_rebuilt_not_taken_for_damage(tmp_path, caplog):
    """An offset index entry in range and in order, but pointing inside a batch (a damaged
    index the open's checks cannot see): the read finds no batch there, checks the batches from
    the segment's start, which are whole, and rebuilds the indexes instead of reporting the log
    corrupt (which would cut it, and, with no other replica, lose what follows)."""
    config = LogConfig(segment_bytes=4096, index_interval_bytes=256,
                       segment_index_bytes=4096, flush_ms=2**63 - 1)  # the first rolls
    log = open_log(tmp_path / "t-0", config)
    for tag in range(40):
        log.append_as_leader(make_batch(1, value_bytes=100, tag=tag), leader_epoch=0)
    assert len(log._segments) > 1  # the damaged index is a rolled segment's, trusted at open
    before = read_all(log)
    log.flush()
    end = log.log_end_offset
    log.close()
    index = tmp_path / "t-0" / f"{0:020d}.index"
    entries = index.read_bytes()
    assert len(entries) >= 3 * 8, "the test needs a few index entries"
    relative, position = int.from_bytes(entries[8:12], "big"), int.from_bytes(entries[12:16], "big")
    index.write_bytes(entries[:12] + (position + 7).to_bytes(4, "big") + entries[16:])

    with caplog.at_level(logging.WARNING):
        log = open_log(tmp_path / "t-0", config, recovery_point=end)
        assert "failed their checks" not in caplog.text  # the open trusts the index
        assert read_all(log) == before
        assert log.read(relative, 1 << 20)  # the offset of the entry itself
    assert "its offset index points where no batch starts" in caplog.text
    assert index.read_bytes()[12:16] == position.to_bytes(4, "big")  # written out again
    log.close()


def drop_producer_snapshots(directory) -> None:
    """Without a producer snapshot the open replays every batch header (with one it reads
    only those after it: test_a_damaged_header_a_snapshot_skips_is_found_by_the_first_read)."""
    for snapshot in directory.glob("*.snapshot"):
        snapshot.unlink()


def test_a_damaged_header_behind_the_indexes_is_cut_at_a_clean_open(tmp_path, caplog):
    """After a clean shutdown a rolled segment is trusted as far as its index goes; the
    producer-state scan of an open without a snapshot is the first to read a header damaged
    there. The log is
    cut before it (the caller sees a log end below its high watermark, and repairs), instead
    of the open failing and with it the broker (seen in the storage-fault campaign: the broker
    could not start again, ever)."""
    config = LogConfig(segment_bytes=4096, index_interval_bytes=256,
                       segment_index_bytes=4096, flush_ms=2**63 - 1)
    log = open_log(tmp_path / "t-0", config)
    for tag in range(40):
        log.append_as_leader(make_batch(1, value_bytes=100, tag=tag), leader_epoch=0)
    assert len(log._segments) > 1
    batches = read_all(log)
    log.flush()
    end = log.log_end_offset
    log.close()
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    victim = 5  # the sixth batch of the first segment: behind its index's last entry
    position = sum(len(data) for _, data in batches[:victim])
    with open(segment, "r+b") as f:
        f.seek(position + 16)  # the magic byte and what follows: the header does not parse
        f.write(b"\x00" * 8)
    drop_producer_snapshots(tmp_path / "t-0")

    with caplog.at_level(logging.WARNING):
        log = open_log(tmp_path / "t-0", config, recovery_point=end)
    assert log.log_end_offset == batches[victim][0]
    assert read_all(log) == batches[:victim]
    assert "cutting the log at offset" in caplog.text
    log.close()


def test_a_damaged_header_a_snapshot_skips_is_found_by_the_first_read(tmp_path):
    """With the producer snapshot written at close the open replays nothing, so it reads no
    header of a trusted segment (as Kafka's open): the damage is found by the first read
    through it, which refuses it naming where the log is whole (the broker then cuts there,
    takes the replica offline and repairs it: docs/storage-faults.md, rule 5)."""
    config = LogConfig(segment_bytes=4096, index_interval_bytes=256,
                       segment_index_bytes=4096, flush_ms=2**63 - 1)
    log = open_log(tmp_path / "t-0", config)
    for tag in range(40):
        log.append_as_leader(make_batch(1, value_bytes=100, tag=tag), leader_epoch=0)
    batches = read_all(log)
    log.flush()
    end = log.log_end_offset
    log.close()
    victim = 5
    position = sum(len(data) for _, data in batches[:victim])
    with open(tmp_path / "t-0" / f"{0:020d}.log", "r+b") as f:
        f.seek(position + 16)
        f.write(b"\x00" * 8)

    log = open_log(tmp_path / "t-0", config, recovery_point=end, clean_shutdown=True)
    assert log.producer_batches_replayed == 0 and log.log_end_offset == end
    with pytest.raises(CorruptLog) as raised:
        log.read(batches[victim][0], 1 << 20)
    assert raised.value.cut_offset == batches[victim][0]
    log.truncate_to(raised.value.cut_offset, "test")
    assert read_all(log) == batches[:victim]
    log.close()


@pytest.mark.parametrize("length_change", [-1, +1, -60, +200])
def test_a_damaged_batch_length_behind_the_indexes_is_cut_before_that_batch(tmp_path, caplog,
                                                                            length_change):
    """A batch's length field lies outside its CRC, and a damaged one still parses: the scan
    at open reads the next header from the wrong bytes and stops there. The batch with the bad
    length is the damage, not the one after it: the cut goes before it (its CRC fails), where
    the log is whole. Cutting after it left a batch running past the new end, or a torn
    header, and the open failed and with it the broker (the storage-fault campaign, seed
    214)."""
    config = LogConfig(segment_bytes=4096, index_interval_bytes=256,
                       segment_index_bytes=4096, flush_ms=2**63 - 1)
    log = open_log(tmp_path / "t-0", config)
    for tag in range(40):
        log.append_as_leader(make_batch(2, value_bytes=50, tag=tag), leader_epoch=0)
    assert len(log._segments) > 1
    batches = read_all(log)
    log.flush()
    end = log.log_end_offset
    log.close()
    victim = 5  # behind the first segment's last index entry: trusted at a clean open
    position = sum(len(data) for _, data in batches[:victim])
    length = len(batches[victim][1]) - 12
    with open(tmp_path / "t-0" / f"{0:020d}.log", "r+b") as f:
        f.seek(position + 8)
        f.write((length + length_change).to_bytes(4, "big"))
    drop_producer_snapshots(tmp_path / "t-0")

    with caplog.at_level(logging.WARNING):
        log = open_log(tmp_path / "t-0", config, recovery_point=end, clean_shutdown=True)
    assert log.log_end_offset == batches[victim][0]
    assert read_all(log) == batches[:victim]
    assert "cutting the log at offset" in caplog.text
    log.close()


@pytest.mark.parametrize("index", ["offset", "time"])
def test_an_index_whose_last_entry_names_an_offset_past_the_log_is_rebuilt_at_open(
        tmp_path, caplog, index):
    """A damaged key in an index's last entry stays in order and in range, so the index passed
    its own checks at a clean open, and the next append failed on an entry out of order,
    which stopped the broker at every start (the storage-fault campaign, seed 297). The open
    checks the last entries against the batches and rebuilds the indexes."""
    config = LogConfig(segment_bytes=1 << 20, index_interval_bytes=256,
                       segment_index_bytes=4096, flush_ms=2**63 - 1)
    log = open_log(tmp_path / "t-0", config)
    for tag in range(20):
        log.append_as_leader(make_batch(1, value_bytes=100, tag=tag, timestamp_ms=1000 + tag),
                             leader_epoch=0)
    before = read_all(log)
    log.flush()
    end = log.log_end_offset
    log.close()
    name, field = (".index", slice(0, 4)) if index == "offset" else (".timeindex", slice(8, 12))
    path = tmp_path / "t-0" / f"{0:020d}{name}"
    data = bytearray(path.read_bytes())
    last = len(data) - (8 if index == "offset" else 12)
    data[last + field.start:last + field.stop] = (10_000_000).to_bytes(4, "big")
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING):
        log = open_log(tmp_path / "t-0", config, recovery_point=end, clean_shutdown=True)
    assert "recovering the segment" in caplog.text
    assert read_all(log) == before
    log.append_as_leader(make_batch(1, tag=99, timestamp_ms=5000), leader_epoch=0)
    assert log.log_end_offset == end + 1
    log.close()


def test_a_segments_first_batch_with_a_lowered_base_offset_is_refused(tmp_path):
    """Damage that lowers the base offset of a rolled segment's first batch by one makes the
    batch seem to hold the segment's base offset: served, every record in it would carry the
    offset before its own. The first batch must start at the segment's base offset."""
    config = LogConfig(segment_bytes=2048, index_interval_bytes=256,
                       segment_index_bytes=4096, flush_ms=2**63 - 1)
    log = open_log(tmp_path / "t-0", config)
    for tag in range(30):
        log.append_as_leader(make_batch(2, value_bytes=50, tag=tag), leader_epoch=0)
    second = log.segments[1].base_offset
    log.flush()
    with open(tmp_path / "t-0" / f"{second:020d}.log", "r+b") as f:
        f.write((second - 1).to_bytes(8, "big"))
    with pytest.raises(CorruptLog) as raised:
        log.read(second, 1 << 20)
    assert raised.value.cut_offset == second
    log.close()


def test_rebuilding_a_misleading_index_stops_at_damage_further_on(tmp_path, caplog):
    """An index entry pointing inside a batch has the indexes rebuilt from the batches; a
    damaged base offset further on must not go into them (entries out of order were an
    AssertionError in the read, not the storage error that takes the replica offline and has
    it repaired): the rebuilt indexes stop before it, and the read that reaches it raises
    CorruptLog there."""
    config = LogConfig(segment_bytes=8192, index_interval_bytes=256,
                       segment_index_bytes=4096, flush_ms=2**63 - 1)
    log = open_log(tmp_path / "t-0", config)
    for tag in range(40):
        log.append_as_leader(make_batch(1, value_bytes=100, tag=tag), leader_epoch=0)
    batches = read_all(log)
    log.flush()
    end = log.log_end_offset
    log.close()
    index = tmp_path / "t-0" / f"{0:020d}.index"
    entries = index.read_bytes()
    relative, position = int.from_bytes(entries[0:4], "big"), int.from_bytes(entries[4:8], "big")
    index.write_bytes(entries[:4] + (position + 7).to_bytes(4, "big") + entries[8:])
    victim = 30
    with open(tmp_path / "t-0" / f"{0:020d}.log", "r+b") as f:
        f.seek(sum(len(data) for _, data in batches[:victim]) + 1)
        f.write(b"\x01")  # offset 30 claims 2**48 + 30

    with caplog.at_level(logging.WARNING):
        log = open_log(tmp_path / "t-0", config, recovery_point=end, clean_shutdown=True)
        assert log.read(relative, 1 << 20)
    assert "the indexes go no further" in caplog.text
    with pytest.raises(CorruptLog) as raised:
        log.read(victim, 1 << 20)
    assert raised.value.cut_offset == victim
    log.close()



def test_a_batch_whose_base_offset_is_damaged_is_refused_not_served_as_other_offsets(tmp_path):
    """A bit flipped in a batch's base offset (outside the CRC) made it claim offsets far
    ahead; the read at its real offset answered nothing, as if at the log end, and consumers
    waited for ever (the storage-fault campaign, seed 141). The batches must follow each
    other: the read raises CorruptLog at the expected offset, and a cut there removes it."""
    log = open_log(tmp_path / "t-0")
    for tag in range(6):
        log.append_as_leader(make_batch(1, tag=tag), leader_epoch=0)
    batches = read_all(log)
    log.flush()
    position = sum(len(data) for _, data in batches[:3])
    segment = tmp_path / "t-0" / f"{0:020d}.log"
    with open(segment, "r+b") as f:
        f.seek(position + 1)  # the base offset's second byte: offset 3 becomes 2**48 + 3
        f.write(b"\x01")
    with pytest.raises(CorruptLog) as raised:
        log.read(3, 1 << 20)
    assert raised.value.cut_offset == 3
    assert log.read(0, 1 << 20)  # the batches before it are served
    log.truncate_to(3, "test")
    assert read_all(log) == batches[:3]


def test_refused_records_are_each_named_by_their_index_in_the_batch(tmp_path):
    """KIP-467: a batch refused for some of its records names each (record_errors in Produce
    v8+), as Kafka's LogValidator does: every record without a key in a compacted topic, every
    record outside the timestamp bounds; records without a timestamp (-1) are not checked."""
    clock = FakeClock()
    now = clock.now_ms
    compacted = open_log(tmp_path / "c-0", LogConfig(cleanup_policy="compact"), clock)
    keys = [b"a", None, b"b", None, None]
    with pytest.raises(InvalidRecord) as refused:
        compacted.append_as_leader(build_batch([(k, b"v", None, now) for k in keys]), 0)
    assert [e.batch_index for e in refused.value.record_errors] == [1, 3, 4]
    assert refused.value.record_errors[0].message == \
        "Compacted topic cannot accept message without key in topic partition c-0"
    assert "3 records" in str(refused.value)
    assert compacted.log_end_offset == 0

    bounded = open_log(tmp_path / "t-0", LogConfig(timestamp_before_max_ms=1000,
                                                   timestamp_after_max_ms=1000), clock)
    stamps = [now - 5000, now, now - 6000, now + 3000, -1]
    with pytest.raises(InvalidTimestamp) as late:
        bounded.append_as_leader(build_batch([(b"k", b"v", None, t) for t in stamps],
                                             base_timestamp=now - 5000), 0)
    assert [e.batch_index for e in late.value.record_errors] == [0, 2, 3]
    assert "5000 ms in the past" in late.value.record_errors[0].message
    assert "3000 ms in the future" in late.value.record_errors[2].message
    assert bounded.log_end_offset == 0
