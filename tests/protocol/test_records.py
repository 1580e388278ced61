"""RecordBatch v2 records and compression (protocol.records, protocol.compression).

What is checked, and why:
- round trip: whatever we build, we decode to the same records and header fields, for every codec;
- oracles: batches from real clients' builders (kafka-python's pure-Python one, aiokafka's Cython
  one) decode with ours to the records they were given, and ours decode identically with their
  readers: the wire format is Kafka's, not merely self-consistent;
- bad input: a flipped byte, a torn batch, random or mutated records (with a CRC made to match, so
  the record parser itself is exercised), a decompression bomb: each is a CorruptBatch naming what
  broke, never another exception and never unbounded memory.
"""

from __future__ import annotations

import gzip
import os
import struct
import tracemalloc

import cramjam
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochlog.protocol.batch import BATCH_HEADER_BYTES, CorruptBatch, check, stamp
from epochlog.protocol.compression import (
    XERIAL_MAGIC,
    Compression,
    compress,
    decompress,
)
from epochlog.protocol.errors import DecodeError
from epochlog.protocol.records import (
    BatchBuilder,
    Record,
    build_batch,
    decode_batch,
    decode_batches,
    iter_records,
)
from epochlog.protocol.varint import encode_varint

CODECS = list(Compression)
FAST = settings(max_examples=200, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

# Header field offsets, for tests that rewrite a batch by hand.
BATCH_LENGTH_AT = 8
CRC_AT = 17
ATTRIBUTES_AT = 21
LAST_OFFSET_DELTA_AT = 23
RECORD_COUNT_AT = 57


def reseal(batch: bytes, payload: bytes, *, record_count: int | None = None,
           last_offset_delta: int | None = None, attributes: int | None = None) -> bytes:
    """batch's header around a new records payload, with batch_length and CRC made to match, so a
    decoder gets past the CRC check and must judge the records themselves."""
    head = bytearray(batch[:BATCH_HEADER_BYTES])
    struct.pack_into(">i", head, BATCH_LENGTH_AT, BATCH_HEADER_BYTES - 12 + len(payload))
    if attributes is not None:
        struct.pack_into(">h", head, ATTRIBUTES_AT, attributes)
    if last_offset_delta is not None:
        struct.pack_into(">i", head, LAST_OFFSET_DELTA_AT, last_offset_delta)
    if record_count is not None:
        struct.pack_into(">i", head, RECORD_COUNT_AT, record_count)
    struct.pack_into(">I", head, CRC_AT, crc32c(bytes(head[ATTRIBUTES_AT:]) + payload))
    return bytes(head) + payload


def raw_record(offset_delta: int, key_length: int, key: bytes, value_length: int, value: bytes,
               header_count: bytes = b"\x00", length: int | None = None) -> bytes:
    """One record written field by field, lengths free to lie."""
    body = (b"\x00" + encode_varint(0) + encode_varint(offset_delta) + encode_varint(key_length)
            + key + encode_varint(value_length) + value + header_count)
    return encode_varint(len(body) if length is None else length) + body


def simple(record: Record) -> tuple:
    return (record.offset, record.timestamp, record.key, record.value, list(record.headers))


# Strategies.
keys_values = st.none() | st.binary(max_size=40)
headers = st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=12)), max_size=3)
timestamps = st.integers(min_value=0, max_value=1 << 45)
record_inputs = st.lists(st.tuples(keys_values, keys_values, headers, timestamps),
                         min_size=1, max_size=30)


def expected(inputs, base_offset: int, log_append_time: bool) -> list[tuple]:
    max_timestamp = max(r[3] for r in inputs)
    return [(base_offset + i, max_timestamp if log_append_time else ts, k, v, list(h or []))
            for i, (k, v, h, ts) in enumerate(inputs)]


# Round trip.

@FAST
@given(inputs=record_inputs, codec=st.sampled_from(CODECS),
       base_offset=st.integers(0, 1 << 60),
       partition_leader_epoch=st.integers(-1, (1 << 31) - 1),
       producer_id=st.integers(-1, (1 << 63) - 1),
       producer_epoch=st.integers(-1, (1 << 15) - 1),
       base_sequence=st.integers(-1, (1 << 31) - 1),
       is_transactional=st.booleans(), is_control=st.booleans(),
       timestamp_type=st.sampled_from([0, 1]))
def test_build_then_decode_gives_the_same_records_and_header(
        inputs, codec, base_offset, partition_leader_epoch, producer_id, producer_epoch,
        base_sequence, is_transactional, is_control, timestamp_type):
    batch = build_batch(inputs, compression=codec, base_offset=base_offset,
                        partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
                        producer_epoch=producer_epoch, base_sequence=base_sequence,
                        is_transactional=is_transactional, is_control=is_control,
                        timestamp_type=timestamp_type)
    header, records = decode_batch(batch)
    assert [simple(r) for r in records] == expected(inputs, base_offset, timestamp_type == 1)
    assert (header.base_offset, header.partition_leader_epoch, header.producer_id,
            header.producer_epoch, header.base_sequence) == (
        base_offset, partition_leader_epoch, producer_id, producer_epoch, base_sequence)
    assert (header.compression, header.is_transactional, header.is_control,
            header.timestamp_type) == (codec, is_transactional, is_control, timestamp_type)
    assert header.record_count == len(inputs) and header.last_offset_delta == len(inputs) - 1
    assert header.base_timestamp == inputs[0][3]
    assert header.max_timestamp == max(r[3] for r in inputs)
    assert header.size == len(batch)


@FAST
@given(inputs=record_inputs, codec=st.sampled_from(CODECS))
def test_batch_builder_gives_what_build_batch_gives(inputs, codec):
    builder = BatchBuilder(compression=codec, batch_bytes_max=1 << 30)
    for key, value, hdrs, ts in inputs:
        assert builder.append(key, value, hdrs, ts)
    built = builder.build()
    _, records = decode_batch(built)
    assert [simple(r) for r in records] == expected(inputs, 0, False)
    assert len(built) <= builder.size_in_bytes
    if codec == Compression.NONE:
        assert built == build_batch(inputs)


def test_timestamp_none_means_now_and_base_timestamp_can_be_given():
    batch = build_batch([(None, b"a", None, None), (None, b"b", None, 5_000)], base_timestamp=4_000)
    header, records = decode_batch(batch)
    assert header.base_timestamp == 4_000
    assert records[0].timestamp > 1_600_000_000_000 and records[1].timestamp == 5_000
    assert header.max_timestamp == records[0].timestamp


def test_large_values_and_many_records_use_multi_byte_varints():
    # Values past the varint table (8 kB), offset deltas past it, timestamps going backwards.
    inputs = [(b"k" * (i % 300), os.urandom(20_000) if i % 1000 == 0 else b"v",
               [("h" * 200, b"x" * 9000)] if i == 5 else None, 10_000_000 - i * 7919)
              for i in range(9000)]
    for codec in (Compression.NONE, Compression.ZSTD, Compression.SNAPPY):
        _, records = decode_batch(build_batch(inputs, compression=codec))
        assert [simple(r) for r in records] == expected(inputs, 0, False)


def test_batch_builder_stops_at_its_size_limit():
    builder = BatchBuilder(batch_bytes_max=1000)
    appended = 0
    while builder.append(None, b"x" * 100, None, 1):
        appended += 1
    assert appended == builder.record_count == 8  # 61 + 8 * 106 = 909; a ninth is 1015
    assert not builder.append(None, b"x" * 100, None, 1)
    assert builder.record_count == 8
    batch = builder.build()
    assert len(batch) == builder.size_in_bytes <= 1000
    assert len(decode_batch(batch)[1]) == 8


def test_batch_builder_takes_a_first_record_bigger_than_its_limit():
    builder = BatchBuilder(batch_bytes_max=100)
    assert builder.append(b"k", b"x" * 500)
    assert not builder.append(b"k", b"x")
    assert decode_batch(builder.build())[1][0].value == b"x" * 500


def test_batch_builder_writes_uncompressed_when_compression_does_not_pay():
    builder = BatchBuilder(compression=Compression.GZIP, batch_bytes_max=1 << 20)
    builder.append(None, os.urandom(5000), None, 1)
    header, records = decode_batch(builder.build())
    assert header.compression == Compression.NONE and len(records[0].value) == 5000
    builder = BatchBuilder(compression=Compression.GZIP, batch_bytes_max=1 << 20)
    builder.append(None, bytes(5000), None, 1)
    header, _ = decode_batch(builder.build())
    assert header.compression == Compression.GZIP


def test_batch_builder_sets_producer_state_at_drain_time():
    builder = BatchBuilder()
    builder.append(b"k", b"v", None, 1)
    builder.set_producer_state(42, 3, 100, True)
    header = check(builder.build())
    assert (header.producer_id, header.producer_epoch, header.base_sequence,
            header.is_transactional) == (42, 3, 100, True)


def test_control_record_decodes_like_any_record():
    # A COMMIT marker: key (version 0, type 1), value (version 0, coordinator epoch 7).
    key, value = struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 7)
    batch = build_batch([(key, value, None, 1000)], producer_id=9, producer_epoch=1,
                        is_transactional=True, is_control=True)
    header, records = decode_batch(batch)
    assert header.is_control and header.is_transactional
    assert (records[0].key, records[0].value) == (key, value)
    from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
    (marker,) = list(KafkaPythonBatch(batch))
    assert marker.commit


def test_several_batches_end_to_end_and_a_partial_tail():
    one = build_batch([(b"a", b"1", None, 1)], base_offset=0)
    two = build_batch([(b"b", b"2", None, 2), (b"c", b"3", None, 3)], base_offset=1,
                      compression=Compression.LZ4)
    both = one + two
    assert [(h.base_offset, len(rs)) for h, rs in decode_batches(both)] == [(0, 1), (1, 2)]
    assert [r.offset for r in iter_records(both)] == [0, 1, 2]
    assert [r.key for r in iter_records(memoryview(both))] == [b"a", b"b", b"c"]
    for cut in range(len(one) + 1, len(both)):
        assert len(decode_batches(both[:cut], allow_partial_tail=True)) == 1
        assert [r.key for r in iter_records(both[:cut], allow_partial_tail=True)] == [b"a"]
        with pytest.raises(CorruptBatch):
            decode_batches(both[:cut])


def test_decode_accepts_a_batch_inside_a_larger_buffer():
    batch = build_batch([(b"k", b"v", [("h", None)], 7)], base_offset=5)
    framed = b"\xee" * 9 + batch + b"\xee" * 9
    for buf in (framed, bytearray(framed), memoryview(framed)):
        header, records = decode_batch(buf, 9)
        assert [simple(r) for r in records] == [(5, 7, b"k", b"v", [("h", None)])]
        assert type(records[0].value) is bytes


def test_build_refuses_bad_arguments():
    with pytest.raises(ValueError):
        build_batch([])
    with pytest.raises(ValueError, match="compression"):
        build_batch([(None, b"v", None, 1)], compression=5)
    with pytest.raises(ValueError, match="timestamp_type"):
        build_batch([(None, b"v", None, 1)], timestamp_type=2)


# Oracles: real clients' builders and readers.

@pytest.fixture
def kafka_python_codecs(monkeypatch):
    """kafka-python needs python-snappy, lz4 and zstandard for three codecs, not installed here;
    give it aiokafka's cramjam-based codec functions (same formats) so its own batch framing is
    still what is tested."""
    import aiokafka.codec as aiokafka_codec
    import kafka.codec
    import kafka.record.default_records as kafka_records
    for name in ("has_snappy", "has_lz4", "has_zstd"):
        monkeypatch.setattr(kafka.codec, name, lambda: True)
    for name in ("snappy_encode", "snappy_decode", "lz4_encode", "lz4_decode", "zstd_encode",
                 "zstd_decode"):
        monkeypatch.setattr(kafka_records, name, getattr(aiokafka_codec, name))


# Compressible on purpose: both clients write uncompressed when compression does not pay.
ORACLE_INPUTS = [(None if i % 4 == 0 else b"key-%d" % i, None if i % 7 == 3 else b"value " * 20,
                  [("trace", b"t%d" % i), ("empty", None)] if i % 3 == 0 else [],
                  1_700_000_000_000 + (i * 37) % 11) for i in range(60)]


def their_records(batch_reader) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch_reader]


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_builder_batches_decode_with_ours(codec, kafka_python_codecs):
    from kafka.record.default_records import DefaultRecordBatchBuilder
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=codec, is_transactional=False,
                                        producer_id=77, producer_epoch=2, base_sequence=10,
                                        batch_size=1 << 20)
    for offset, (key, value, hdrs, ts) in enumerate(ORACLE_INPUTS):
        assert builder.append(offset, ts, key, value, hdrs) is not None
    header, records = decode_batch(bytes(builder.build()))
    assert header.compression == codec
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (77, 2, 10)
    assert [simple(r) for r in records] == expected(ORACLE_INPUTS, 0, False)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_builder_batches_decode_with_ours(codec):
    aiokafka_records = pytest.importorskip("aiokafka.record._crecords")
    builder = aiokafka_records.DefaultRecordBatchBuilder(2, codec, 0, 77, 2, 10, 1 << 20)
    for offset, (key, value, hdrs, ts) in enumerate(ORACLE_INPUTS):
        assert builder.append(offset, ts, key, value, hdrs) is not None
    header, records = decode_batch(bytes(builder.build()))
    assert header.compression == codec
    assert [simple(r) for r in records] == expected(ORACLE_INPUTS, 0, False)


@pytest.mark.parametrize("timestamp_type", [0, 1])
@pytest.mark.parametrize("codec", CODECS)
def test_our_batches_decode_identically_with_their_readers(codec, timestamp_type,
                                                           kafka_python_codecs):
    from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
    from kafka.record.memory_records import MemoryRecords
    batches = [build_batch(ORACLE_INPUTS[:30], compression=codec, base_offset=1000,
                           timestamp_type=timestamp_type, producer_id=5, producer_epoch=1,
                           base_sequence=0),
               build_batch(ORACLE_INPUTS[30:], compression=codec, base_offset=1030,
                           timestamp_type=timestamp_type)]
    ours = [simple(r) for b in batches for r in decode_batch(b)[1]]
    assert [r[0] for r in ours] == list(range(1000, 1060))

    reader = KafkaPythonBatch(batches[0])
    assert reader.validate_crc()
    assert (reader.producer_id, reader.producer_epoch, reader.base_sequence,
            reader.compression_type, reader.timestamp_type) == (5, 1, 0, codec, timestamp_type)
    memory_records = MemoryRecords(b"".join(batches))
    theirs = []
    while (batch := memory_records.next_batch()) is not None:
        assert batch.validate_crc()
        theirs += their_records(batch)
    assert theirs == ours

    aiokafka_records = pytest.importorskip("aiokafka.record._crecords")
    theirs = []
    for batch in batches:
        reader = aiokafka_records.DefaultRecordBatch(batch)
        assert reader.validate_crc()
        theirs += their_records(reader)
    assert theirs == ours


# Bad input.

def small_batch(codec: int) -> bytes:
    return build_batch([(b"k1", b"hello" * 4, [("h", b"v")], 100), (None, None, None, 90),
                        (b"k3", b"world", [], 120)], compression=codec, producer_id=3,
                       producer_epoch=0, base_sequence=0)


@pytest.mark.parametrize("codec", CODECS)
def test_a_flipped_byte_in_the_crc_covered_part_is_caught(codec):
    batch = small_batch(codec)
    for at in range(CRC_AT, len(batch)):
        for mask in (0x01, 0x80, 0xFF):
            flipped = bytearray(batch)
            flipped[at] ^= mask
            with pytest.raises(CorruptBatch):
                decode_batch(bytes(flipped))


@pytest.mark.parametrize("codec", CODECS)
def test_a_torn_batch_is_refused_at_every_length(codec):
    batch = small_batch(codec)
    for cut in range(len(batch)):
        with pytest.raises(CorruptBatch):
            decode_batch(batch[:cut])


def test_torn_records_under_a_matching_crc_are_refused_at_every_length():
    batch = small_batch(Compression.NONE)
    payload = batch[BATCH_HEADER_BYTES:]
    for cut in range(len(payload)):
        with pytest.raises(CorruptBatch):
            decode_batch(reseal(batch, payload[:cut]))
    for cut in range(len(payload)):  # the same, compressed
        torn = reseal(batch, compress(Compression.ZSTD, payload[:cut]),
                      attributes=Compression.ZSTD)
        with pytest.raises(CorruptBatch):
            decode_batch(torn)


@settings(max_examples=1000, deadline=None)
@given(payload=st.binary(max_size=200), record_count=st.integers(0, 40),
       last_offset_delta=st.integers(0, 50), codec=st.sampled_from(CODECS))
def test_random_records_under_a_valid_header_give_only_corrupt_batch(
        payload, record_count, last_offset_delta, codec):
    batch = reseal(small_batch(Compression.NONE), payload, record_count=record_count,
                   last_offset_delta=last_offset_delta, attributes=codec)
    try:
        header, records = decode_batch(batch)
    except DecodeError as exc:
        assert isinstance(exc, CorruptBatch)
        return
    assert len(records) == record_count == header.record_count


@settings(max_examples=1000, deadline=None)
@given(changes=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1,
                        max_size=4),
       codec=st.sampled_from([Compression.NONE, Compression.GZIP]))
def test_mutated_records_under_a_matching_crc_give_records_or_corrupt_batch(changes, codec):
    original = small_batch(Compression.NONE)
    payload = bytearray(original[BATCH_HEADER_BYTES:])
    for at, byte in changes:
        payload[at % len(payload)] = byte
    payload = compress(codec, bytes(payload))
    try:
        header, records = decode_batch(reseal(original, payload, attributes=codec))
    except CorruptBatch:
        return
    assert len(records) == header.record_count == 3
    assert all(isinstance(r.key, bytes | None) for r in records)


def sealed(records: bytes, record_count: int, last_offset_delta: int = 5) -> bytes:
    return reseal(small_batch(Compression.NONE), records, record_count=record_count,
                  last_offset_delta=last_offset_delta)


@pytest.mark.parametrize("records, record_count, message", [
    (raw_record(0, 900, b"abc", 1, b"v"), 1, "record 0: key length 900 runs past the end"),
    (raw_record(0, 1, b"k", -5, b""), 1, "record 0: value length -5 is negative"),
    (raw_record(0, -2, b"", 1, b"v"), 1, "record 0: key length -2 is negative"),
    (raw_record(0, 1, b"k", 1, b"v") + b"\xff\xff\xff\xff\xff\x01" + bytes(20), 2,
     "record 1: length: varint longer than 5 bytes"),
    (b"\xff\xff\xff\xff\x7f" + bytes(20), 1, "record 0: length varint overflows 32 bits"),
    (raw_record(0, 1, b"k", 1, b"v") * 2, 2, "offset delta 0 is not between"),
    (raw_record(0, 1, b"k", 1, b"v") + raw_record(9, 1, b"k", 1, b"v"), 2,
     "offset delta 9 is not between"),
    (raw_record(0, 1, b"k", 9, b"v" * 9) + raw_record(1, 1, b"k", 9, b"v" * 9), 3,
     "record_count is 3 but the records end after 2"),
    (raw_record(0, 1, b"k", 1, b"v") + raw_record(1, 1, b"k", 1, b"v"), 1,
     "bytes after the last of record_count 1 records"),
    (raw_record(0, 1, b"k", 1, b"v"), 100, "record_count 100 needs at least 700 bytes"),
    (raw_record(0, 1, b"k", 1, b"v", length=30) + bytes(40), 1, "record 0: its fields end"),
    (raw_record(0, 1, b"k", 1, b"v", length=3), 1, "record 0: length 3 does not fit"),
    (raw_record(0, 1, b"k", 1, b"v", header_count=b"\x02\x02\xff\x01"), 1,
     "record 0: header 0 key is not UTF-8"),
    (raw_record(0, 1, b"k", 1, b"v", header_count=b"\x02\x01\x01"), 1,
     "record 0: header 0 key length -1 is negative"),
    (raw_record(0, 1, b"k", 1, b"v", header_count=b"\x7e" + bytes(4)), 1,
     "record 0: header count 63 does not fit"),
])
def test_corrupt_records_are_refused_naming_the_record_and_field(records, record_count,
                                                                 message):
    with pytest.raises(CorruptBatch, match=message):
        decode_batch(sealed(records, record_count))


def test_a_record_with_no_room_for_its_last_varint_is_cut_short():
    record = raw_record(0, 1, b"k", 1, b"v")
    with pytest.raises(CorruptBatch, match="record 0"):
        decode_batch(sealed(record[:-1], 1))


def test_unknown_codec_is_a_clear_error():
    batch = reseal(small_batch(Compression.NONE), b"whatever", attributes=5)
    with pytest.raises(CorruptBatch, match="unknown codec 5"):
        decode_batch(batch)
    with pytest.raises(ValueError, match="unknown codec 7"):
        compress(7, b"data")
    with pytest.raises(CorruptBatch, match="unknown codec 6"):
        decompress(6, b"data", 100)


def test_stamping_base_offset_and_leader_epoch_keeps_the_crc_valid():
    from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
    batch = bytearray(small_batch(Compression.GZIP))
    stamp(batch, 0, 123_456_789, 42)
    header, records = decode_batch(bytes(batch))
    assert (header.base_offset, header.partition_leader_epoch) == (123_456_789, 42)
    assert [r.offset for r in records] == [123_456_789, 123_456_790, 123_456_791]
    assert KafkaPythonBatch(bytes(batch)).validate_crc()


# Decompression: formats and limits.

@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.ZSTD, Compression.LZ4,
                                   Compression.SNAPPY])
def test_a_decompression_bomb_is_refused_within_bounded_memory(codec):
    inflated_bytes = 64 * 1024 * 1024
    limit_bytes = 1024 * 1024
    bomb = compress(codec, bytes(inflated_bytes))
    assert len(bomb) < inflated_bytes // 20
    batch = reseal(small_batch(Compression.NONE), bomb, attributes=codec)
    tracemalloc.start()
    try:
        with pytest.raises(CorruptBatch, match=f"{codec.name.lower()} payload inflates past "
                                               f"the limit of {limit_bytes} bytes"):
            decode_batch(batch, max_bytes=limit_bytes)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * limit_bytes + 4 * len(bomb)


def test_a_payload_that_just_fits_max_bytes_decodes():
    data = bytes(range(256)) * 1000
    for codec in CODECS:
        assert decompress(codec, compress(codec, data), len(data)) == data
        with pytest.raises(CorruptBatch, match="inflates past"):
            decompress(codec, compress(codec, data), len(data) - 1)


def test_payloads_bigger_than_their_size_guess_still_decode():
    # Highly compressible and with no declared size (gzip's ISIZE hint lies once members are
    # concatenated): decompression must grow its buffer, not fail.
    data = bytes(3_000_000)
    two_members = gzip.compress(data[:10]) + gzip.compress(data)
    assert decompress(Compression.GZIP, two_members, 10_000_000) == data[:10] + data
    streamed = cramjam.zstd.Compressor()
    streamed.compress(data)
    assert decompress(Compression.ZSTD, bytes(streamed.finish()), 10_000_000) == data


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_cramjam_still_says_whole_buffer_when_out_of_room(codec):
    # protocol.compression grows its buffer only on this wording; anything else is corrupt input.
    from epochlog.protocol.compression import _NO_ROOM
    module = getattr(cramjam, codec.name.lower())
    with pytest.raises(Exception, match=_NO_ROOM):
        module.decompress_into(compress(codec, bytes(100_000)), bytearray(1000))


def test_snappy_writes_xerial_framing_and_reads_raw_snappy_too():
    data = os.urandom(1000) * 100  # 100 kB: several 32 KiB xerial blocks
    written = compress(Compression.SNAPPY, data)
    assert written.startswith(XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01")
    assert decompress(Compression.SNAPPY, written, len(data)) == data
    raw = bytes(cramjam.snappy.compress_raw(data))  # librdkafka's way
    assert decompress(Compression.SNAPPY, raw, len(data)) == data
    import aiokafka.codec as aiokafka_codec
    assert aiokafka_codec.snappy_decode(written) == data


@pytest.mark.parametrize("bad", [
    XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00\x10\x00abc",
    XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\xff\xff\xff\xff",
    XERIAL_MAGIC + b"\x00\x00\x00\x01\x00\x00\x00\x01" + b"\x00\x00",
    XERIAL_MAGIC + b"\x00\x00",
    b"\xff\xff\xff\xff\xff\xff\xff",
])
def test_malformed_snappy_is_corrupt_batch(bad):
    with pytest.raises(CorruptBatch, match="snappy"):
        decompress(Compression.SNAPPY, bad, 1 << 20)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.LZ4, Compression.ZSTD])
def test_garbage_for_a_codec_is_corrupt_batch_naming_it(codec):
    with pytest.raises(CorruptBatch, match=codec.name.lower()):
        decompress(codec, b"definitely not compressed data", 1 << 16)
