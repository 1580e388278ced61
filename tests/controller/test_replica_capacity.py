"""Admission (issue 33): each broker registers how many replicas it can host within its
open-files limit, and a CreateTopics or CreatePartitions whose placement would put more on one
is refused with POLICY_VIOLATION naming the broker and the numbers; validate_only answers the
same, a refused request changes nothing, and the capacity survives a replay of the log."""

from __future__ import annotations

import random
import uuid

from epochlog.controller.records import Listener
from epochlog.controller.state import ControllerState
from epochlog.protocol.error_codes import ErrorCode as E

from .test_state import config, replay_of


def _cluster(capacity: int) -> tuple[ControllerState, list]:
    s = ControllerState(config(), random.Random(7))
    s.start(now_ms=0)
    records = []
    for broker_id in (1, 2, 3):
        error, _ = s.register_broker(broker_id, uuid.uuid4(), "abc"[broker_id - 1],
                                     [Listener("PLAINTEXT", "127.0.0.1", 9000 + broker_id)], 0,
                                     replica_capacity=capacity)
        assert error == 0
    records += s.take_ready().records
    return s, records


def test_a_placement_past_a_brokers_capacity_is_refused_naming_it() -> None:
    s, _ = _cluster(capacity=10)
    assert s.create_topic("fits", 8, 3, None, {}).error == 0  # 8 replicas on each broker
    for validate_only in (True, False):
        r = s.create_topic("big", 3, 3, None, {}, validate_only=validate_only)
        assert r.error == E.POLICY_VIOLATION
        assert r.message is not None
        assert "broker 1 can host 10 replicas" in r.message
        assert "holds 8; this would add 3 (11 in all)" in r.message
    assert "big" not in s.topics
    assert s.create_topic("small", 2, 3, None, {}).error == 0  # exactly 10 each


def test_create_partitions_is_held_to_the_same_capacity() -> None:
    s, _ = _cluster(capacity=6)
    assert s.create_topic("t", 5, 3, None, {}).error == 0
    for validate_only in (True, False):
        error, message = s.create_partitions("t", 7, None, validate_only=validate_only)
        assert error == E.POLICY_VIOLATION and message is not None
        assert "holds 5; this would add 2 (7 in all)" in message
    assert len(s.topics["t"].partitions) == 5
    assert s.create_partitions("t", 6, None) == (0, None)


def test_a_broker_without_a_capacity_is_not_bounded_and_the_capacity_is_durable() -> None:
    s, records = _cluster(capacity=-1)
    assert s.create_topic("t", 500, 3, None, {}).error == 0
    bounded, records = _cluster(capacity=4)
    assert {b.replica_capacity for b in replay_of(bounded, records).brokers.values()} == {4}


def test_the_capacity_travels_as_a_tagged_field_real_brokers_need_not_send() -> None:
    """Tag 33000 in every version: decoded where sent, -1 where absent (a Kafka broker's
    registration), and the rest of the request unchanged by it."""
    from epochlog.protocol.api_keys import ApiKey
    from epochlog.protocol.apis.broker_registration import BrokerRegistrationRequest
    from epochlog.protocol.registry import api_for

    api = api_for(ApiKey.BROKER_REGISTRATION)
    for version in range(api.min_version, api.max_version + 1):
        sent = BrokerRegistrationRequest(broker_id=4, cluster_id="c", replica_capacity=15_776)
        assert api.decode_request(api.encode_request(sent, version), version) == sent
        plain = BrokerRegistrationRequest(broker_id=4, cluster_id="c")
        wire = api.encode_request(plain, version)
        assert api.decode_request(wire, version).replica_capacity == -1
        assert len(api.encode_request(sent, version)) > len(wire)  # only the tag added
