"""kafka-python 3's protocol classes as an oracle nobody here wrote.

For every API and version both sides declare: bytes we encode decode in kafka-python to the same
values, and bytes kafka-python encodes (from the same values) decode in ours to the same message.
kafka-python builds its classes from Kafka's own JSON message definitions, so agreement here means
our declarations match Kafka's layouts. Control-plane APIs (LeaderAndIsr, StopReplica,
UpdateMetadata, ControlledShutdown, AlterPartition, BrokerRegistration, BrokerHeartbeat) are not
in kafka-python; their layouts are checked by the round-trip and reference tests only.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import Message, layout

from .strategies import message_strategy, project

kafka_protocol = pytest.importorskip("kafka.protocol", reason="kafka-python 3 is the oracle")
from kafka.protocol.api_message import ApiMessage  # noqa: E402

# kafka-python renames a few fields (and reads authorized-operation ints as sets of bits).
RENAMES = {
    ("MetadataResponse", "cluster_authorized_operations"): "authorized_operations",
    ("MetadataResponseTopic", "topic_authorized_operations"): "authorized_operations",
    ("DescribeClusterResponse", "cluster_authorized_operations"): "authorized_operations",
}


# epochlog's own additions, absent from Kafka's schemas (KIP-359's Produce field, tag 359;
# issue 33's replica capacity in BrokerRegistration, tag 33000).
EXTENSIONS = {("PartitionProduceData", "current_leader_epoch"),
              ("BrokerRegistrationRequest", "replica_capacity")}


def _without_extensions(msg: Any) -> Any:
    if not isinstance(msg, Message):
        return msg
    values = {}
    for f in layout(type(msg)):
        v = getattr(msg, f.name)
        if (type(msg).__name__, f.name) in EXTENSIONS:
            v = f.default_value()
        values[f.name] = ([_without_extensions(x) for x in v] if isinstance(v, list)
                          else _without_extensions(v))
    return type(msg)(**values)


def _kafka_python_classes() -> dict[tuple[int, str], Any]:
    for mod in pkgutil.walk_packages(kafka_protocol.__path__, "kafka.protocol."):
        if ".old" not in mod.name and "schemas" not in mod.name:
            importlib.import_module(mod.name)
    found = {}
    stack = list(ApiMessage.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        if getattr(cls, "_class_version", None) is None and getattr(cls, "_json", None):
            found[(cls.API_KEY, cls.type)] = cls
    return found


KP = _kafka_python_classes()
CASES = []
for api in APIS.values():
    for kind in ("request", "response"):
        kp_cls = KP.get((api.key, kind))
        if kp_cls is None:
            continue
        top = min(api.max_version, kp_cls.max_version)
        CASES.append(pytest.param(api, kind, kp_cls, top, id=f"{api.name}-{kind}"))


def test_oracle_covers_the_issue_list() -> None:
    wanted = {"ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "OffsetForLeaderEpoch",
              "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
              "OffsetCommit", "OffsetFetch", "CreateTopics", "DeleteTopics", "InitProducerId"}
    covered = {c.values[0].name for c in CASES}
    assert wanted <= covered, wanted - covered


def _bits_to_int(bits: set[int] | None) -> int:
    if bits is None:
        bits = {31}
    value = sum(1 << b for b in bits)
    return value - (1 << 32) if value >= 1 << 31 else value


def _int_to_bits(value: int) -> set[int] | None:
    bits = {b for b in range(32) if (value & 0xFFFFFFFF) >> b & 1}
    return None if bits == {31} else bits


def _kp_fields(kp_cls: Any) -> dict[str, Any]:
    return kp_cls._struct.fields  # type: ignore[no-any-return]


def to_kafka_python(msg: Message, kp_cls: Any, version: int) -> Any:
    fields = _kp_fields(kp_cls)
    values = {}
    for f in layout(type(msg)):
        if not f.present(version) or (type(msg).__name__, f.name) in EXTENSIONS:
            continue
        name = RENAMES.get((type(msg).__name__, f.name), f.name)
        kpf = fields[name]
        values[name] = _value_to_kp(getattr(msg, f.name), kpf, version)
    return kp_cls(version=version, **values)


def _value_to_kp(value: Any, kpf: Any, version: int) -> Any:
    if kpf.type_str == "bitfield":
        return _int_to_bits(value)
    if value is None:
        return None
    if kpf.is_struct_array():
        return [to_kafka_python(x, kpf.data_class, version) for x in value]
    if kpf.is_struct():
        return to_kafka_python(value, kpf.data_class, version)
    return value


def from_kafka_python(obj: Any, cls: type[Message], version: int) -> Message:
    fields = _kp_fields(type(obj))
    values = {}
    for f in layout(cls):
        if not f.present(version) or (cls.__name__, f.name) in EXTENSIONS:
            continue
        name = RENAMES.get((cls.__name__, f.name), f.name)
        kpf = fields[name]
        value = getattr(obj, name)
        if kpf.type_str == "bitfield":
            value = _bits_to_int(value)
        elif value is not None and kpf.is_struct_array():
            value = [from_kafka_python(x, f.type.item.struct, version) for x in value]
        elif value is not None and kpf.is_struct():
            value = from_kafka_python(value, f.type.struct, version)
        elif isinstance(value, memoryview):
            value = bytes(value)
        values[f.name] = value
    return cls(**values)


SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("api,kind,kp_cls,top", CASES)
@SETTINGS
@given(data=st.data())
def test_both_codecs_agree(api, kind, kp_cls, top, data) -> None:
    version = data.draw(st.integers(api.min_version, top), label="version")
    cls = api.request if kind == "request" else api.response
    msg = _without_extensions(project(data.draw(message_strategy(cls, version), label="message"),
                                      version))
    if api.name == "ApiVersions" and kind == "response" and version > 0:
        # kafka-python reads any ApiVersions answer carrying an error as a v0 body (see
        # test_api_versions_error_answers_use_v0_body); errors are covered there.
        msg = msg.__class__(**{**{f: getattr(msg, f) for f in msg.__struct_fields__},
                               "error_code": 0})
    ours = (api.encode_request(msg, version) if kind == "request"
            else api.encode_response(msg, version))

    # ours -> kafka-python
    theirs_view = kp_cls.decode(ours, version=version)
    assert from_kafka_python(theirs_view, cls, version) == msg

    # kafka-python -> ours
    theirs = to_kafka_python(msg, kp_cls, version).encode(version=version)
    back = (api.decode_request(theirs, version) if kind == "request"
            else api.decode_response(theirs, version))
    assert back == msg
    assert theirs == ours


def test_api_versions_error_answers_use_v0_body() -> None:
    """KIP-511: a broker answers an ApiVersions version it does not know with UNSUPPORTED_VERSION
    and its own ranges in a v0 body; kafka-python reads every erroring answer that way."""
    from epochlog.protocol.apis.api_versions import ApiVersion, ApiVersionsResponse

    api = APIS[ApiKey.API_VERSIONS]
    answer = ApiVersionsResponse(error_code=ErrorCode.UNSUPPORTED_VERSION,
                                 api_keys=[ApiVersion(18, 0, 3), ApiVersion(3, 1, 12)])
    wire = api.encode_response(answer, 0)
    theirs = KP[(18, "response")].decode(wire, version=3)
    assert theirs.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version)
            for k in theirs.api_keys] == [(18, 0, 3), (3, 1, 12)]


def test_kip359_tag_is_skipped_by_a_kafka_codec() -> None:
    """Our Produce v9 carrying CurrentLeaderEpoch as tagged field 359 is read by kafka-python's
    codec (built from Kafka's schema, which has no such field) as the same produce request."""
    from epochlog.protocol.apis.produce import (
        PartitionProduceData,
        ProduceRequest,
        TopicProduceData,
    )

    api = APIS[ApiKey.PRODUCE]
    request = ProduceRequest(acks=-1, timeout_ms=500, topic_data=[TopicProduceData(
        "orders", [PartitionProduceData(index=2, records=b"batch", current_leader_epoch=7)])])
    wire = api.encode_request(request, 9)
    assert api.decode_request(wire, 9).topic_data[0].partition_data[0].current_leader_epoch == 7
    theirs = KP[(0, "request")].decode(wire, version=9)
    partition = theirs.topic_data[0].partition_data[0]
    assert (theirs.acks, partition.index, bytes(partition.records)) == (-1, 2, b"batch")
