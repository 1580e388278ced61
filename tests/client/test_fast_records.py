"""client.fast_records against the strict decoder (protocol.records.decode_batch).

The fast path may decline any batch (None), but whatever it returns must equal what the strict
decoder returns, and it must decline what the strict decoder refuses: checked on random batches,
uniform and not, and on batches with one byte changed (CRC recomputed, so only the record
structure can catch it). It must also take the common case: a uniform batch of a producer.
"""

from __future__ import annotations

import struct

from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog.client.fast_records import decode_uniform
from epochlog.client.types import ConsumerRecord
from epochlog.protocol.batch import BATCH_HEADER_BYTES, CorruptBatch, read_header
from epochlog.protocol.records import build_batch, decode_batch

BASE_TS = 1_700_000_000_000


def strict(batch: bytes) -> list[ConsumerRecord] | None:
    try:
        header, records = decode_batch(batch)
    except CorruptBatch:
        return None
    return [ConsumerRecord("t", 3, r.offset, r.timestamp, header.timestamp_type, r.key, r.value,
                           r.headers, header.partition_leader_epoch) for r in records]


def fast(batch: bytes) -> list[ConsumerRecord] | None:
    header = read_header(batch)
    return decode_uniform(batch, BATCH_HEADER_BYTES, header.size, header, "t", 3)


def with_crc(batch: bytearray) -> bytes:
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def test_a_producers_uniform_batch_takes_the_fast_path() -> None:
    for count, key in ((2, None), (64, b"k"), (65, None), (5000, b"key-1")):
        records = [(key, bytes([i % 256]) * 100, None, BASE_TS + i % 7) for i in range(count)]
        batch = build_batch(records, base_offset=1000, partition_leader_epoch=4)
        got = fast(batch)
        assert got is not None and got == strict(batch)
        assert [r.offset for r in got] == list(range(1000, 1000 + count))


records_st = st.lists(st.tuples(
    st.one_of(st.none(), st.binary(max_size=3), st.just(b"kk")),
    st.one_of(st.none(), st.binary(max_size=200), st.just(b"v" * 130)),
    st.one_of(st.none(), st.just([("h", b"x")])),
    st.integers(min_value=BASE_TS - 100, max_value=BASE_TS + 20_000)),
    min_size=1, max_size=150)


@settings(max_examples=300, deadline=None)
@given(records_st, st.booleans(), st.integers(min_value=0, max_value=4))
def test_same_answer_as_the_strict_decoder(records: list, uniform: bool, epoch: int) -> None:
    if uniform:  # make them alike, as a producer's usually are
        key, value, _, _ = records[0]
        records = [(key, value, None, BASE_TS + (i % 3)) for i in range(len(records))]
    batch = build_batch(records, base_offset=77, partition_leader_epoch=epoch)
    got = fast(batch)
    assert got is None or got == strict(batch)
    if uniform and len(records) > 1:
        assert got is not None


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=2, max_value=100), st.integers(min_value=0, max_value=50),
       st.data())
def test_changed_bytes_are_never_accepted_differently(count: int, size: int,
                                                      data: st.DataObject) -> None:
    batch = bytearray(build_batch([(None, b"x" * size, None, BASE_TS)] * count))
    where = data.draw(st.integers(min_value=BATCH_HEADER_BYTES,
                                  max_value=len(batch) - 1))
    batch[where] = data.draw(st.integers(min_value=0, max_value=255))
    changed = with_crc(batch)
    got = fast(changed)
    assert got is None or got == strict(changed)
