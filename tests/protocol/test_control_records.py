"""Transaction markers (protocol/control_records.py): Kafka's control record layout."""

from __future__ import annotations

import pytest

from epochlog.protocol.batch import CorruptBatch, read_header
from epochlog.protocol.control_records import Marker, marker_batch, read_marker
from epochlog.protocol.records import build_batch, decode_batch


@pytest.mark.parametrize("commit", [True, False])
def test_a_marker_batch_reads_back(commit: bool) -> None:
    batch = marker_batch(commit, producer_id=7, producer_epoch=3, coordinator_epoch=12,
                         timestamp_ms=1000)
    header = read_header(batch)
    assert header.is_control and header.is_transactional
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    _, records = decode_batch(batch)
    # key: version 0, type 1 COMMIT / 0 ABORT; value: version 0, coordinator epoch 12
    assert records[0].key == (b"\x00\x00\x00\x01" if commit else b"\x00\x00\x00\x00")
    assert records[0].value == b"\x00\x00\x00\x00\x00\x0c"
    assert read_marker(batch) == Marker(commit, 12)


def test_a_batch_that_holds_no_marker_is_refused() -> None:
    with pytest.raises(CorruptBatch):
        read_marker(build_batch([(b"k", b"v", None, 1)]))
    other = build_batch([(b"\x00\x00\x00\x05", b"", None, 1)], is_control=True)
    with pytest.raises(CorruptBatch, match="type 5"):
        read_marker(other)
