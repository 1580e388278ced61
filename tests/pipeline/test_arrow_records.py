"""Record batches decoded straight into Arrow columns equal what the strict record decoder
(protocol.records) reads from the same bytes, field by field: random keys, values and headers
(nulls included), uniform runs and varied sizes, compressed batches, LogAppendTime, records
skipped before first_offset and cut at the range's end; and malformed records are an error
naming the partition, never a guess."""

from __future__ import annotations

import random

import pytest

from epochlog.client.types import FetchedBatch
from epochlog.pipeline.arrow_records import CorruptRecordsError, decode
from epochlog.pipeline.schema import arrow_schema
from epochlog.protocol.batch import BATCH_HEADER_BYTES, read_header
from epochlog.protocol.compression import decompress
from epochlog.protocol.records import Compression, build_batch, decode_batch

Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int, int]


def fetched(raw: bytes, first: int | None = None) -> FetchedBatch:
    """What Consumer.poll_batches() makes of a batch: its records section, decompressed."""
    h = read_header(raw, 0)
    section = memoryview(raw)[BATCH_HEADER_BYTES:h.size]
    records = decompress(h.compression, section) if h.compression else section
    return FetchedBatch("orders", 2, h.base_offset, h.next_offset,
                        h.base_offset if first is None else first, h.partition_leader_epoch,
                        h.timestamp_type, h.base_timestamp, h.max_timestamp, h.record_count,
                        records)


def strict(raw: bytes) -> list[Row]:
    h, records = decode_batch(raw, 0)
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers), h.partition_leader_epoch,
             h.timestamp_type) for r in records]


def rows(decoded_batch: object) -> list[Row]:
    t = decoded_batch.to_pydict()  # type: ignore[attr-defined]
    headers = t.get("headers") or [[] for _ in t["offset"]]
    return [(o, int(ts.timestamp() * 1000), k, v, [(h["key"], h["value"]) for h in hs], e, tt)
            for o, ts, k, v, hs, e, tt in zip(t["offset"], t["timestamp"], t["key"], t["value"],
                                               headers, t["leaderEpoch"], t["timestampType"],
                                               strict=True)]


def random_batches(seed: int, uniform: bool) -> list[bytes]:
    rng = random.Random(seed)
    out, offset = [], 0
    for b in range(12):
        records = []
        for i in range(rng.choice([1, 2, 7, 64, 65, 300])):
            if uniform:
                records.append((b"k%04d" % i, b"v" * 100, [], 1_700_000_000_000 + i))
                continue
            key = None if rng.random() < 0.1 else rng.randbytes(rng.randint(0, 40))
            value = None if rng.random() < 0.05 else rng.randbytes(rng.choice([0, 5, 200, 900]))
            headers = [(f"h{j}é", None if rng.random() < 0.2 else rng.randbytes(j))
                       for j in range(rng.choice([0, 0, 1, 3]))]
            records.append((key, value, headers, 1_700_000_000_000 + rng.randint(-10**4, 10**7)))
        out.append(build_batch(records, base_offset=offset, partition_leader_epoch=b // 4,
                               compression=rng.choice(list(Compression)),
                               timestamp_type=1 if rng.random() < 0.2 else 0))
        offset += len(records) + rng.choice([0, 0, 3])  # a gap: compaction, control records
    return out


@pytest.mark.parametrize("uniform", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_columns_equal_the_strict_decoder(seed: int, uniform: bool) -> None:
    raws = random_batches(seed, uniform)
    expected = [r for raw in raws for r in strict(raw)]
    for include_headers in (True, False):
        decoded = decode([fetched(raw) for raw in raws], 10**9, include_headers)
        assert decoded.batch.schema.equals(arrow_schema(include_headers))
        got = rows(decoded.batch)
        want = expected if include_headers else [(*r[:4], [], *r[5:]) for r in expected]
        assert got == want
        last = read_header(raws[-1], 0)
        assert (decoded.next_offset, decoded.next_epoch) == (last.next_offset,
                                                              last.partition_leader_epoch)


def test_first_offset_and_end_offset_cut_the_run() -> None:
    raws = random_batches(7, uniform=False)
    expected = [r for raw in raws for r in strict(raw)]
    first, end = expected[3][0], expected[-5][0]
    batches = [fetched(raws[0], first)] + [fetched(raw) for raw in raws[1:]]
    decoded = decode(batches, end, True)
    assert rows(decoded.batch) == [r for r in expected if first <= r[0] < end]
    assert decoded.next_offset == end and decoded.rows == len(rows(decoded.batch))
    # nothing left in range: the position moves to the end all the same
    empty = decode([fetched(raws[-1])], read_header(raws[-1], 0).base_offset, False)
    assert empty.rows == 0 and empty.next_offset == read_header(raws[-1], 0).base_offset


def test_malformed_records_are_an_error_naming_the_partition() -> None:
    raw = bytearray(build_batch([(b"k", b"v" * 10, [], 1), (b"k", b"v" * 10, [], 2)]))
    good = fetched(bytes(raw))
    broken = bytearray(good.records)
    broken[4] = 0x7E  # the first record's key length: 63, far past the record
    with pytest.raises(CorruptRecordsError, match="orders-2: the records of the batches at "
                                                  "offsets 0..1 do not parse"):
        decode([FetchedBatch(*[getattr(good, f) for f in good.__struct_fields__[:-1]],
                             bytes(broken))], 10, False)
    short = bytes(good.records)[:-3]
    with pytest.raises(CorruptRecordsError):
        decode([FetchedBatch(*[getattr(good, f) for f in good.__struct_fields__[:-1]], short)],
               10, False)
