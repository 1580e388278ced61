"""The records of `__consumer_offsets`, in Kafka's formats, so Kafka's tools can read our topic.

Every record has a key and a value, each opening with an int16 version:

    key version 0, 1  OffsetCommitKey     group string, topic string, partition int32
    key version 2     GroupMetadataKey    group string
    (3 and up are Kafka's newer group records: skipped when loading)

    OffsetCommitValue v3 (KIP-320): offset int64, leader_epoch int32, metadata string,
        commit_timestamp int64 (v1 adds expire_timestamp; v4 is flexible)
    GroupMetadataValue v3: protocol_type string, generation int32, protocol string?,
        leader string?, current_state_timestamp int64, members [member_id string,
        group_instance_id string? (v3+, static membership), client_id string, client_host string,
        rebalance_timeout int32 (v1+), session_timeout int32, subscription bytes,
        assignment bytes] (v4 is flexible)

We write offset key 1 / value 3 and group key 2 / value 3 (the versions Kafka writes since 2.1 and
2.3, before its flexible v4), and read values v0-v4. A null value is a tombstone: the offset, or
the whole group, is gone. Keys make compaction (cleanup.policy=compact) keep the latest of each.

The layouts are declared as protocol `Message`s, so protocol.codegen encodes and decodes them as
it does API messages; a record that does not decode is a `BadRecord` naming its offset.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from epochlog.protocol import codegen
from epochlog.protocol.errors import DecodeError
from epochlog.protocol.schema import Message, V, i32, i64

from .state import CommittedOffset, GroupSnapshot, MemberSnapshot

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3
VALUE_VERSION_MAX = 4
FLEXIBLE_FROM = 4
_INT16 = struct.Struct(">h")


class OffsetCommitKey(Message):
    group: str = ""
    topic: str = ""
    partition: i32 = 0


class GroupMetadataKey(Message):
    group: str = ""


class OffsetCommitValue(Message):
    offset: i64 = 0
    leader_epoch: Annotated[i32, V("3+")] = -1
    metadata: str = ""
    commit_timestamp: i64 = 0
    expire_timestamp: Annotated[i64, V("1-1")] = -1


class MemberMetadata(Message):
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("3+", nullable="3+")] = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout: Annotated[i32, V("1+")] = 0
    session_timeout: i32 = 0
    subscription: bytes = b""
    assignment: bytes = b""


class GroupMetadataValue(Message):
    protocol_type: str = ""
    generation: i32 = 0
    protocol: Annotated[str | None, V(nullable="0+")] = None
    leader: Annotated[str | None, V(nullable="0+")] = None
    current_state_timestamp: Annotated[i64, V("2+")] = -1
    members: list[MemberMetadata] = []  # noqa: RUF012 (msgspec copies defaults)


class BadRecord(Exception):
    """A record of the offsets topic that does not decode."""


_encoders: dict[tuple[type[Message], int], Callable[[Any, list[bytes]], None]] = {}
_decoders: dict[tuple[type[Message], int], Callable[[bytes, int], tuple[Any, int]]] = {}


def _encode(version: int, msg: Message, flexible: bool = False) -> bytes:
    key = (type(msg), version)
    fn = _encoders.get(key)
    if fn is None:
        fn = _encoders[key] = codegen.build_encoder(type(msg), version, flexible)
    out = [_INT16.pack(version)]
    fn(msg, out)
    return b"".join(out)


def _decode(cls: type[Message], buf: bytes, pos: int, version: int) -> Any:
    key = (cls, version)
    fn = _decoders.get(key)
    if fn is None:
        fn = _decoders[key] = codegen.build_decoder(cls, version, version >= FLEXIBLE_FROM)
    msg, _ = fn(buf, pos)
    return msg


# ------------------------------------------------------------------------------------ writing
def offset_key(group_id: str, topic: str, partition: int) -> bytes:
    return _encode(OFFSET_KEY_VERSION, OffsetCommitKey(group_id, topic, partition))


def offset_value(committed: CommittedOffset) -> bytes:
    return _encode(OFFSET_VALUE_VERSION, OffsetCommitValue(
        offset=committed.offset, leader_epoch=committed.leader_epoch,
        metadata=committed.metadata, commit_timestamp=committed.commit_timestamp_ms))


def group_key(group_id: str) -> bytes:
    return _encode(GROUP_KEY_VERSION, GroupMetadataKey(group_id))


def group_value(snap: GroupSnapshot, now_wall_ms: int) -> bytes:
    return _encode(GROUP_VALUE_VERSION, GroupMetadataValue(
        protocol_type=snap.protocol_type, generation=snap.generation, protocol=snap.protocol_name,
        leader=snap.leader, current_state_timestamp=now_wall_ms, members=[
            MemberMetadata(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                           m.rebalance_timeout_ms, m.session_timeout_ms, m.subscription,
                           m.assignment) for m in snap.members]))


# ------------------------------------------------------------------------------------ reading
@dataclass(frozen=True)
class OffsetRecord:
    group_id: str
    topic: str
    partition: int
    committed: CommittedOffset | None  # None: a tombstone


@dataclass(frozen=True)
class GroupRecord:
    group_id: str
    snapshot: GroupSnapshot | None  # None: a tombstone


def parse(key: bytes | None, value: bytes | None, offset: int
          ) -> OffsetRecord | GroupRecord | None:
    """One record of the offsets topic; None for a kind we do not use (Kafka's newer ones)."""
    if key is None or len(key) < 2:
        raise BadRecord(f"record at offset {offset}: no key")
    try:
        key_version = _INT16.unpack_from(key)[0]
        if key_version in (0, 1):
            k = _decode(OffsetCommitKey, key, 2, 0)
            return OffsetRecord(k.group, k.topic, k.partition,
                                None if value is None else _offset(value, offset))
        if key_version == GROUP_KEY_VERSION:
            g = _decode(GroupMetadataKey, key, 2, 0)
            return GroupRecord(g.group, None if value is None else _group(g.group, value))
    except (DecodeError, struct.error, IndexError, UnicodeDecodeError) as exc:
        raise BadRecord(f"record at offset {offset}: {exc}") from None
    return None


def _value_version(value: bytes, what: str) -> int:
    version: int = _INT16.unpack_from(value)[0]
    if not 0 <= version <= VALUE_VERSION_MAX:
        raise DecodeError(f"{what} value version {version} is not known", what)
    return version


def _offset(value: bytes, record_offset: int) -> CommittedOffset:
    version = _value_version(value, "OffsetCommitValue")
    v = _decode(OffsetCommitValue, value, 2, version)
    return CommittedOffset(v.offset, v.leader_epoch, v.metadata, v.commit_timestamp,
                           record_offset)


def _group(group_id: str, value: bytes) -> GroupSnapshot:
    version = _value_version(value, "GroupMetadataValue")
    v = _decode(GroupMetadataValue, value, 2, version)
    return GroupSnapshot(group_id, v.protocol_type, v.generation, v.protocol, v.leader,
                         v.current_state_timestamp, tuple(
                             MemberSnapshot(m.member_id, m.group_instance_id, m.client_id,
                                            m.client_host, m.rebalance_timeout or m.session_timeout,
                                            m.session_timeout, m.subscription, m.assignment)
                             for m in v.members))

