"""Produce answers name the records that made a batch refused (KIP-467, Produce v8+), as Kafka's
LogValidator does: a record without a key in a compacted topic is INVALID_RECORD, with one
record_errors entry per such record (its index in the batch and "Compacted topic cannot accept
message without key ...") and the partition's error_message.

librdkafka's test 0011 (`test_message_single_partition_record_fail`) is the yardstick, run here
through confluent-kafka against a real broker: with the records in one batch, the ten without a
key fail with INVALID_RECORD and the ninety others with _INVALID_DIFFERENT_RECORD; one record per
batch, the ninety are delivered. Without record_errors the client cannot tell them apart and
fails all hundred with INVALID_RECORD.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.records import build_batch

confluent = pytest.importorskip("confluent_kafka")

RECORDS = 100
WAIT_S = 60


def produce_with_keyless(bootstrap: str, topic: str, *, one_per_batch: bool) -> dict[int, int]:
    """librdkafka 0011's records: every tenth without a key. Delivery results counted by error
    code (0: delivered)."""
    results: dict[int, int] = {}

    def report(err: Any, _msg: Any) -> None:
        code = 0 if err is None else err.code()
        results[code] = results.get(code, 0) + 1

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "linger.ms": 500,
                              "enable.idempotence": False, "retries": 0}
    if one_per_batch:
        config["batch.size"] = 1
    producer = confluent.Producer(config)
    for i in range(RECORDS):
        value = b"record %d" % i
        if i % 10 == 0:
            producer.produce(topic, value=value, partition=0, on_delivery=report)
        else:
            producer.produce(topic, key=value, value=value, partition=0, on_delivery=report)
    assert producer.flush(WAIT_S) == 0
    return results


def test_a_client_can_tell_which_records_a_compacted_topic_refused(
        epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=1)
    c.create_topic("kept", partitions=1, replication_factor=1,
                   configs={"cleanup.policy": "compact"})
    invalid = confluent.KafkaError.INVALID_RECORD
    different = confluent.KafkaError._INVALID_DIFFERENT_RECORD
    assert produce_with_keyless(c.bootstrap_servers, "kept", one_per_batch=False) == {
        invalid: 10, different: 90}
    assert produce_with_keyless(c.bootstrap_servers, "kept", one_per_batch=True) == {
        invalid: 10, 0: 90}


def test_the_answer_names_each_record_without_a_key(epochlog_cluster: Any) -> None:
    """The answer itself, on the wire: v8 carries record_errors and the partition's message,
    v7 (no such fields) still the error code; nothing of the batch is written."""
    c = epochlog_cluster(brokers=1)
    c.create_topic("kept", partitions=1, replication_factor=1,
                   configs={"cleanup.policy": "compact"})
    now_ms = int(time.time() * 1000)
    records = [(None if i in (1, 3, 4) else b"k%d" % i, b"v", None, now_ms) for i in range(6)]
    request = ProduceRequest(acks=1, timeout_ms=30_000, topic_data=[TopicProduceData(
        name="kept", partition_data=[PartitionProduceData(index=0,
                                                          records=build_batch(records))])])
    broker = c.brokers[c.leader_of("kept", 0)]
    answer = broker.call(ApiKey.PRODUCE, request, version=8)
    [partition] = answer.responses[0].partition_responses
    assert partition.error_code == ErrorCode.INVALID_RECORD
    assert [e.batch_index for e in partition.record_errors] == [1, 3, 4]
    assert all(e.batch_index_error_message.startswith(
        "Compacted topic cannot accept message without key in topic partition kept-0")
        for e in partition.record_errors), partition.record_errors
    assert partition.error_message is not None and "3 records" in partition.error_message
    older = broker.call(ApiKey.PRODUCE, request, version=7)
    assert older.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_RECORD
    keyed = [(b"k", b"v", None, now_ms)]
    request.topic_data[0].partition_data[0].records = build_batch(keyed)
    written = broker.call(ApiKey.PRODUCE, request, version=8)
    assert written.responses[0].partition_responses[0].base_offset == 0  # nothing before it
