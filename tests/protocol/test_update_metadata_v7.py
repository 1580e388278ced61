"""UpdateMetadata v7 carries each topic's id where Kafka's schema puts it (right after the topic
name), and v5-6 do not carry it at all. No oracle here declares UpdateMetadata (kafka-python has no
schema for it), so the expected bytes are assembled by hand from Kafka's UpdateMetadataRequest.json.
The generic round trip (test_codec_roundtrip.py) covers every field of every version besides."""

from __future__ import annotations

import struct
import uuid

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.update_metadata import (
    UpdateMetadataPartitionState,
    UpdateMetadataRequest,
    UpdateMetadataTopicState,
)
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import ZERO_UUID

API = APIS[ApiKey.UPDATE_METADATA]
TOPIC_ID = uuid.UUID("6f1c8a52-0d7e-4f6e-9a41-3b2c1d0e9f8a")


def _request() -> UpdateMetadataRequest:
    return UpdateMetadataRequest(controller_id=1, controller_epoch=2, broker_epoch=3, topic_states=[
        UpdateMetadataTopicState(topic_name="t", topic_id=TOPIC_ID, partition_states=[])])


def test_v7_puts_the_topic_id_after_the_topic_name() -> None:
    expected = (struct.pack(">iiq", 1, 2, 3)
                + b"\x02"                 # topic_states: compact array of 1
                + b"\x02t"                # topic_name: compact string "t"
                + TOPIC_ID.bytes          # topic_id (v7+)
                + b"\x01"                 # partition_states: compact array of 0
                + b"\x00"                 # the topic state's tagged fields
                + b"\x01"                 # live_brokers: compact array of 0
                + b"\x00")                # the request's tagged fields
    assert API.encode_request(_request(), 7) == expected
    assert API.decode_request(expected, 7).topic_states[0].topic_id == TOPIC_ID


def test_v6_has_no_topic_id() -> None:
    wire = API.encode_request(_request(), 6)
    assert TOPIC_ID.bytes not in wire
    assert API.decode_request(wire, 6).topic_states[0].topic_id == ZERO_UUID


def test_v7_round_trips_partition_states_with_the_id() -> None:
    request = _request()
    request.topic_states[0].partition_states = [UpdateMetadataPartitionState(
        partition_index=0, controller_epoch=2, leader=1, leader_epoch=4, isr=[1, 2],
        partition_epoch=5, replicas=[1, 2, 3], offline_replicas=[3])]
    assert API.decode_request(API.encode_request(request, 7), 7) == request
