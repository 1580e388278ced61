"""Producer state snapshots (broker/storage/producer_snapshots.py) on real files: Kafka's layout,
the round trip of our ProducerEntry, every damaged byte refused, and what the log makes of them:
an open after a clean shutdown replays nothing, one after a crash replays from a snapshot at or
below its recovery point, a damaged or too new snapshot falls back to an older one or to the
full scan, a truncation deletes those above it, and only a few are kept."""

from __future__ import annotations

import logging
import struct

import pytest
from crc32c import crc32c

from epochlog.broker.storage import LogConfig
from epochlog.broker.storage.producer_snapshots import (
    SNAPSHOTS_KEPT_MAX,
    CorruptSnapshot,
    decode,
    encode,
)
from epochlog.broker.storage.producer_state import BatchMetadata, ProducerEntry
from epochlog.protocol.records import build_batch

from .helpers import make_batch, open_log

CONFIG = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096,
                   flush_ms=2**63 - 1)
KAFKA_ENTRY = struct.Struct(">qhiqiqiq")


def state() -> dict[int, ProducerEntry]:
    five = tuple(BatchMetadata(10 * i, 10 * i + 9, 100 + 10 * i, 109 + 10 * i, 5000 + i)
                 for i in range(5))
    return {
        7: ProducerEntry(3, five, -1, 2),
        8: ProducerEntry(0, (BatchMetadata(2**31 - 2, 1, 200, 203, 6000),), 190, 4),  # wraps
        9: ProducerEntry(5, (), -1, 6),  # only markers since its epoch began
    }


def test_our_state_round_trips() -> None:
    assert decode("x", encode(state())) == state()
    assert decode("x", encode({})) == {}


def test_the_layout_is_kafkas_and_a_kafka_reader_gets_each_producers_last_batch() -> None:
    """version int16 1, CRC-32C of what follows the crc field, an int32 count, 46-byte entries.
    Kafka keeps the last entry it reads per producer id: ours is the producer's last batch."""
    data = encode(state())
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, crc) == (1, crc32c(data[6:]))
    assert count == 7 and len(data) == 10 + 7 * 46
    kafka: dict[int, tuple[int, ...]] = {}
    for pos in range(10, len(data), 46):
        fields = KAFKA_ENTRY.unpack_from(data, pos)
        kafka[fields[0]] = fields[1:]
    # epoch, last sequence, last offset, offset delta, timestamp, coordinator epoch, txn first
    assert kafka[7] == (3, 49, 149, 9, 5004, 2, -1)
    assert kafka[8] == (0, 1, 203, 3, 6000, 4, 190)
    assert kafka[9] == (5, -1, -1, 0, -1, 6, -1)


def test_every_damaged_byte_is_refused() -> None:
    data = encode(state())
    for position in range(len(data)):
        for bit in (0, 7):
            damaged = bytearray(data)
            damaged[position] ^= 1 << bit
            with pytest.raises(CorruptSnapshot):
                decode("x", bytes(damaged))
    for cut in (0, 5, 9, len(data) - 1):
        with pytest.raises(CorruptSnapshot):
            decode("x", data[:cut])


def test_entries_that_pass_the_crc_but_cannot_be_ours_are_refused() -> None:
    def file_of(*rows: tuple[int, ...]) -> bytes:
        body = struct.pack(">i", len(rows)) + b"".join(KAFKA_ENTRY.pack(*r) for r in rows)
        return struct.pack(">hI", 1, crc32c(body)) + body

    ok = (7, 0, 4, 10, 4, 1000, -1, -1)
    decode("x", file_of(ok))
    for bad in [((-2, 0, 4, 10, 4, 1000, -1, -1),),          # producer id
                ((7, 0, 4, 10, 11, 1000, -1, -1),),          # delta past the offset
                ((7, 0, 4, -1, 0, 1000, -1, -1),),           # no batch yet a sequence
                (ok, (8, 0, 0, 20, 0, 1, -1, -1), ok),        # a producer's entries apart
                (ok, (7, 1, 9, 20, 4, 1, -1, -1)),            # entries disagree on the epoch
                (ok, ok)]:                                    # batches out of order
        with pytest.raises(CorruptSnapshot):
            decode("x", file_of(*bad))


def idempotent(sequence: int, pid: int = 11) -> bytes:
    return build_batch([(b"k", b"v" * 100, None, 1000)], producer_id=pid, producer_epoch=0,
                       base_sequence=sequence)


def fill(log, batches: int, start: int = 0) -> None:
    for sequence in range(start, start + batches):
        log.append_as_leader(idempotent(sequence), leader_epoch=0)


def snapshots_of(path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in path.glob("*.snapshot"))


def test_an_open_after_a_clean_shutdown_reads_the_snapshot_and_replays_nothing(tmp_path,
                                                                                 caplog) -> None:
    log = open_log(tmp_path / "t-0", CONFIG)
    fill(log, 40)
    before = dict(log.producer_state.producers)
    end = log.log_end_offset
    log.flush()
    log.close()
    assert snapshots_of(tmp_path / "t-0")[-1] == end  # written at close
    with caplog.at_level(logging.INFO, logger="epochlog.storage"):
        again = open_log(tmp_path / "t-0", CONFIG, clean_shutdown=True, recovery_point=end)
    assert again.producer_batches_replayed == 0
    assert f"from the snapshot at offset {end}, 0 batches replayed" in caplog.text
    assert again.producer_state.producers == before
    # the 5 batches kept per producer came back: a retry of the 4th latest is a duplicate
    retry = again.append_as_leader(idempotent(36), leader_epoch=0)
    assert retry.duplicate and retry.first_offset == 36
    again.close()


def test_an_open_after_a_crash_replays_from_a_snapshot_at_or_below_the_recovery_point(
        tmp_path) -> None:
    log = open_log(tmp_path / "t-0", CONFIG)
    fill(log, 30)
    log.flush()
    recovery_point = log.log_end_offset
    fill(log, 10, start=30)  # rolls take snapshots past the recovery point
    before = dict(log.producer_state.producers)
    taken = snapshots_of(tmp_path / "t-0")
    below = max(o for o in taken if o <= recovery_point)
    assert max(taken) > recovery_point
    again = open_log(tmp_path / "t-0", CONFIG, recovery_point=recovery_point)  # no close
    assert again.producer_batches_replayed == again.log_end_offset - below
    assert again.producer_state.producers == before
    assert max(snapshots_of(tmp_path / "t-0")) <= again.log_end_offset
    again.close()


@pytest.mark.parametrize("damage", ["flip", "cut", "empty"])
def test_a_damaged_snapshot_falls_back_to_an_older_one(tmp_path, caplog, damage: str) -> None:
    log = open_log(tmp_path / "t-0", CONFIG)
    fill(log, 40)
    before = dict(log.producer_state.producers)
    end = log.log_end_offset
    log.flush()
    log.close()
    offsets = snapshots_of(tmp_path / "t-0")
    latest = tmp_path / "t-0" / f"{offsets[-1]:020d}.snapshot"
    data = latest.read_bytes()
    latest.write_bytes({"flip": data[:20] + bytes([data[20] ^ 4]) + data[21:],
                        "cut": data[:-7], "empty": b""}[damage])
    with caplog.at_level(logging.WARNING):
        again = open_log(tmp_path / "t-0", CONFIG, clean_shutdown=True, recovery_point=end)
    assert "is corrupt" in caplog.text
    assert not latest.exists()
    assert again.producer_batches_replayed == end - offsets[-2]
    assert again.producer_state.producers == before
    again.close()


def test_no_snapshot_means_the_full_scan(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", CONFIG)
    fill(log, 20)
    before = dict(log.producer_state.producers)
    end = log.log_end_offset
    log.close()
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.unlink()
    again = open_log(tmp_path / "t-0", CONFIG, clean_shutdown=True, recovery_point=end)
    assert again.producer_batches_replayed == 20
    assert again.producer_state.producers == before
    again.close()


def test_a_snapshot_past_the_log_end_is_deleted_and_not_read(tmp_path) -> None:
    """The log lost its tail (a power loss, a recovery cut), the snapshot taken later did not:
    it describes batches that are gone."""
    log = open_log(tmp_path / "t-0", CONFIG)
    fill(log, 20)
    end = log.log_end_offset
    log.close()
    assert max(snapshots_of(tmp_path / "t-0")) == end
    segments = sorted((tmp_path / "t-0").glob("*.log"))
    for path in segments[1:]:  # the tail is gone, and with it the later segments' files
        for other in (tmp_path / "t-0").glob(path.name.split(".")[0] + ".*"):
            other.unlink()
    again = open_log(tmp_path / "t-0", CONFIG, clean_shutdown=True, recovery_point=end)
    assert again.log_end_offset < end
    assert max(snapshots_of(tmp_path / "t-0"), default=0) <= again.log_end_offset
    assert again.producer_batches_replayed == again.log_end_offset  # from the log start
    assert again.producer_state.last_sequence(11) == again.log_end_offset - 1
    again.close()


def test_a_truncation_deletes_the_snapshots_above_it_and_reloads(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", CONFIG)
    fill(log, 40)
    cut = 25
    log.truncate_to(cut, "test")
    assert max(snapshots_of(tmp_path / "t-0")) <= cut
    assert log.producer_state.last_sequence(11) == cut - 1
    assert log.producer_batches_replayed < cut  # from a snapshot below the cut
    log.append_as_leader(idempotent(cut), leader_epoch=0)  # the sequence goes on from there
    log.close()


def test_only_the_newest_snapshots_are_kept(tmp_path) -> None:
    log = open_log(tmp_path / "t-0", CONFIG)
    fill(log, 100)
    assert len(log.segments) > SNAPSHOTS_KEPT_MAX + 2
    assert len(snapshots_of(tmp_path / "t-0")) <= SNAPSHOTS_KEPT_MAX
    log.update_high_watermark(log.log_end_offset)
    log.advance_log_start_offset(log.segments[-1].base_offset)
    assert min(snapshots_of(tmp_path / "t-0")) >= log.log_start_offset
    log.close()


def test_a_producer_without_batches_keeps_its_epoch_through_a_snapshot(tmp_path) -> None:
    """A marker at a bumped epoch leaves a producer with no batch: the snapshot still fences
    its older epoch."""
    from epochlog.broker.storage.errors import InvalidProducerEpoch
    from epochlog.protocol.control_records import marker_batch

    log = open_log(tmp_path / "t-0", CONFIG)
    log.append_as_leader(make_batch(1), leader_epoch=0)
    log.append_as_leader(marker_batch(False, 12, 3, 1, 1000), leader_epoch=0)
    end = log.log_end_offset
    log.close()
    again = open_log(tmp_path / "t-0", CONFIG, clean_shutdown=True, recovery_point=end)
    assert again.producer_batches_replayed == 0
    with pytest.raises(InvalidProducerEpoch):
        again.append_as_leader(idempotent(0, pid=12), leader_epoch=0)  # epoch 0 < 3
    again.close()
