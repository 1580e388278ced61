"""KIP-951, leader discovery, for Produce (v10): a broker that does not lead a partition answers
NOT_LEADER_OR_FOLLOWER with the leader it knows (id and leader epoch) and that leader's endpoint
on the listener the request came in on, so a client moves without a metadata round trip. v9 has
no such fields: the same request at v9 is answered with the error alone."""

from __future__ import annotations

from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.records import build_batch


def test_a_produce_to_a_follower_names_the_leader_and_its_endpoint(epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=3)
    c.create_topic("found", partitions=1, replication_factor=1)
    leader = c.leader_of("found", 0)
    other = next(b for b in sorted(c.brokers) if b != leader)
    request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[TopicProduceData(
        name="found", partition_data=[PartitionProduceData(
            index=0, records=build_batch([(b"k", b"v", None, None)]))])])

    answer = c.brokers[other].call(ApiKey.PRODUCE, request, version=10)
    [partition] = answer.responses[0].partition_responses
    assert partition.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, partition
    assert partition.current_leader.leader_id == leader, partition
    assert partition.current_leader.leader_epoch >= 0, partition
    [endpoint] = answer.node_endpoints
    host, port = c.brokers[leader].address.rsplit(":", 1)
    assert (endpoint.node_id, endpoint.host, endpoint.port) == (leader, host, int(port)), endpoint

    older = c.brokers[other].call(ApiKey.PRODUCE, request, version=9)
    [partition] = older.responses[0].partition_responses
    assert partition.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert partition.current_leader.leader_id == -1 and older.node_endpoints == []

    written = c.brokers[leader].call(ApiKey.PRODUCE, request, version=10)
    assert written.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert written.node_endpoints == []  # nothing to point at


async def test_our_producer_follows_the_named_leader(epochlog_cluster: Any) -> None:
    """Our Producer takes the leader a v10 answer names: its metadata still says the old leader
    (restarted since, a follower now), the retry goes to the new one at once."""
    from epochlog.client import Producer

    c = epochlog_cluster(brokers=3)
    c.create_topic("moved", partitions=1, replication_factor=3)
    c.wait_fully_replicated("moved")
    old = c.leader_of("moved", 0)
    others = ",".join(c.brokers[b].address for b in sorted(c.brokers) if b != old)
    async with Producer(others, acks="all") as producer:
        await (await producer.send("moved", b"before", partition=0))
        c.restart(old)  # controlled shutdown: the leadership moves, and it comes back a follower
        c.wait_fully_replicated("moved")
        assert c.leader_of("moved", 0) != old
        meta = await (await producer.send("moved", b"after", partition=0))
        assert meta.offset == 1
        assert producer.metrics()["leaders_learned_total"] >= 1, producer.metrics()
