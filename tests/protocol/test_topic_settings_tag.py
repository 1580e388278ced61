"""epochlog's topic settings field on LeaderAndIsr v4 and UpdateMetadata v6+ topic states: tagged
field TOPIC_CONFIGS_TAG, written only when given. Null (absent) and an empty list mean different
things (not said / no decided setting), so both must come back as sent; a reader that does not know
the tag skips it by its size, which the expected bytes below spell out. No oracle declares these
requests (kafka-python has no schema for them), so the bytes are assembled by hand."""

from __future__ import annotations

import struct

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.leader_and_isr import (
    TOPIC_CONFIGS_TAG,
    LeaderAndIsrRequest,
    LeaderAndIsrTopicConfig,
    LeaderAndIsrTopicState,
)
from epochlog.protocol.apis.update_metadata import (
    UpdateMetadataRequest,
    UpdateMetadataTopicConfig,
    UpdateMetadataTopicState,
)
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import ZERO_UUID

LAI, UM = APIS[ApiKey.LEADER_AND_ISR], APIS[ApiKey.UPDATE_METADATA]
HEAD = struct.pack(">iiq", 1, 2, 3)  # controller id, controller epoch, broker epoch
TAG = b"\xe8\x07"  # 1000 as an unsigned varint


def _lai(configs: list[LeaderAndIsrTopicConfig] | None) -> LeaderAndIsrRequest:
    return LeaderAndIsrRequest(controller_id=1, controller_epoch=2, broker_epoch=3, topic_states=[
        LeaderAndIsrTopicState(topic_name="t", configs=configs)])


def test_the_tag_number_stays_what_brokers_read() -> None:
    """Brokers and controllers of other builds must agree on it (and Kafka's own tags count up
    from 0): it never changes."""
    assert TOPIC_CONFIGS_TAG == 1000


def test_leader_and_isr_v4_carries_the_settings_as_a_tagged_field() -> None:
    expected = (HEAD
                + b"\x02"                 # topic_states: compact array of 1
                + b"\x02t"                # topic_name
                + b"\x01"                 # partition_states: compact array of 0
                + b"\x01" + TAG + b"\x14"  # one tagged field: tag 1000, 20 bytes
                + b"\x02"                 # configs: compact array of 1
                + b"\x0dretention.ms" + b"\x051000" + b"\x00"  # name, value, no tags
                + b"\x01"                 # live_brokers: compact array of 0
                + b"\x00")                # the request's tagged fields
    request = _lai([LeaderAndIsrTopicConfig(name="retention.ms", value="1000")])
    assert LAI.encode_request(request, 4) == expected
    assert LAI.decode_request(expected, 4) == request


@pytest.mark.parametrize("configs, tagged", [
    (None, b"\x00"),                       # null: no tagged field at all
    ([], b"\x01" + TAG + b"\x01\x01"),     # no decided setting: an empty compact array
])
def test_null_and_empty_are_told_apart(configs: list[LeaderAndIsrTopicConfig] | None,
                                       tagged: bytes) -> None:
    wire = LAI.encode_request(_lai(configs), 4)
    assert wire == HEAD + b"\x02\x02t\x01" + tagged + b"\x01\x00"
    assert LAI.decode_request(wire, 4).topic_states[0].configs == configs


@pytest.mark.parametrize("version", [6, 7])
def test_update_metadata_round_trips_a_settings_only_topic_state(version: int) -> None:
    request = UpdateMetadataRequest(controller_id=1, controller_epoch=2, broker_epoch=3,
                                    topic_states=[UpdateMetadataTopicState(
                                        topic_name="t", topic_id=ZERO_UUID, configs=[
                                            UpdateMetadataTopicConfig(name="segment.ms",
                                                                      value="60000")])])
    wire = UM.encode_request(request, version)
    assert TAG in wire
    assert UM.decode_request(wire, version) == request
    assert UM.decode_request(UM.encode_request(_um_without(request), version),
                             version).topic_states[0].configs is None


def _um_without(request: UpdateMetadataRequest) -> UpdateMetadataRequest:
    return UpdateMetadataRequest(controller_id=1, controller_epoch=2, broker_epoch=3,
                                 topic_states=[UpdateMetadataTopicState(topic_name="t")])
