"""Codec throughput: epochlog's generated codec against kafka-python's, in the same run.

    python bench/protocol_codec.py [--seconds 0.5]

Rows (each encoded and decoded, messages/s and MB/s, ratio = ours / kafka-python):
  - a Produce v9 request carrying one 1 MiB batch of 1 KiB records;
  - a Fetch v12 response of 50 partitions, each with a 1 KiB batch;
  - a Metadata v12 response of 100 partitions (3 replicas each);
  - building a RecordBatch of 1,000 records of 100 B (records/s).
Goal (issue 2): ratio >= 1 on every row, and record-batch building >= 300k records/s.
Figures vary from run to run on a shared 2-core machine; compare the ratios.
"""

from __future__ import annotations

import argparse
import time
import uuid
from collections.abc import Callable
from typing import Any

from kafka.protocol.consumer import FetchResponse as KpFetchResponse
from kafka.protocol.metadata import MetadataResponse as KpMetadataResponse
from kafka.protocol.producer import ProduceRequest as KpProduceRequest
from kafka.record.default_records import DefaultRecordBatchBuilder

from epochlog.protocol.api import Api
from epochlog.protocol.apis.fetch import FetchableTopicResponse, FetchResponse, PartitionData
from epochlog.protocol.apis.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.registry import BY_NAME


def rate(fn: Callable[[], Any], seconds: float) -> float:
    """Calls per second of fn, measured over about `seconds`."""
    fn()
    n, start = 0, time.perf_counter()
    batch = 1
    while True:
        for _ in range(batch):
            fn()
        n += batch
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return n / elapsed
        batch = min(batch * 2, 10_000)


def kafka_python_batch(count: int, value_bytes: int) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 30)
    value = b"v" * value_bytes
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=None, value=value, headers=[])
    return bytes(builder.build())


def produce_case() -> tuple[Any, Any, int]:
    batch = kafka_python_batch(1024, 1000)  # ~1 MiB of 1 KiB records
    ours = ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[
        TopicProduceData("bench", [PartitionProduceData(index=0, records=batch)])])
    theirs = KpProduceRequest(version=9, transactional_id=None, acks=-1, timeout_ms=30000,
                              topic_data=[KpProduceRequest.TopicProduceData(
                                  version=9, name="bench", partition_data=[
                                      KpProduceRequest.TopicProduceData.PartitionProduceData(
                                          version=9, index=0, records=batch)])])
    return ours, theirs, 9


def fetch_case() -> tuple[Any, Any, int]:
    batch = kafka_python_batch(10, 100)
    parts = [PartitionData(partition_index=i, high_watermark=1000, last_stable_offset=1000,
                           log_start_offset=0, records=batch) for i in range(50)]
    ours = FetchResponse(responses=[FetchableTopicResponse("bench", parts)])
    T = KpFetchResponse.FetchableTopicResponse
    theirs = KpFetchResponse(version=12, throttle_time_ms=0, error_code=0, session_id=0,
                             responses=[T(version=12, topic="bench", partitions=[
                                 T.PartitionData(version=12, partition_index=i, error_code=0,
                                                 high_watermark=1000, last_stable_offset=1000,
                                                 log_start_offset=0, aborted_transactions=[],
                                                 preferred_read_replica=-1, records=batch)
                                 for i in range(50)])])
    return ours, theirs, 12


def metadata_case() -> tuple[Any, Any, int]:
    topic_id = uuid.uuid4()
    brokers = [MetadataResponseBroker(i, f"broker{i}.local", 9092 + i, "abc"[i]) for i in range(3)]
    parts = [MetadataResponsePartition(0, i, i % 3, 7, [0, 1, 2], [0, 1, 2], [])
             for i in range(100)]
    ours = MetadataResponse(brokers=brokers, cluster_id="bench-cluster", controller_id=0,
                            topics=[MetadataResponseTopic(0, "bench", topic_id, False, parts)])
    B, T = KpMetadataResponse.MetadataResponseBroker, KpMetadataResponse.MetadataResponseTopic
    P = T.MetadataResponsePartition
    theirs = KpMetadataResponse(
        version=12, throttle_time_ms=0, cluster_id="bench-cluster", controller_id=0,
        brokers=[B(version=12, node_id=i, host=f"broker{i}.local", port=9092 + i, rack="abc"[i])
                 for i in range(3)],
        topics=[T(version=12, error_code=0, name="bench", topic_id=topic_id, is_internal=False,
                  partitions=[P(version=12, error_code=0, partition_index=i, leader_id=i % 3,
                                leader_epoch=7, replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2],
                                offline_replicas=[]) for i in range(100)],
                  authorized_operations=None)])
    return ours, theirs, 12


def codec_rows(seconds: float) -> list[tuple[str, float, float, int]]:
    rows = []
    for label, api_name, case, is_request in (
            ("Produce v9, one 1 MiB batch", "Produce", produce_case, True),
            ("Fetch v12, 50 partitions", "Fetch", fetch_case, False),
            ("Metadata v12, 100 partitions", "Metadata", metadata_case, False)):
        ours, theirs, version = case()
        rows += case_rows(label, BY_NAME[api_name], ours, theirs, version, is_request, seconds)
    return rows


def case_rows(label: str, api: Api, ours: Any, theirs: Any, version: int, is_request: bool,
              seconds: float) -> list[tuple[str, float, float, int]]:
    """One case's encode and decode rows (a function of its own so that the timed lambdas bind
    this case's values, not the variables of codec_rows' loop)."""
    kp_cls = type(theirs)
    if is_request:
        wire = api.encode_request(ours, version)
        enc = lambda: api.encode_request(ours, version)  # noqa: E731
        dec = lambda: api.decode_request(wire, version)  # noqa: E731
    else:
        wire = api.encode_response(ours, version)
        enc = lambda: api.encode_response(ours, version)  # noqa: E731
        dec = lambda: api.decode_response(wire, version)  # noqa: E731
    their_wire = theirs.encode(version=version)
    assert their_wire == wire, f"{label}: the two codecs disagree on the bytes"
    return [(f"{label}: encode", rate(enc, seconds),
             rate(lambda: theirs.encode(version=version), seconds), len(wire)),
            (f"{label}: decode", rate(dec, seconds),
             rate(lambda: kp_cls.decode(their_wire, version=version), seconds), len(wire))]


def batch_row(seconds: float) -> tuple[str, float, float, int] | None:
    try:
        from epochlog.protocol.records import build_batch
    except ImportError:
        return None
    value = b"v" * 100
    records = [(None, value, [], 1_700_000_000_000 + i) for i in range(1000)]
    ours = rate(lambda: build_batch(records), seconds) * 1000
    theirs = rate(lambda: kafka_python_batch(1000, 100), seconds) * 1000
    return ("RecordBatch build, 1,000 x 100 B (records/s)", ours, theirs, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    args = parser.parse_args()
    print(f"{'case':<48} {'epochlog/s':>12} {'MB/s':>8} {'kafka-py/s':>12} {'MB/s':>8} "
          f"{'ratio':>6}")
    for label, ours, theirs, size in codec_rows(args.seconds):
        print(f"{label:<48} {ours:>12,.0f} {ours * size / 1e6:>8.1f} {theirs:>12,.0f} "
              f"{theirs * size / 1e6:>8.1f} {ours / theirs:>6.2f}")
    row = batch_row(args.seconds)
    if row is None:
        print("RecordBatch build: protocol.records not available")
    else:
        label, ours, theirs, _ = row
        print(f"{label:<48} {ours:>12,.0f} {'':>8} {theirs:>12,.0f} {'':>8} {ours / theirs:>6.2f}")


if __name__ == "__main__":
    main()
