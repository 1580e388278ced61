"""Kafka's "consumer" embedded protocol: the bytes inside JoinGroup metadata and SyncGroup
assignments.

Theory of operation
-------------------
The group coordinator treats a member's protocol metadata and its assignment as opaque bytes; only
consumers read them. Every Kafka consumer (Java, librdkafka, kafka-python, aiokafka) agrees on two
little non-flexible structures (no tagged fields, int16 string lengths, int32 array counts):

    ConsumerProtocolSubscription (JoinGroup metadata)
      v0: version int16, topics [string], user_data nullable bytes
      v1: + owned_partitions [topic string, partitions [int32]]
      v2: + generation_id int32
      v3: + rack_id nullable string

    ConsumerProtocolAssignment (SyncGroup assignment), the same layout in every version 0..3:
      version int16, assigned_partitions [topic string, partitions [int32]],
      user_data nullable bytes

New versions only ever append fields, and Kafka's rule for a reader meeting a version newer than it
knows is to read the fields it knows and ignore the rest; we do the same. Malformed bytes raise
ValueError naming the field that broke, because they come from another member and the caller must
be able to tell a bad peer from a bug.

This is a hand-written codec rather than a `protocol.schema` declaration because these are not
request/response bodies (no API key, no header) and the decode rule differs: versions above the
highest we know are read, not refused, and trailing bytes are ignored.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass, field

from epochlog.client.types import TopicPartition

SUBSCRIPTION_VERSION = 3
"""The subscription version we write. Every consumer we interoperate with reads it: Java and
librdkafka read v3 natively, kafka-python 3.x reads min(version, 3), and aiokafka and older
kafka-python read the v0 prefix (topics, user_data) and ignore the rest."""

ASSIGNMENT_VERSION = 0
"""The assignment version we write. The layout is identical in v0..v3 (versions 1..3 were bumped
only to track the subscription), so v0 loses nothing, and it is what librdkafka itself writes and
the one version every decoder accepts: aiokafka and old kafka-python only know the v0 schema (they
read it whatever the version says), and a reader that refused unknown versions would still take
v0."""

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")

# Counts beyond these are not a real group's data; they stop a corrupt count from making us build a
# huge list before noticing the bytes ran out (each element needs at least 2 or 4 bytes anyway).
_ARRAY_LEN_MAX = 1 << 24


@dataclass
class Subscription:
    """What one member asks for in JoinGroup. `group_instance_id` is not on the wire: the leader
    fills it from the JoinGroup member list so that the range assignor can order static members."""

    topics: list[str]
    user_data: bytes | None = None
    owned_partitions: list[TopicPartition] = field(default_factory=list)  # v1+
    generation_id: int = -1  # v2+
    rack_id: str | None = None  # v3+
    group_instance_id: str | None = None


@dataclass
class Assignment:
    """What the leader gives one member in SyncGroup."""

    partitions: list[TopicPartition]
    user_data: bytes | None = None


# --- writing --------------------------------------------------------------------------------------


def _string(out: bytearray, value: str, what: str) -> None:
    raw = value.encode("utf-8")
    if len(raw) > 0x7FFF:
        raise ValueError(f"{what} is {len(raw)} bytes, more than an int16 length allows")
    out += _INT16.pack(len(raw))
    out += raw


def _nullable_string(out: bytearray, value: str | None, what: str) -> None:
    if value is None:
        out += _INT16.pack(-1)
    else:
        _string(out, value, what)


def _nullable_bytes(out: bytearray, value: bytes | None) -> None:
    if value is None:
        out += _INT32.pack(-1)
    else:
        out += _INT32.pack(len(value))
        out += value


def _topic_partitions(out: bytearray, partitions: Iterable[TopicPartition], what: str) -> None:
    """Group partitions by topic, in first-seen topic order and given partition order (Java keeps
    insertion order too); readers must not depend on the order."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out += _INT32.pack(len(by_topic))
    for topic, numbers in by_topic.items():
        _string(out, topic, f"{what} topic")
        out += _INT32.pack(len(numbers))
        for number in numbers:
            out += _INT32.pack(number)


def encode_subscription(s: Subscription, version: int = SUBSCRIPTION_VERSION) -> bytes:
    """The JoinGroup protocol metadata for `s`, in `version` (0..3). Fields the version lacks are
    dropped, as Kafka's generated code does for ignorable fields."""
    if not 0 <= version <= SUBSCRIPTION_VERSION:
        raise ValueError(
            f"cannot write consumer subscription version {version}; we write "
            f"0..{SUBSCRIPTION_VERSION}"
        )
    out = bytearray(_INT16.pack(version))
    out += _INT32.pack(len(s.topics))
    for topic in s.topics:
        _string(out, topic, "subscription topic")
    _nullable_bytes(out, s.user_data)
    if version >= 1:
        _topic_partitions(out, s.owned_partitions, "owned partition")
    if version >= 2:
        out += _INT32.pack(s.generation_id)
    if version >= 3:
        _nullable_string(out, s.rack_id, "rack id")
    return bytes(out)


def encode_assignment(a: Assignment, version: int = ASSIGNMENT_VERSION) -> bytes:
    """The SyncGroup assignment bytes for `a` (every version 0..3 has the same layout)."""
    if not 0 <= version <= 3:
        raise ValueError(
            f"cannot write consumer assignment version {version}; the known versions are 0..3"
        )
    out = bytearray(_INT16.pack(version))
    _topic_partitions(out, a.partitions, "assigned partition")
    _nullable_bytes(out, a.user_data)
    return bytes(out)


# --- reading --------------------------------------------------------------------------------------


class _Reader:
    """Bounds-checked cursor over one blob; every read names the field it is for."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._what = what

    def _take(self, size: int, field_name: str) -> memoryview:
        end = self._pos + size
        if end > len(self._data):
            raise ValueError(
                f"{self._what}: truncated at {field_name} (needs {size} bytes at offset "
                f"{self._pos}, {len(self._data) - self._pos} left)"
            )
        chunk = self._data[self._pos : end]
        self._pos = end
        return chunk

    def int16(self, field_name: str) -> int:
        value: int = _INT16.unpack(self._take(2, field_name))[0]
        return value

    def int32(self, field_name: str) -> int:
        value: int = _INT32.unpack(self._take(4, field_name))[0]
        return value

    def count(self, field_name: str) -> int:
        n = self.int32(f"{field_name} count")
        if n < 0 or n > _ARRAY_LEN_MAX:
            # Kafka allows a null (-1) array only where declared nullable; none is here.
            raise ValueError(f"{self._what}: invalid {field_name} count {n}")
        return n

    def nullable_string(self, field_name: str) -> str | None:
        n = self.int16(f"{field_name} length")
        if n == -1:
            return None
        if n < 0:
            raise ValueError(f"{self._what}: invalid {field_name} length {n}")
        raw = self._take(n, field_name)
        try:
            return str(raw, "utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{self._what}: {field_name} is not valid UTF-8") from exc

    def string(self, field_name: str) -> str:
        value = self.nullable_string(field_name)
        if value is None:
            raise ValueError(f"{self._what}: {field_name} is null")
        return value

    def nullable_bytes(self, field_name: str) -> bytes | None:
        n = self.int32(f"{field_name} length")
        if n == -1:
            return None
        if n < 0:
            raise ValueError(f"{self._what}: invalid {field_name} length {n}")
        return bytes(self._take(n, field_name))

    def topic_partitions(self, field_name: str) -> list[TopicPartition]:
        result: list[TopicPartition] = []
        for _ in range(self.count(field_name)):
            topic = self.string(f"{field_name} topic")
            for _ in range(self.count(f"{field_name} partitions of {topic!r}")):
                result.append(
                    TopicPartition(topic, self.int32(f"{field_name} partition of {topic!r}"))
                )
        return result


def _version(reader: _Reader, what: str) -> int:
    version = reader.int16("version")
    if version < 0:
        raise ValueError(f"{what}: invalid version {version}")
    return version


def decode_subscription(data: bytes) -> Subscription:
    """Read JoinGroup protocol metadata of any version; fields beyond v3 and trailing bytes are
    ignored, as Kafka's readers do for newer versions."""
    reader = _Reader(data, "consumer subscription")
    version = _version(reader, "consumer subscription")
    topics = [reader.string("topic") for _ in range(reader.count("topics"))]
    s = Subscription(topics=topics, user_data=reader.nullable_bytes("user_data"))
    if version >= 1:
        s.owned_partitions = reader.topic_partitions("owned_partitions")
    if version >= 2:
        s.generation_id = reader.int32("generation_id")
    if version >= 3:
        s.rack_id = reader.nullable_string("rack_id")
    return s


def decode_assignment(data: bytes) -> Assignment:
    """Read SyncGroup assignment bytes of any version. Empty bytes mean no assignment: the
    coordinator sends them to a member the leader left out of its SyncGroup."""
    if not data:
        return Assignment([])
    reader = _Reader(data, "consumer assignment")
    _version(reader, "consumer assignment")
    partitions = reader.topic_partitions("assigned_partitions")
    return Assignment(partitions=partitions, user_data=reader.nullable_bytes("user_data"))
