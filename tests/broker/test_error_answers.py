"""Error answers for request hooks (broker/error_answers.py): for every API the broker serves, at
every version it serves, the answer encodes as a valid answer of that version, every error code
it carries is the one injected, and it has one entry for each entry the request named."""

from __future__ import annotations

import uuid
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog.broker.error_answers import SHAPES, Entries, _walk, error_answer
from epochlog.broker.handlers import load_all
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis import (
    delete_topics,
    find_coordinator,
    leader_and_isr,
    metadata,
    offset_fetch,
    produce,
    stop_replica,
)
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import layout
from tests.protocol.strategies import message_strategy

E = ErrorCode.NOT_LEADER_OR_FOLLOWER
SERVED = load_all()


def error_codes(message: Any, version: int) -> list[int]:
    """Every error_code the message carries at version, however deep."""
    found: list[int] = []
    for f in layout(type(message)):
        if not f.present(version):
            continue
        value = getattr(message, f.name)
        if f.name == "error_code":
            found.append(value)
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, msgspec.Struct):
                found += error_codes(item, version)
    return found


def round_trip(key: ApiKey, request: Any, version: int) -> Any:
    api = APIS[key]
    answer = error_answer(api, version, request, E)
    return api.decode_response(api.encode_response(answer, version), version)


def test_every_served_api_has_a_shape() -> None:
    assert set(SERVED) <= set(SHAPES), [APIS[k].name for k in set(SERVED) - set(SHAPES)]


def requests_at_versions() -> st.SearchStrategy[tuple[ApiKey, int, Any]]:
    pairs = [(ApiKey(k), v) for k, r in sorted(SERVED.items())
             for v in range(r.min_version, r.max_version + 1)]

    def request_for(pair: tuple[ApiKey, int]) -> st.SearchStrategy[tuple[ApiKey, int, Any]]:
        key, version = pair
        return message_strategy(APIS[key].request, version).map(lambda m: (key, version, m))

    return st.sampled_from(pairs).flatmap(request_for)


def named(entries: Entries, chain: tuple[Any, ...]) -> int:
    return sum(1 for _ in _walk(chain, entries.path))


@settings(max_examples=600, deadline=None)
@given(requests_at_versions())
def test_error_answers_are_valid_and_carry_the_error_everywhere(case: tuple[ApiKey, int, Any]
                                                                  ) -> None:
    key, version, request = case
    if key == ApiKey.PRODUCE and request.acks == 0:
        assert error_answer(APIS[key], version, request, E) is None
        return
    decoded = round_trip(key, request, version)
    codes = error_codes(decoded, version)
    assert set(codes) <= {E}
    fields = {f.name: f for f in layout(APIS[key].response)}
    if "error_code" in fields and fields["error_code"].present(version):
        assert decoded.error_code == E
    for entries in SHAPES[key].lists:
        if not fields[entries.answer].present(version):
            continue
        same_list = [e for e in SHAPES[key].lists if e.answer == entries.answer]
        expected = sum(named(e, (request,)) for e in same_list)
        assert len(getattr(decoded, entries.answer)) == expected, (entries.answer, version)


def test_produce_names_each_topic_and_partition() -> None:
    request = produce.ProduceRequest(acks=-1, topic_data=[
        produce.TopicProduceData(name="a", partition_data=[
            produce.PartitionProduceData(index=0), produce.PartitionProduceData(index=2)]),
        produce.TopicProduceData(name="b", partition_data=[
            produce.PartitionProduceData(index=1)])])
    answer = round_trip(ApiKey.PRODUCE, request, 9)
    assert [(t.name, [(p.index, p.error_code, p.base_offset) for p in t.partition_responses])
            for t in answer.responses] == [("a", [(0, E, -1), (2, E, -1)]), ("b", [(1, E, -1)])]
    assert answer.responses[0].partition_responses[0].error_message is not None


def test_metadata_names_topics_by_name_and_id_and_all_topics_gets_none() -> None:
    tid = uuid.uuid4()
    request = metadata.MetadataRequest(topics=[metadata.MetadataRequestTopic(name="a"),
                                               metadata.MetadataRequestTopic(topic_id=tid,
                                                                             name=None)])
    answer = round_trip(ApiKey.METADATA, request, 12)
    assert [(t.name, t.topic_id, t.error_code) for t in answer.topics] == [
        ("a", uuid.UUID(int=0), E), (None, tid, E)]
    assert round_trip(ApiKey.METADATA, metadata.MetadataRequest(topics=None), 12).topics == []


def test_flattened_partition_errors_of_control_requests() -> None:
    lai = leader_and_isr.LeaderAndIsrRequest(topic_states=[
        leader_and_isr.LeaderAndIsrTopicState(topic_name="t", partition_states=[
            leader_and_isr.LeaderAndIsrPartitionState(partition_index=i) for i in (0, 1)])])
    answer = round_trip(ApiKey.LEADER_AND_ISR, lai, 4)
    assert [(e.topic_name, e.partition_index, e.error_code) for e in answer.partition_errors] \
        == [("t", 0, E), ("t", 1, E)] and answer.error_code == E
    v1 = stop_replica.StopReplicaRequest(topics=[stop_replica.StopReplicaTopicV1(
        name="t", partition_indexes=[3, 4])])
    v3 = stop_replica.StopReplicaRequest(topic_states=[stop_replica.StopReplicaTopicState(
        topic_name="u", partition_states=[stop_replica.StopReplicaPartitionState(
            partition_index=5)])])
    assert [(e.topic_name, e.partition_index) for e in
            round_trip(ApiKey.STOP_REPLICA, v1, 1).partition_errors] == [("t", 3), ("t", 4)]
    assert [(e.topic_name, e.partition_index) for e in
            round_trip(ApiKey.STOP_REPLICA, v3, 3).partition_errors] == [("u", 5)]


@pytest.mark.parametrize("version", [1, 6])
def test_delete_topics_by_name_or_by_id(version: int) -> None:
    tid = uuid.uuid4()
    request = delete_topics.DeleteTopicsRequest(
        topic_names=["a"] if version < 6 else [],
        topics=[delete_topics.DeleteTopicState(name="a", topic_id=tid)] if version >= 6 else [])
    answer = round_trip(ApiKey.DELETE_TOPICS, request, version)
    assert [(r.name, r.error_code) for r in answer.responses] == [("a", E)]


def test_find_coordinator_batched_and_single() -> None:
    batched = round_trip(ApiKey.FIND_COORDINATOR, find_coordinator.FindCoordinatorRequest(
        coordinator_keys=["g1", "g2"]), 4)
    assert [(c.key, c.node_id, c.error_code) for c in batched.coordinators] == [
        ("g1", -1, E), ("g2", -1, E)]
    single = round_trip(ApiKey.FIND_COORDINATOR,
                        find_coordinator.FindCoordinatorRequest(key="g1"), 3)
    assert (single.error_code, single.node_id) == (E, -1)


def test_offset_fetch_of_all_partitions_gets_the_top_level_error() -> None:
    answer = round_trip(ApiKey.OFFSET_FETCH, offset_fetch.OffsetFetchRequest(
        group_id="g", topics=None), 7)
    assert (answer.error_code, answer.topics) == (E, [])
    named_one = round_trip(ApiKey.OFFSET_FETCH, offset_fetch.OffsetFetchRequest(
        group_id="g", topics=[offset_fetch.OffsetFetchRequestTopic(name="t",
                                                                   partition_indexes=[2])]), 7)
    p = named_one.topics[0].partitions[0]
    assert (p.partition_index, p.committed_offset, p.error_code) == (2, -1, E)
