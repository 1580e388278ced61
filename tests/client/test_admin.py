"""The admin client against a three-broker epochlog cluster of real processes.

Each call is checked against what the cluster really holds: a topic created with settings is
described with those settings and a leader (with its epoch) per partition; offsets listed match
what was produced; a preferred election after a leader moved brings leadership back; deleted
topics are gone. Errors come back as the client's exception classes, naming what was wrong.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator

import pytest

from epochlog.client import Producer, TopicPartition
from epochlog.client.admin import Admin, ConfigResource, NewTopic
from epochlog.client.errors import (
    InvalidPartitionsError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from tests.broker.cluster import Cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("admin"), brokers=3) as c:
        yield c


async def test_create_describe_and_delete_topics(cluster: Cluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([
            NewTopic("orders", num_partitions=3, replication_factor=2,
                     topic_configs={"retention.ms": "60000"}),
            NewTopic("placed", replica_assignments={0: [2, 3], 1: [3, 1]})])
        topics = await admin.describe_topics(["orders", "placed"])
        orders = topics["orders"].partitions
        assert [p.partition for p in orders] == [0, 1, 2]
        for p in orders:
            assert len(p.replicas) == 2 and p.leader in p.replicas and p.leader_epoch >= 0
            assert sorted(p.isr) == sorted(p.replicas)
        assert [p.replicas for p in topics["placed"].partitions] == [[2, 3], [3, 1]]
        assert [p.leader for p in topics["placed"].partitions] == [2, 3]
        # What the brokers themselves say, epoch for epoch.
        assert {p.partition: (p.leader, p.leader_epoch) for p in orders} == \
            cluster.leaders("orders")

        configs = await admin.describe_configs([ConfigResource("topic", "orders")])
        assert configs[ConfigResource("topic", "orders")]["retention.ms"].value == "60000"

        with pytest.raises(TopicAlreadyExistsError, match="orders"):
            await admin.create_topics([NewTopic("orders", 1, 1)])
        errors = await admin.create_topics([NewTopic("orders", 1, 1)], raise_errors=False)
        assert isinstance(errors["orders"], TopicAlreadyExistsError)

        await admin.create_partitions({"orders": 5})
        assert len((await admin.describe_topics(["orders"]))["orders"].partitions) == 5
        with pytest.raises(InvalidPartitionsError):
            await admin.create_partitions({"orders": 2})

        await admin.delete_topics(["placed"])
        assert "placed" not in await admin.list_topics()
        with pytest.raises(UnknownTopicOrPartitionError):
            await admin.describe_topics(["placed"])


async def test_describe_cluster(cluster: Cluster) -> None:
    async with Admin(cluster.bootstrap) as admin:
        described = await admin.describe_cluster()
    assert [(b.node_id, b.port, b.rack) for b in described.brokers] == [
        (i, b.port, b.rack) for i, b in sorted(cluster.brokers.items())]
    assert described.controller_id is not None


async def test_list_offsets_earliest_latest_and_by_time(cluster: Cluster) -> None:
    topic = "offsets"
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, 1, 2)])
        async with Producer(cluster.bootstrap) as producer:
            for i in range(10):
                await producer.send(topic, value=b"x", timestamp_ms=1_000_000 + i * 10)
            await producer.flush()
        tp = TopicPartition(topic, 0)
        epoch = cluster.leaders(topic)[0][1]
        assert (await admin.list_offsets({tp: "earliest"}))[tp][::2] == (0, epoch)
        assert (await admin.list_offsets({tp: "latest"}))[tp][::2] == (10, epoch)
        by_time = (await admin.list_offsets({tp: 1_000_045}))[tp]
        assert (by_time.offset, by_time.timestamp) == (5, 1_000_050)
        assert (await admin.list_offsets({tp: 9_000_000}))[tp].offset == -1


async def test_preferred_election_brings_leadership_back(cluster: Cluster) -> None:
    topic = "elect"
    async with Admin(cluster.bootstrap) as admin:
        await admin.create_topics([NewTopic(topic, replica_assignments={0: [1, 2]})])
        tp = TopicPartition(topic, 0)
        assert (await admin.elect_leaders("preferred", [tp])) == {tp: None}  # not needed: fine
        # controlled shutdown moves leadership to 2
        await asyncio.to_thread(cluster.restart_broker, 1, signal.SIGTERM)
        moved = (await admin.describe_topics([topic]))[topic].partitions[0]
        assert moved.leader == 2
        cluster._poll(lambda: sorted(cluster.metadata(topics=[topic]).topics[0]
                                     .partitions[0].isr_nodes) == [1, 2], "broker 1 back in ISR")
        assert (await admin.elect_leaders("preferred", [tp])) == {tp: None}
        cluster._poll(lambda: cluster.leaders(topic)[0][0] == 1, "leadership back on broker 1")
        back = (await admin.describe_topics([topic]))[topic].partitions[0]
        assert back.leader == 1 and back.leader_epoch > moved.leader_epoch
