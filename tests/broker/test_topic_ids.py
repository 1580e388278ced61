"""Topic ids: the id the controller gives a topic at creation is the one every broker answers in
Metadata v10+ (UpdateMetadata v7 carries it; docs/control-plane.md), v12 finds a topic by id
alone, and a topic deleted and created again under the same name answers its new id. Checked on
real processes, and through confluent-kafka's AdminClient (software nobody here wrote)."""

from __future__ import annotations

import uuid

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.delete_topics import DeleteTopicsRequest, DeleteTopicState
from epochlog.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.schema import ZERO_UUID

from .cluster import WAIT_S, Cluster

E = ErrorCode


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(tmp_path_factory.mktemp("topic_ids"), brokers=2) as c:
        yield c


def _ids_seen(cluster: Cluster, broker_id: int, topic: str) -> uuid.UUID:
    answer = cluster.broker(broker_id).call(ApiKey.METADATA, MetadataRequest(
        topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False), 12)
    (t,) = answer.topics
    assert t.error_code == 0, t
    return t.topic_id


def test_every_broker_answers_the_controllers_topic_id(cluster: Cluster) -> None:
    created = cluster.create_topic("ids", partitions=2, replication_factor=1)
    assert created.topic_id != ZERO_UUID
    for broker_id in cluster.brokers:
        assert _ids_seen(cluster, broker_id, "ids") == created.topic_id
    # v10 answers the id too, and so does an all-topics request
    v10 = cluster.broker(1).call(ApiKey.METADATA, MetadataRequest(topics=None), 10)
    assert {t.name: t.topic_id for t in v10.topics}["ids"] == created.topic_id


def test_metadata_v12_finds_a_topic_by_id_alone(cluster: Cluster) -> None:
    created = cluster.create_topic("by-id", partitions=1, replication_factor=1)
    stranger = uuid.UUID(int=created.topic_id.int ^ 1)
    answer = cluster.broker(2).call(ApiKey.METADATA, MetadataRequest(
        topics=[MetadataRequestTopic(topic_id=created.topic_id, name=None),
                MetadataRequestTopic(topic_id=stranger, name=None)],
        allow_auto_topic_creation=False), 12)
    found = {t.topic_id: t for t in answer.topics}
    assert found[created.topic_id].name == "by-id"
    assert found[created.topic_id].error_code == 0
    assert [p.partition_index for p in found[created.topic_id].partitions] == [0]
    assert found[stranger].error_code == E.UNKNOWN_TOPIC_ID and found[stranger].name is None


def test_a_recreated_topic_answers_its_new_id(cluster: Cluster) -> None:
    first = cluster.create_topic("again", partitions=1, replication_factor=1)
    deleted = cluster.broker(1).call(ApiKey.DELETE_TOPICS, DeleteTopicsRequest(  # v6: by id
        topics=[DeleteTopicState(name=None, topic_id=first.topic_id)],
        timeout_ms=int(WAIT_S * 1000)), 6)
    assert [(r.name, r.error_code) for r in deleted.responses] == [("again", 0)], deleted
    cluster._poll(lambda: not cluster.metadata(1, ["again"]).topics[0].partitions
                  and not cluster.metadata(2, ["again"]).topics[0].partitions,
                  "topic 'again' to be gone")
    second = cluster.create_topic("again", partitions=1, replication_factor=1)
    assert second.topic_id not in (first.topic_id, ZERO_UUID)
    for broker_id in cluster.brokers:
        assert _ids_seen(cluster, broker_id, "again") == second.topic_id


def test_confluent_admin_describes_the_topic_id(cluster: Cluster) -> None:
    admin_module = pytest.importorskip("confluent_kafka.admin")
    created = cluster.create_topic("described", partitions=1, replication_factor=1)
    admin = admin_module.AdminClient({"bootstrap.servers": cluster.bootstrap})
    from confluent_kafka import TopicCollection
    futures = admin.describe_topics(TopicCollection(["described"]),
                                    request_timeout=WAIT_S)
    description = futures["described"].result(WAIT_S)
    their = description.topic_id  # confluent_kafka.Uuid: two signed 64-bit halves
    high, low = their.get_most_significant_bits(), their.get_least_significant_bits()
    assert uuid.UUID(int=((high % 2**64) << 64) | (low % 2**64)) == created.topic_id
