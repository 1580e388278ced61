"""The consumer embedded protocol codec: round trips in every version, byte equality with
kafka-python's and aiokafka's own codecs (what real peers in a mixed group write and read),
tolerance of newer versions, and ValueError naming the field on malformed bytes."""

from __future__ import annotations

import struct

import pytest
from aiokafka.coordinator.protocol import (
    ConsumerProtocolMemberAssignment,
    ConsumerProtocolMemberMetadata,
)
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer.metadata import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)

from epochlog.client.consumer_protocol import (
    SUBSCRIPTION_VERSION,
    Assignment,
    Subscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from epochlog.client.types import TopicPartition

names = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
partition_numbers = st.integers(-(2**31), 2**31 - 1)
maybe_bytes = st.none() | st.binary(max_size=20)


@st.composite
def grouped_partitions(draw: st.DrawFn) -> list[TopicPartition]:
    """Partitions listed topic by topic (distinct topics), the only shape the wire can carry
    without reordering."""
    topics = draw(st.lists(names, unique=True, max_size=4))
    return [
        TopicPartition(t, p)
        for t in topics
        for p in draw(st.lists(partition_numbers, min_size=1, max_size=4))
    ]


@st.composite
def subscriptions(draw: st.DrawFn) -> Subscription:
    return Subscription(
        topics=draw(st.lists(names, max_size=5)),
        user_data=draw(maybe_bytes),
        owned_partitions=draw(grouped_partitions()),
        generation_id=draw(st.integers(-(2**31), 2**31 - 1)),
        rack_id=draw(st.none() | names),
    )


def _as_of(s: Subscription, version: int) -> Subscription:
    """What survives a write in `version`: later fields fall back to their defaults."""
    return Subscription(
        topics=s.topics,
        user_data=s.user_data,
        owned_partitions=s.owned_partitions if version >= 1 else [],
        generation_id=s.generation_id if version >= 2 else -1,
        rack_id=s.rack_id if version >= 3 else None,
    )


@given(subscriptions(), st.integers(0, SUBSCRIPTION_VERSION))
def test_subscription_round_trips_in_every_version(s: Subscription, version: int) -> None:
    assert decode_subscription(encode_subscription(s, version)) == _as_of(s, version)


@given(grouped_partitions(), maybe_bytes, st.integers(0, 3))
def test_assignment_round_trips(
    partitions: list[TopicPartition], user_data: bytes | None, version: int
) -> None:
    a = Assignment(partitions, user_data)
    assert decode_assignment(encode_assignment(a, version)) == a


def _kafka_python_subscription(s: Subscription, version: int) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in s.owned_partitions:
        by_topic.setdefault(topic, []).append(partition)
    tp = ConsumerProtocolSubscription.TopicPartition
    msg = ConsumerProtocolSubscription(
        version=version,
        topics=s.topics,
        user_data=s.user_data,
        owned_partitions=[tp(topic=t, partitions=ps) for t, ps in by_topic.items()],
        generation_id=s.generation_id,
        rack_id=s.rack_id,
    )
    encoded: bytes = msg.encode()
    return encoded


@given(subscriptions(), st.integers(0, SUBSCRIPTION_VERSION))
def test_subscription_bytes_equal_kafka_pythons(s: Subscription, version: int) -> None:
    ours = encode_subscription(s, version)
    assert ours == _kafka_python_subscription(s, version)
    theirs = ConsumerProtocolSubscription.decode(ours)
    assert list(theirs.topics) == s.topics
    if version >= 2:
        assert theirs.generation_id == s.generation_id


@given(grouped_partitions(), maybe_bytes)
def test_assignment_bytes_equal_kafka_pythons_and_aiokafkas(
    partitions: list[TopicPartition], user_data: bytes | None
) -> None:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    tp = ConsumerProtocolAssignment.TopicPartition
    kp = ConsumerProtocolAssignment(
        version=0,
        assigned_partitions=[tp(topic=t, partitions=ps) for t, ps in by_topic.items()],
        user_data=user_data,
    ).encode()
    aio = ConsumerProtocolMemberAssignment(0, list(by_topic.items()), user_data).encode()
    ours = encode_assignment(Assignment(partitions, user_data))
    assert ours == kp == aio
    # And both peers read what we write as what we meant.
    assert ConsumerProtocolAssignment.decode(ours).partitions() == partitions
    assert ConsumerProtocolMemberAssignment.decode(ours).partitions() == partitions


@given(subscriptions())
def test_aiokafka_reads_our_v3_subscription_prefix(s: Subscription) -> None:
    """aiokafka only knows the v0 layout and reads it whatever the version; our v3 must not
    confuse it."""
    theirs = ConsumerProtocolMemberMetadata.decode(encode_subscription(s))
    assert list(theirs.subscription) == s.topics
    assert theirs.user_data == s.user_data


def test_aiokafka_v0_subscription_decodes() -> None:
    raw = ConsumerProtocolMemberMetadata(0, ["t0", "t1"], b"ud").encode()
    assert decode_subscription(raw) == Subscription(["t0", "t1"], b"ud")
    assert encode_subscription(Subscription(["t0", "t1"], b"ud"), 0) == raw


def test_known_v3_bytes() -> None:
    """A hand-laid v3 subscription, so a symmetric encode/decode mistake cannot pass unnoticed."""
    raw = (
        b"\x00\x03"  # version
        b"\x00\x00\x00\x01\x00\x02t0"  # topics ["t0"]
        b"\xff\xff\xff\xff"  # user_data null
        # owned t0 [0, 3]
        b"\x00\x00\x00\x01\x00\x02t0\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x03"
        b"\x00\x00\x00\x07"  # generation 7
        b"\x00\x02r1"  # rack "r1"
    )
    s = Subscription(["t0"], None, [TopicPartition("t0", 0), TopicPartition("t0", 3)], 7, "r1")
    assert decode_subscription(raw) == s
    assert encode_subscription(s) == raw


def test_newer_versions_are_read_as_v3_and_trailing_bytes_ignored() -> None:
    s = Subscription(["a"], b"x", [TopicPartition("a", 1)], 4, "rack")
    v3 = encode_subscription(s)
    v9 = struct.pack(">h", 9) + v3[2:] + b"\x00\x00\x00\x2a future field"
    assert decode_subscription(v9) == s
    a = encode_assignment(Assignment([TopicPartition("a", 1)]))
    assert decode_assignment(struct.pack(">h", 7) + a[2:] + b"more") == Assignment(
        [TopicPartition("a", 1)]
    )


def test_empty_assignment_bytes_mean_no_partitions() -> None:
    assert decode_assignment(b"") == Assignment([])


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (b"\x00", "version"),
        (b"\xff\xfe\x00\x00\x00\x00", "invalid version"),
        (b"\x00\x00\x00\x00\x00", "topics count"),
        (b"\x00\x00\xff\xff\xff\xfe", "invalid topics count"),
        (b"\x00\x00\x00\x00\x00\x01\x00\x05ab", "topic"),
        (b"\x00\x00\x00\x00\x00\x01\xff\xff", "topic is null"),
        (b"\x00\x00\x00\x00\x00\x01\x00\x01\xff", "not valid UTF-8"),
        (b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x09ab", "user_data"),
        (b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xfe", "invalid user_data length"),
        (b"\x00\x01\x00\x00\x00\x00\xff\xff\xff\xff", "owned_partitions count"),
        (b"\x00\x02\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x00", "generation_id"),
        (
            b"\x00\x03\x00\x00\x00\x00\xff\xff\xff\xff\x00\x00\x00\x00\x00\x00\x00\x01\x00\x03r",
            "rack_id",
        ),
    ],
)
def test_malformed_subscription_names_the_field(data: bytes, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        decode_subscription(data)


@pytest.mark.parametrize(
    ("data", "field"),
    [
        (
            b"\x00\x00\x00\x00\x00\x01\x00\x01a\x00\x00\x00\x02\x00\x00\x00\x00",
            "assigned_partitions partition",
        ),
        (
            b"\x00\x00\x00\x00\x00\x01\x00\x01a\xff\xff\xff\xff",
            "invalid assigned_partitions partitions",
        ),
        (b"\x00\x00\x00\x00\x00\x00", "user_data"),
        (b"\x00", "version"),
    ],
)
def test_malformed_assignment_names_the_field(data: bytes, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        decode_assignment(data)


@given(subscriptions(), st.data())
def test_every_truncation_raises_value_error(s: Subscription, data: st.DataObject) -> None:
    raw = encode_subscription(s)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(ValueError):
        decode_subscription(raw[:cut])


def test_unwritable_versions_and_values_are_refused() -> None:
    with pytest.raises(ValueError, match="version 4"):
        encode_subscription(Subscription(["a"]), 4)
    with pytest.raises(ValueError, match="version -1"):
        encode_assignment(Assignment([]), -1)
    with pytest.raises(ValueError, match="int16 length"):
        encode_subscription(Subscription(["x" * 40000]))
