"""KIP-320 / KIP-359 fencing on a running broker: a client's CurrentLeaderEpoch older than the
leader's is FENCED_LEADER_EPOCH (74), newer is UNKNOWN_LEADER_EPOCH (75), -1 is served; the same
rule for Fetch (v9+), ListOffsets (v4+), OffsetForLeaderEpoch (v2+) and Produce (v9, epochlog's
tagged field 359). The partition's leader epoch is first raised above 0 by restarting its broker
(a returning leader gets a new epoch), so that "older" is a real epoch, not -1.
"""

from __future__ import annotations

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from epochlog.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from epochlog.protocol.apis.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import build_batch

from .cluster import Cluster

TOPIC = "fenced"


@pytest.fixture(scope="module")
def leader(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(tmp_path_factory.mktemp("fencing"), brokers=1) as cluster:
        cluster.create_topic(TOPIC, partitions=1, replication_factor=1)
        b = cluster.broker(1)
        b.call(ApiKey.PRODUCE, ProduceRequest(acks=1, timeout_ms=5000, topic_data=[TopicProduceData(
            name=TOPIC, partition_data=[PartitionProduceData(
                index=0, records=build_batch([(None, b"x", None, None)]))])]), 9)
        cluster.restart_broker(1)
        _, epoch = cluster.wait_leaders(TOPIC, 1)[0]
        assert epoch >= 1
        yield b, epoch


def cases(epoch: int) -> list[tuple[int, int]]:
    return [(epoch - 1, E.FENCED_LEADER_EPOCH), (epoch + 1, E.UNKNOWN_LEADER_EPOCH),
            (-1, 0), (epoch, 0)]


def test_fetch(leader) -> None:
    b, epoch = leader
    for current, expected in cases(epoch):
        answer = b.call(ApiKey.FETCH, FetchRequest(
            max_wait_ms=0, topics=[FetchTopic(topic=TOPIC, partitions=[
                FetchPartition(partition=0, current_leader_epoch=current, fetch_offset=0,
                               partition_max_bytes=1 << 20)])]), 12)
        part = answer.responses[0].partitions[0]
        assert part.error_code == expected, current
        assert bool(part.records) == (expected == 0)


def test_list_offsets(leader) -> None:
    b, epoch = leader
    for current, expected in cases(epoch):
        answer = b.call(ApiKey.LIST_OFFSETS, ListOffsetsRequest(
            replica_id=-1, topics=[ListOffsetsTopic(name=TOPIC, partitions=[ListOffsetsPartition(
                partition_index=0, current_leader_epoch=current, timestamp=-1)])]), 7)
        part = answer.topics[0].partitions[0]
        assert part.error_code == expected, current
        if expected == 0:
            assert (part.offset, part.leader_epoch) == (1, epoch)


def test_offset_for_leader_epoch(leader) -> None:
    b, epoch = leader
    for current, expected in cases(epoch):
        answer = b.call(ApiKey.OFFSET_FOR_LEADER_EPOCH, OffsetForLeaderEpochRequest(
            replica_id=-1, topics=[OffsetForLeaderTopic(topic=TOPIC, partitions=[
                OffsetForLeaderPartition(partition=0, current_leader_epoch=current,
                                         leader_epoch=0)])]), 4)
        part = answer.topics[0].partitions[0]
        assert part.error_code == expected, current
        if expected == 0:  # epoch 0 held offset 0 and ended where the next epoch began: 1
            assert (part.leader_epoch, part.end_offset) == (0, 1)


def test_produce_v9_current_leader_epoch(leader) -> None:
    b, epoch = leader
    for current, expected in cases(epoch):
        answer = b.call(ApiKey.PRODUCE, ProduceRequest(
            acks=1, timeout_ms=5000, topic_data=[TopicProduceData(
                name=TOPIC, partition_data=[PartitionProduceData(
                    index=0, current_leader_epoch=current,
                    records=build_batch([(None, b"y", None, None)]))])]), 9)
        assert answer.responses[0].partition_responses[0].error_code == expected, current


def test_fetch_with_a_diverging_last_fetched_epoch(leader) -> None:
    """v12: a fetcher whose last fetched epoch (1, never an epoch here) is past its end in our
    epoch cache (epoch 0 ended at offset 1) gets diverging_epoch (0, 1) and no records."""
    b, epoch = leader
    answer = b.call(ApiKey.FETCH, FetchRequest(replica_id=-1, max_wait_ms=0, topics=[FetchTopic(
        topic=TOPIC, partitions=[FetchPartition(partition=0, fetch_offset=1, last_fetched_epoch=1,
                                                partition_max_bytes=1 << 20)])]), 12)
    part = answer.responses[0].partitions[0]
    assert part.error_code == 0 and not part.records
    assert (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (0, 1)
