"""Where a record goes: keyed records where Kafka's Java client puts them, unkeyed spread out.

Java's default partitioner hashes the key bytes with murmur2 (seed 0x9747b28c) and takes
`(hash & 0x7fffffff) % partitions`, so keyed data written by any Java-compatible client lands in
the same partition as ours. Unkeyed records rotate through the partitions that have a leader.
"""

from __future__ import annotations

import itertools

_M = 0x5BD1E995
_SEED = 0x9747B28C
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of data, as a signed 32-bit int (what Java's Utils.murmur2 returns)."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = length & 3
    if tail == 3:
        h ^= data[whole + 2] << 16
    if tail >= 2:
        h ^= data[whole + 1] << 8
    if tail >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for_key(key: bytes, partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class RoundRobin:
    """Spreads unkeyed records over the partitions given, in turn."""

    def __init__(self) -> None:
        self._counter = itertools.count()

    def next(self, available: list[int]) -> int:
        return available[next(self._counter) % len(available)]
