"""Values the client library hands to users: partitions named, records acknowledged, records read.

`TopicPartition` is a NamedTuple so it hashes, compares and unpacks like the tuples users already
pass around (kafka-python and aiokafka use the same shape). `RecordMetadata` is what a producer's
send resolves to; it is built once per acknowledged record, so it is a msgspec Struct (the
cheapest immutable object to build here, ~45 ns against ~250 ns for a NamedTuple).
"""

from __future__ import annotations

from typing import NamedTuple

import msgspec


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class RecordMetadata(msgspec.Struct, frozen=True, gc=False):
    """Where an acknowledged record was written.

    offset is -1 when the broker did not say: acks=0, or a retried batch the broker recognised as
    already written (DUPLICATE_SEQUENCE_NUMBER) without giving its offsets. leader_epoch is the
    epoch the produce carried (KIP-359: the leader accepted it, so the batch holds that epoch), -1
    if unknown. timestamp is the record's CreateTime in ms, or the broker's LogAppendTime."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int
    timestamp: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class ConsumerRecord(msgspec.Struct, frozen=True, gc=False):
    """One record a Consumer returned. leader_epoch is the partition leader epoch of the batch it
    came in (KIP-320: what to pass back to seek() with offset + 1, or to commit), -1 if unknown.
    timestamp is in ms; timestamp_type 0 is CreateTime, 1 LogAppendTime. Built once per record
    read, on the consumer's hot path, hence a msgspec Struct."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    leader_epoch: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class FetchedBatch(msgspec.Struct, frozen=True, gc=False):
    """One record batch as Consumer.poll_batches() hands it out: CRC-checked and decompressed,
    its records still packed in Kafka's record format (v2), for readers that decode many records
    at once (a columnar decoder) rather than one object per record.

    records is the batch's records section (what follows the 61-byte header), uncompressed;
    it holds record_count records whose offsets are base_offset + their offset delta. Records
    below first_offset were handed out before (by poll(), or the batch starts before a seek):
    skip them. timestamp_type 0 is CreateTime (base_timestamp + each record's delta), 1
    LogAppendTime (max_timestamp for every record). leader_epoch is the batch's partition leader
    epoch (KIP-320)."""

    topic: str
    partition: int
    base_offset: int
    next_offset: int
    first_offset: int
    leader_epoch: int
    timestamp_type: int
    base_timestamp: int
    max_timestamp: int
    record_count: int
    records: bytes | memoryview

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)
