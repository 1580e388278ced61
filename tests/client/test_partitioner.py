"""Keyed records land where Java's default partitioner (and kafka-python's) puts them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from epochlog.client.partitioner import murmur2, partition_for_key

# Values from Kafka's own tests of Utils.murmur2.
KNOWN = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
         b"a-little-bit-longer-string": -1486304829,
         b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}


def test_known_hashes() -> None:
    assert {k: murmur2(k) for k in KNOWN} == KNOWN


@given(st.binary(max_size=64), st.integers(1, 1000))
def test_agrees_with_kafka_python(key: bytes, partitions: int) -> None:
    from kafka.partitioner.default import murmur2 as theirs

    assert murmur2(key) & 0x7FFFFFFF == theirs(key) & 0x7FFFFFFF
    assert partition_for_key(key, partitions) == (theirs(key) & 0x7FFFFFFF) % partitions
