"""On-disk formats against Kafka's documented layouts: batches, `.index` and `.timeindex` entries
and checkpoint files built by hand with struct and text read back as expected, and the files we
write byte for byte equal to the hand-built ones. Also: corrupt or cut-short checkpoints are
refused naming the file, and the data dir rebuilds safely from them."""

from __future__ import annotations

import json
import logging
import os
import struct

import pytest
from crc32c import crc32c
from kafka.record.default_records import DefaultRecordBatchBuilder

from epochlog.broker.storage import (
    CorruptCheckpoint,
    InconsistentIdentity,
    LogConfig,
    LogManager,
)
from epochlog.broker.storage.checkpoints import read_offsets, write_offsets
from epochlog.broker.storage.epoch_cache import read_epoch_checkpoint
from epochlog.broker.storage.log_manager import CLEAN_SHUTDOWN_FILE
from epochlog.cli import main as cli_main
from epochlog.protocol.batch import check_all

from .helpers import FakeClock, open_log, read_all

NO_FLUSH = LogConfig(index_interval_bytes=0, flush_ms=2**63 - 1)


def zigzag_varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def hand_batch(base_offset: int, epoch: int, values: list[bytes], base_ts: int) -> bytes:
    """A RecordBatch v2 from Kafka's documented layout, field by field."""
    records = b""
    for delta, value in enumerate(values):
        body = (b"\x00" + zigzag_varint(delta) + zigzag_varint(delta) + zigzag_varint(-1)
                + zigzag_varint(len(value)) + value + zigzag_varint(0))
        records += zigzag_varint(len(body)) + body
    after_crc = struct.pack(">hiqqqhii", 0, len(values) - 1, base_ts, base_ts + len(values) - 1,
                            -1, -1, -1, len(values)) + records
    crc = crc32c(after_crc)
    batch_length = 4 + 1 + 4 + len(after_crc)
    return struct.pack(">qiibI", base_offset, batch_length, epoch, 2, crc) + after_crc


def kafka_python_batch(count: int, timestamp_ms: int = 5000) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=0,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i in range(count):
        builder.append(i, timestamp_ms + i, b"key", b"value-%d" % i, [])
    return bytes(builder.build())


def test_hand_built_segment_reads_back(tmp_path):
    folder = tmp_path / "t-0"
    folder.mkdir()
    batches = [hand_batch(0, 1, [b"a", b"bb"], 1000), hand_batch(2, 1, [b"ccc"], 2000),
               hand_batch(3, 4, [b"d"] * 4, 3000)]
    (folder / f"{0:020d}.log").write_bytes(b"".join(batches))
    log = open_log(folder, NO_FLUSH)  # no checkpoint, no marker: recovered from scratch
    assert log.log_end_offset == 7
    assert [b for _, b in read_all(log)] == batches
    assert log.epoch_cache.entries == []  # no checkpoint file: KIP-101 entries come from appends
    assert log.offset_for_timestamp(2000) == (2, 2000)


def test_our_segment_and_index_bytes_match_the_layouts(tmp_path):
    log = open_log(tmp_path / "t-0", NO_FLUSH)
    inputs = [kafka_python_batch(n, 5000 + 100 * i) for i, n in enumerate((1, 2, 3, 2))]
    for batch in inputs:
        log.append_as_follower(_at(batch, log.log_end_offset))
    log.flush()
    folder = tmp_path / "t-0"
    data = (folder / f"{0:020d}.log").read_bytes()
    headers = check_all(data)
    assert data == b"".join(_at(b, h.base_offset) for b, h in zip(inputs, headers, strict=True))
    positions = [sum(h.size for h in headers[:i]) for i in range(len(headers))]
    # index_interval_bytes=0: every batch after the first gets an entry (Kafka's '>' rule)
    expected_index = b"".join(struct.pack(">ii", h.last_offset, p)
                              for h, p in zip(headers[1:], positions[1:], strict=True))
    assert (folder / f"{0:020d}.index").read_bytes() == expected_index
    expected_time = b"".join(struct.pack(">qi", h.max_timestamp, h.last_offset)
                             for h in headers[1:])
    assert (folder / f"{0:020d}.timeindex").read_bytes() == expected_time


def _at(batch: bytes, base_offset: int) -> bytes:
    return struct.pack(">q", base_offset) + batch[8:]


def test_hand_built_index_with_kafka_preallocated_tail_loads(tmp_path):
    folder = tmp_path / "t-0"
    folder.mkdir()
    batches = [hand_batch(100 + i, 0, [b"x" * 50], 1000 + i) for i in range(6)]
    (folder / f"{100:020d}.log").write_bytes(b"".join(batches))
    size = len(batches[0])
    index = struct.pack(">ii", 2, 2 * size) + struct.pack(">ii", 4, 4 * size) + b"\0" * 80
    (folder / f"{100:020d}.index").write_bytes(index)
    (folder / f"{100:020d}.timeindex").write_bytes(struct.pack(">qi", 1002, 2) + b"\0" * 36)
    (tmp_path / CLEAN_SHUTDOWN_FILE).write_bytes(b"")
    log = open_log(folder, NO_FLUSH, clean_shutdown=True, log_start_offset=100)
    segment = log.segments[0]
    assert segment.offset_index.entries() == [(102, 2 * size), (104, 4 * size)]
    assert segment.time_index.entries() == [(1002, 102)]
    assert log.log_end_offset == 106 and segment.max_timestamp_ms == 1005
    assert [b for _, b in read_all(log)] == batches


def test_index_pointing_past_its_segment_is_rebuilt(tmp_path):
    folder = tmp_path / "t-0"
    folder.mkdir()
    batches = [hand_batch(i, 0, [b"x"], 1000) for i in range(3)]
    (folder / f"{0:020d}.log").write_bytes(b"".join(batches))
    (folder / f"{0:020d}.index").write_bytes(struct.pack(">ii", 1, 10**6))
    log = open_log(folder, NO_FLUSH, clean_shutdown=True)
    assert [b for _, b in read_all(log)] == batches
    assert all(p < log.active_segment.size_bytes for _, p in log.segments[0].offset_index.entries())


def test_offset_checkpoint_layout(tmp_path):
    path = str(tmp_path / "replication-offset-checkpoint")
    hand = b"0\n3\nmy-topic 0 42\nmy-topic 1 0\nother 7 123456789012\n"
    with open(path, "wb") as f:
        f.write(hand)
    offsets = read_offsets(path)
    assert offsets == {("my-topic", 0): 42, ("my-topic", 1): 0, ("other", 7): 123456789012}
    os.unlink(path)
    write_offsets(path, offsets)
    with open(path, "rb") as f:
        assert f.read() == hand
    assert not os.path.exists(path + ".tmp")


@pytest.mark.parametrize("content, reason", [
    (b"0\n2\nt 0 5\nt 1 7", "cut short"),
    (b"0\n2\nt 0 5\n", "expected 2 entries"),
    (b"1\n0\n", "version"),
    (b"0\n1\nt 0 -5\n", "line 3"),
    (b"0\n1\nt x 5\n", "line 3"),
    (b"0\n1\nt 0 5 9\n", "line 3"),
    (b"0\nz\n", "count"),
    (b"", "cut short"),
    (b"0\n2\nt 0 5\nt 0 6\n", "twice"),
])
def test_corrupt_offset_checkpoints_are_refused_naming_the_file(tmp_path, content, reason):
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    with open(path, "wb") as f:
        f.write(content)
    with pytest.raises(CorruptCheckpoint, match=reason) as e:
        read_offsets(path)
    assert path in str(e.value)


@pytest.mark.parametrize("content", [b"0\n2\n0 0\n3 1", b"0\n2\n3 10\n2 20\n", b"0\n1\n-1 0\n"])
def test_corrupt_epoch_checkpoints_are_refused(tmp_path, content):
    path = str(tmp_path / "leader-epoch-checkpoint")
    with open(path, "wb") as f:
        f.write(content)
    with pytest.raises(CorruptCheckpoint):
        read_epoch_checkpoint(path)


def open_manager(data_dir, clock=None, **kwargs):
    return LogManager.open(str(data_dir), NO_FLUSH, clock or FakeClock(), broker_id=kwargs.get(
        "broker_id", 1), cluster_id=kwargs.get("cluster_id", "c1"))


def test_data_dir_rebuilds_safely_from_corrupt_checkpoints(tmp_path, caplog):
    from .helpers import make_batch
    manager = open_manager(tmp_path)
    log = manager.get_or_create("t", 0)
    for epoch in (1, 1, 2):
        log.append_as_leader(make_batch(3), epoch)
    log.update_high_watermark(9)
    expected = read_all(log)
    manager.close()
    for name in ("recovery-point-offset-checkpoint", "replication-offset-checkpoint",
                 "t-0/leader-epoch-checkpoint"):
        with open(tmp_path / name, "ab") as f:
            f.write(b"garbage")
    with caplog.at_level(logging.WARNING, "epochlog.storage"):
        manager = open_manager(tmp_path)
    assert "recovery-point-offset-checkpoint is corrupt" in caplog.text
    assert "leader-epoch-checkpoint is corrupt" in caplog.text
    log = manager.get("t", 0)
    assert read_all(log) == expected
    assert log.epoch_cache.entries == [(1, 0), (2, 6)]  # rebuilt from the batches
    assert log.high_watermark == 0  # safe: re-learned from the leader
    manager.close()


def test_identity_file_refuses_another_broker(tmp_path):
    open_manager(tmp_path).close()
    text = (tmp_path / "meta.properties").read_text()
    assert "broker.id=1\n" in text and "cluster.id=c1\n" in text and "version=0\n" in text
    with pytest.raises(InconsistentIdentity, match="broker 1 of cluster c1"):
        open_manager(tmp_path, broker_id=2)


def test_clean_shutdown_marker(tmp_path):
    manager = open_manager(tmp_path)
    assert not manager.had_clean_shutdown
    manager.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    manager = open_manager(tmp_path)
    assert manager.had_clean_shutdown and not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()


def test_dump_tools(tmp_path, capsys):
    folder = tmp_path / "t-0"
    folder.mkdir()
    batches = [hand_batch(0, 3, [b"a", b"bb"], 1000), hand_batch(2, 3, [b"c"], 2000)]
    path = folder / f"{0:020d}.log"
    path.write_bytes(b"".join(batches) + batches[0][:30])
    assert cli_main(["dump-log", "--records", str(path)]) == 1  # the torn tail makes it fail
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[0] | {"records": None} == {
        "base_offset": 0, "last_offset": 1, "leader_epoch": 3, "producer_id": -1,
        "producer_epoch": -1, "base_sequence": -1, "record_count": 2, "crc_valid": True,
        "position": 0, "size": len(batches[0]), "records": None, "compression": "none",
        "timestamp_type": "CreateTime", "max_timestamp": 1001}
    assert [r["value"] for r in lines[0]["records"]] == ["a", "bb"]
    assert lines[1]["base_offset"] == 2 and lines[2] == {"position": sum(map(len, batches)),
                                                         "torn_tail_bytes": 30}
    epochs = tmp_path / "leader-epoch-checkpoint"
    epochs.write_bytes(b"0\n1\n3 0\n")
    assert cli_main(["dump-checkpoint", str(epochs)]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == [{"epoch": 3, "start_offset": 0}]
    epochs.write_bytes(b"0\n2\n3 0\n")
    assert cli_main(["dump-checkpoint", str(epochs)]) == 1
    assert "expected 2 entries" in capsys.readouterr().err
