"""KIP-320 fencing on the read path, on the leader and on a follower, and who may answer at all.

On three real broker processes with a partition replicated on all three (RF 3) and one on a
single broker (RF 1): Fetch (v12), ListOffsets (v7) and OffsetForLeaderEpoch (v4) with a
CurrentLeaderEpoch older than the partition's get FENCED_LEADER_EPOCH (74) and newer get
UNKNOWN_LEADER_EPOCH (75), on the leader and on a follower alike (the seed: a follower answers a
mismatched epoch with these rather than NOT_LEADER); -1 skips the check. Then what a follower
answers with a matching epoch: consumer Fetch v11+ yes (KIP-392), consumer Fetch before v11,
replica Fetch, consumer ListOffsets and OffsetForLeaderEpoch NOT_LEADER_OR_FOLLOWER, ListOffsets
with KIP-392's replica id -2 yes. A broker that holds no replica answers NOT_LEADER_OR_FOLLOWER
whatever the epoch. The partition's leader epoch is first raised above 0 (its leader restarts),
so that "older" is a real epoch.

A unit test checks the same order of checks in `_partitions.serving` on a shim app.
"""

from __future__ import annotations

import pytest

from epochlog.broker.handlers._partitions import serving
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
from epochlog.protocol.error_codes import ErrorCode as E

from .cluster import Cluster
from .test_follower_reads import TOPIC as UNIT_TOPIC
from .test_follower_reads import make_app, state

SHARED, SOLO = "fenced-rf3", "fenced-rf1"
FETCH_V, LIST_V, EPOCH_V = 12, 7, 4


# ------------------------------------------------------------------------------------ unit
def test_serving_checks_hosting_then_role_then_epoch_then_leadership(tmp_path) -> None:
    app = make_app(2)
    assert serving(app, UNIT_TOPIC, 0)[1] == E.NOT_LEADER_OR_FOLLOWER  # known, not hosted
    assert serving(app, "nowhere", 0)[1] == E.UNKNOWN_TOPIC_OR_PARTITION
    part = app.host(tmp_path)
    assert serving(app, UNIT_TOPIC, 0, 5)[1] == E.NOT_LEADER_OR_FOLLOWER  # hosted, no role yet
    part.apply(state(1, 5))  # a follower at epoch 5
    assert serving(app, UNIT_TOPIC, 0, 4)[1] == E.FENCED_LEADER_EPOCH
    assert serving(app, UNIT_TOPIC, 0, 6)[1] == E.UNKNOWN_LEADER_EPOCH
    assert serving(app, UNIT_TOPIC, 0, 5)[1] == E.NOT_LEADER_OR_FOLLOWER
    assert serving(app, UNIT_TOPIC, 0, 5, follower_ok=True) == (part, 0)
    assert serving(app, UNIT_TOPIC, 0, -1, follower_ok=True) == (part, 0)
    part.apply(state(2, 6))
    assert serving(app, UNIT_TOPIC, 0, 6) == (part, 0)
    assert serving(app, UNIT_TOPIC, 0, 5)[1] == E.FENCED_LEADER_EPOCH
    part.resign("generation over")  # neither leader nor follower
    assert serving(app, UNIT_TOPIC, 0, 6)[1] == E.NOT_LEADER_OR_FOLLOWER


# -------------------------------------------------------------------------- real processes
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(tmp_path_factory.mktemp("read-fencing"), brokers=3) as c:
        c.create_topic(SHARED, partitions=1, replication_factor=3)
        c.create_topic(SOLO, partitions=1, replication_factor=1)
        leader_id, _ = c.leaders(SHARED)[0]
        c.restart_broker(leader_id)  # leadership moves (controlled shutdown): a newer epoch
        yield c


def roles(c: Cluster) -> tuple[int, int, list[int]]:
    """(leader, leader epoch, followers) of SHARED-0, once every replica has taken that epoch."""
    (leader_id, epoch), = c.wait_leaders(SHARED, 1).values()
    md = c.metadata(topics=[SHARED])
    replicas = list(md.topics[0].partitions[0].replica_nodes)
    followers = [r for r in replicas if r != leader_id]
    for f in followers:
        c.broker(f).wait_line(rf"{SHARED}-0: became FOLLOWER of {leader_id} at leader epoch "
                              rf"{epoch}\b")
    assert epoch >= 1 and len(followers) == 2
    return leader_id, epoch, followers


def fetch(c: Cluster, broker_id: int, topic: str, current: int, version: int = FETCH_V,
          replica_id: int = -1) -> int:
    answer = c.broker(broker_id).call(ApiKey.FETCH, FetchRequest(
        replica_id=replica_id, max_wait_ms=0, topics=[FetchTopic(topic=topic, partitions=[
            FetchPartition(partition=0, current_leader_epoch=current, fetch_offset=0,
                           partition_max_bytes=1 << 16)])]), version)
    assert answer.error_code == 0
    return answer.responses[0].partitions[0].error_code


def list_offsets(c: Cluster, broker_id: int, topic: str, current: int,
                 replica_id: int = -1) -> int:
    answer = c.broker(broker_id).call(ApiKey.LIST_OFFSETS, ListOffsetsRequest(
        replica_id=replica_id, topics=[ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsPartition(partition_index=0, current_leader_epoch=current,
                                 timestamp=-2)])]), LIST_V)
    return answer.topics[0].partitions[0].error_code


def end_offset(c: Cluster, broker_id: int, topic: str, current: int) -> int:
    answer = c.broker(broker_id).call(ApiKey.OFFSET_FOR_LEADER_EPOCH, OffsetForLeaderEpochRequest(
        replica_id=-1, topics=[OffsetForLeaderTopic(topic=topic, partitions=[
            OffsetForLeaderPartition(partition=0, current_leader_epoch=current,
                                     leader_epoch=0)])]), EPOCH_V)
    return answer.topics[0].partitions[0].error_code


ASKS = {"Fetch": fetch, "ListOffsets": list_offsets, "OffsetForLeaderEpoch": end_offset}


@pytest.mark.parametrize("api", list(ASKS))
def test_leader_fences_older_and_newer_epochs(cluster: Cluster, api: str) -> None:
    leader_id, epoch, _ = roles(cluster)
    ask = ASKS[api]
    assert ask(cluster, leader_id, SHARED, epoch - 1) == E.FENCED_LEADER_EPOCH
    assert ask(cluster, leader_id, SHARED, epoch + 1) == E.UNKNOWN_LEADER_EPOCH
    assert ask(cluster, leader_id, SHARED, epoch) == 0
    assert ask(cluster, leader_id, SHARED, -1) == 0


@pytest.mark.parametrize("api", list(ASKS))
def test_follower_fences_before_it_says_not_leader(cluster: Cluster, api: str) -> None:
    _, epoch, followers = roles(cluster)
    ask = ASKS[api]
    for f in followers:
        assert ask(cluster, f, SHARED, epoch - 1) == E.FENCED_LEADER_EPOCH, f
        assert ask(cluster, f, SHARED, epoch + 1) == E.UNKNOWN_LEADER_EPOCH, f


def test_what_a_follower_answers_with_a_matching_epoch(cluster: Cluster) -> None:
    _, epoch, followers = roles(cluster)
    f = followers[0]
    assert fetch(cluster, f, SHARED, epoch) == 0  # KIP-392: consumers may read here (v11+)
    assert fetch(cluster, f, SHARED, -1) == 0
    assert fetch(cluster, f, SHARED, epoch, version=10) == E.NOT_LEADER_OR_FOLLOWER
    assert fetch(cluster, f, SHARED, epoch, replica_id=followers[1]) == \
        E.NOT_LEADER_OR_FOLLOWER  # replicas fetch from the leader only
    assert list_offsets(cluster, f, SHARED, epoch) == E.NOT_LEADER_OR_FOLLOWER
    assert list_offsets(cluster, f, SHARED, epoch, replica_id=-2) == 0  # KIP-392's sentinel
    assert end_offset(cluster, f, SHARED, epoch) == E.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("api", list(ASKS))
def test_a_broker_without_a_replica_is_not_leader_or_follower(cluster: Cluster,
                                                              api: str) -> None:
    (solo_leader, solo_epoch), = cluster.leaders(SOLO).values()
    other = next(i for i in cluster.brokers if i != solo_leader)
    for current in (-1, solo_epoch, solo_epoch + 1):
        assert ASKS[api](cluster, other, SOLO, current) == E.NOT_LEADER_OR_FOLLOWER, current
