"""Deleting groups and committed offsets (DeleteGroups 42, OffsetDelete 47) on a real 3-broker
cluster, through two admin clients nobody here wrote (confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient):

- an Empty group with committed offsets is listed, described and deleted; the deletion is in the
  log (tombstones), so the group stays gone when its coordinator is SIGKILLed and another broker
  loads the offsets partition;
- a group with a live member is refused (NON_EMPTY_GROUP), an unknown one GROUP_ID_NOT_FOUND;
- OffsetDelete removes an Empty group's offsets per partition, and while a member subscribes to
  a topic answers GROUP_SUBSCRIBED_TO_TOPIC for it but deletes the offsets of other topics.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from epochlog.testing import Cluster

confluent = pytest.importorskip("confluent_kafka")
kafka_admin = pytest.importorskip("kafka.admin")
kafka_errors = pytest.importorskip("kafka.errors")
from confluent_kafka import TopicPartition as CTopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from kafka import TopicPartition as KTP  # noqa: E402

SETTINGS = {"offsets.topic.num.partitions": 3, "group.initial.rebalance.delay.ms": 0,
            "group.min.session.timeout.ms": 1000}
WAIT_S = 60.0
RECORDS = 30


def until(what: str, done: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = done()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def fill(c: Cluster, topic: str) -> None:
    producer = confluent.Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all"})
    for i in range(RECORDS):
        producer.produce(topic, key=b"%d" % i, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0


def consumer(c: Cluster, group: str, topics: list[str]) -> Any:
    cons = confluent.Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": group,
                               "auto.offset.reset": "earliest", "enable.auto.commit": False,
                               "session.timeout.ms": 6000})
    cons.subscribe(topics)
    return cons


def consume_and_commit(c: Cluster, group: str, topics: list[str], count: int) -> None:
    """A member reads count records, commits synchronously, and leaves (the group is Empty)."""
    cons = consumer(c, group, topics)
    try:
        seen = 0
        deadline = time.monotonic() + WAIT_S
        while seen < count:
            assert time.monotonic() < deadline, f"{group} read {seen} of {count}"
            msg = cons.poll(0.5)
            if msg is not None and not msg.error():
                seen += 1
        cons.commit(asynchronous=False)
    finally:
        cons.close()


def assigned(cons: Any) -> bool:
    cons.poll(0.5)  # joins, and keeps the member alive
    return bool(cons.assignment())


def committed(admin: AdminClient, group: str, tps: list[tuple[str, int]]
              ) -> dict[tuple[str, int], int]:
    request = confluent.ConsumerGroupTopicPartitions(
        group, [CTopicPartition(t, p) for t, p in tps])
    result = admin.list_consumer_group_offsets([request])[group].result(30)
    return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}


def groups_listed(admin: AdminClient) -> dict[str, str]:
    listing = admin.list_consumer_groups().result(30)
    return {g.group_id: g.state.name for g in listing.valid}


def test_empty_groups_are_deleted_for_good_and_live_ones_refused(epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=3, settings=SETTINGS)
    c.create_topic("gone", partitions=2, replication_factor=3)
    fill(c, "gone")
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    consume_and_commit(c, "old", ["gone"], RECORDS)
    consume_and_commit(c, "kept", ["gone"], RECORDS)
    tps = [("gone", 0), ("gone", 1)]
    assert sum(committed(admin, "old", tps).values()) == RECORDS
    assert until("both groups listed Empty",
                 lambda: {"old", "kept"} <= {g for g, s in groups_listed(admin).items()
                                             if s == "EMPTY"})

    live = consumer(c, "live", ["gone"])
    try:
        until("the live member to get partitions", lambda: assigned(live))
        futures = admin.delete_consumer_groups(["old", "live", "never-was"])
        futures["old"].result(30)
        for group, code in (("live", "NON_EMPTY_GROUP"), ("never-was", "GROUP_ID_NOT_FOUND")):
            with pytest.raises(confluent.KafkaException) as refused:
                futures[group].result(30)
            assert refused.value.args[0].name() == code, (group, refused.value)
    finally:
        live.close()

    assert "old" not in groups_listed(admin)
    assert committed(admin, "old", tps) == {("gone", 0): -1001, ("gone", 1): -1001}

    # The deletion was replicated as tombstones: a new coordinator loads the group as gone.
    coordinator = c.coordinator_of("old")
    c.kill(coordinator)
    until("a new coordinator for the group", lambda: c.coordinator_of("old") != coordinator)
    assert until("offsets readable again", lambda: _committed_or_none(admin, "kept", tps)) \
        == {("gone", 0): RECORDS // 2, ("gone", 1): RECORDS // 2}
    assert committed(admin, "old", tps) == {("gone", 0): -1001, ("gone", 1): -1001}
    c.restart(coordinator)  # ListGroups asks every broker: all must be up
    assert until("the groups listed again", lambda: "kept" in _listed_or_none(admin))
    assert "old" not in groups_listed(admin)


def _listed_or_none(admin: AdminClient) -> dict[str, str]:
    try:
        return groups_listed(admin)
    except (confluent.KafkaException, TimeoutError):
        return {}


def _committed_or_none(admin: AdminClient, group: str, tps: list[tuple[str, int]]
                       ) -> dict[tuple[str, int], int] | None:
    try:
        return committed(admin, group, tps)
    except confluent.KafkaException:
        return None  # the coordinator is moving


def test_offset_delete_spares_subscribed_topics(epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=3, settings=SETTINGS)
    for topic in ("sub", "other"):
        c.create_topic(topic, partitions=2, replication_factor=3)
        fill(c, topic)
    consume_and_commit(c, "g", ["sub", "other"], 2 * RECORDS)
    admin = kafka_admin.KafkaAdminClient(bootstrap_servers=c.bootstrap_servers,
                                         request_timeout_ms=30_000)
    try:
        assert kp_offsets(admin, "g") == {
            (t, p): RECORDS // 2 for t in ("sub", "other") for p in (0, 1)}

        member = consumer(c, "g", ["sub"])  # the group is no longer Empty: it reads "sub"
        try:
            until("the member to get partitions", lambda: assigned(member))
            result = admin.delete_group_offsets(
                "g", [KTP("sub", 0), KTP("other", 0)])
            errors = {(tp.topic, tp.partition): e for tp, e in _flatten(result)}
            assert errors == {("sub", 0): "GroupSubscribedToTopicError", ("other", 0): None}
        finally:
            member.close()

        until("the group to be Empty again", lambda: {
            g["group_id"]: g["group_state"] for g in admin.list_groups()}.get("g") == "Empty")
        result = admin.delete_group_offsets("g", [KTP("sub", 1)])
        assert all(e is None for _, e in _flatten(result)), result
        left = set(kp_offsets(admin, "g"))
        assert left == {("sub", 0), ("other", 1)}
        with pytest.raises(kafka_errors.GroupIdNotFoundError):
            admin.delete_group_offsets("nobody", [KTP("sub", 0)])
    finally:
        admin.close()


def kp_offsets(admin: Any, group: str) -> dict[tuple[str, int], int]:
    answer = admin.list_group_offsets({group: None})
    offsets = answer.get(group, answer)
    return {(tp.topic, tp.partition): m.offset for tp, m in offsets.items()}


def _flatten(result: Any) -> list[tuple[Any, str | None]]:
    """kafka-python's delete_group_offsets answers partition -> error class (NoError for
    success): as (partition, the error's name or None)."""
    items = result.items() if hasattr(result, "items") else result
    named = []
    for tp, err in items:
        name = err.__name__ if isinstance(err, type) else type(err).__name__
        named.append((tp, None if err is None or name == "NoError" else name))
    return named


@pytest.mark.parametrize("metadata, topics", [
    (b"\x00\x01" b"\x00\x00\x00\x02" b"\x00\x01a" b"\x00\x02bc" b"\xff\xff\xff\xff", {"a", "bc"}),
    (memoryview(b"\x00\x00" b"\x00\x00\x00\x01" b"\x00\x03xyz"), {"xyz"}),
    (b"\x00\x00" b"\x00\x00\x00\x02" b"\x00\x01a", set()),  # one topic missing
    (b"\x00\x00" b"\x00\x00\x00\x01" b"\xff\xfe", set()),  # a negative length
    (b"\x00\x00" b"\x7f\xff\xff\xff", set()),  # a count far beyond the bytes
    (b"\x00", set()),
])
def test_a_subscription_the_broker_cannot_read_protects_nothing(metadata: bytes,
                                                                 topics: set[str]) -> None:
    from epochlog.broker.groups.state import consumer_subscription_topics
    assert consumer_subscription_topics(metadata) == topics
