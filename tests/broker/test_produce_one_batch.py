"""A Produce request (v3+) carries exactly one record batch for each partition, as Kafka's
ProduceRequest validation requires: two batches for one partition are INVALID_RECORD and nothing
of them is written. A partition refused answers base_offset -1 (Kafka's INVALID_OFFSET), never an
offset a client could take for a written one; its sibling partitions in the same request are
written as if alone."""

from __future__ import annotations

from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.records import build_batch


def test_two_batches_for_one_partition_are_refused_and_not_written(
        epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=1)
    c.create_topic("one", partitions=2, replication_factor=1)
    two = build_batch([(b"k", b"first", None, None)]) + build_batch([(b"k", b"second", None, None)])
    one = build_batch([(b"k", b"alone", None, None)])
    request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[TopicProduceData(
        name="one", partition_data=[PartitionProduceData(index=0, records=two),
                                    PartitionProduceData(index=1, records=one)])])
    broker = c.brokers[c.leader_of("one", 0)]
    answer = broker.call(ApiKey.PRODUCE, request, version=9)
    refused, written = answer.responses[0].partition_responses
    assert refused.error_code == ErrorCode.INVALID_RECORD, refused
    assert refused.base_offset == -1, refused
    assert refused.error_message is not None and "exactly one" in refused.error_message
    assert written.error_code == ErrorCode.NONE and written.base_offset == 0, written

    fetched = broker.call(ApiKey.FETCH, FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=0, topics=[FetchTopic(topic="one", partitions=[
            FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)])]),
        version=12)
    [partition] = fetched.responses[0].partitions
    assert partition.error_code == ErrorCode.NONE and partition.high_watermark == 0, partition


def test_a_partition_without_a_leader_here_answers_base_offset_minus_one(
        epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=1)
    broker = c.brokers[min(c.brokers)]
    request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[TopicProduceData(
        name="nosuch", partition_data=[PartitionProduceData(
            index=0, records=build_batch([(b"k", b"v", None, None)]))])])
    answer = broker.call(ApiKey.PRODUCE, request, version=9)
    [partition] = answer.responses[0].partition_responses
    assert partition.error_code != ErrorCode.NONE and partition.base_offset == -1, partition
