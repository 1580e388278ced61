"""Topic settings travel in the controller's control requests (outbox.py, outbound.py), and an
admin request that changes them is answered only once the change is durable (service.py).

Which sends a change produces, to whom, with what: a LeaderAndIsr carries the decided settings
(the topic's own, the dynamic and the static cluster defaults; never Kafka's own defaults) of
every topic it names; AlterConfigs on a topic is one UpdateMetadata to every live broker naming
that topic with its new settings and no partition; a new cluster default names exactly the
topics without their own value for it; the full state a restarted (or overflowing) broker gets
carries the settings of every topic it hosts, as decided now.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from epochlog.controller import config_handlers, handlers, outbox
from epochlog.controller.config import ControllerConfig
from epochlog.controller.records import (
    ClusterDefaultsChanged,
    Listener,
    TopicConfigsChanged,
    TopicCreated,
)
from epochlog.controller.service import ControllerService, FatalError
from epochlog.controller.state import ControllerState
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.alter_configs import (
    AlterableConfig,
    AlterConfigsRequest,
    AlterConfigsResource,
)
from epochlog.protocol.apis.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from epochlog.protocol.apis.incremental_alter_configs import AlterableConfig as IncrementalConfig
from epochlog.protocol.apis.incremental_alter_configs import (
    AlterConfigsResource as IncrementalResource,
)
from epochlog.protocol.apis.incremental_alter_configs import IncrementalAlterConfigsRequest
from epochlog.protocol.error_codes import ErrorCode as E

from .test_state import SESSION_MS, Journal, config, register

# The controller's static defaults (ControllerConfig's default_*) are Kafka's (DEFAULT_CONFIG: left
# to each broker) but for segment.bytes, 1 MiB here (STATIC_BROKER_CONFIG, so decided).


def cluster(n: int = 3) -> tuple[ControllerState, dict[int, int]]:
    s = ControllerState(config(default_segment_bytes=1 << 20), random.Random(7))
    s.start(now_ms=0)
    epochs = {i: register(s, i) for i in range(1, n + 1)}
    s.take_ready()
    return s, epochs


def carried(message: Any) -> dict[str, dict[str, str] | None]:
    """topic -> the settings a LeaderAndIsr or UpdateMetadata carries for it (None: not said)."""
    return {t.topic_name: None if t.configs is None else {c.name: c.value for c in t.configs}
            for t in message.topic_states}


def sends_by_broker(s: ControllerState) -> dict[int, dict[int, Any]]:
    """broker -> api key -> the message, for what the last decisions send."""
    out: dict[int, dict[int, Any]] = {}
    for send in s.take_ready().sends:
        assert send.api_key not in out.setdefault(send.broker_id, {}), "one of each kind"
        out[send.broker_id][send.api_key] = send.message
    return out


def test_a_leader_and_isr_that_opens_a_topic_carries_its_decided_settings() -> None:
    s, _ = cluster(4)
    s.alter_cluster_defaults({"retention.ms": "3600000"})
    s.take_ready()
    assert s.create_topic("t", -1, -1, {0: [1, 2, 3]}, {"cleanup.policy": "compact"}).error == 0
    sent = sends_by_broker(s)
    decided = {"cleanup.policy": "compact", "retention.ms": "3600000", "segment.bytes": "1048576"}
    for replica in (1, 2, 3):
        assert carried(sent[replica][ApiKey.LEADER_AND_ISR]) == {"t": decided}
        # UpdateMetadata tells every broker of the new partition; the settings are the replicas'
        assert carried(sent[replica][ApiKey.UPDATE_METADATA]) == {"t": None}
    assert ApiKey.LEADER_AND_ISR not in sent[4]
    assert carried(sent[4][ApiKey.UPDATE_METADATA]) == {"t": None}


def test_altering_a_topic_sends_its_new_settings_to_every_live_broker_in_update_metadata(
) -> None:
    s, epochs = cluster(4)
    assert s.create_topic("t", -1, -1, {0: [1, 2, 3]}, {}).error == 0
    assert s.create_topic("other", -1, -1, {0: [1]}, {}).error == 0
    s.take_ready()
    assert s.alter_topic_configs("t", {"max.message.bytes": "2000"}) == (0, None)
    sent = sends_by_broker(s)
    assert sorted(sent) == [1, 2, 3, 4]
    for broker, requests in sent.items():
        assert list(requests) == [ApiKey.UPDATE_METADATA], "no LeaderAndIsr: no partition moved"
        um = requests[ApiKey.UPDATE_METADATA]
        assert (um.controller_epoch, um.broker_epoch) == (s.controller_epoch, epochs[broker])
        assert carried(um) == {"t": {"max.message.bytes": "2000", "segment.bytes": "1048576"}}
        assert um.topic_states[0].partition_states == []
        assert um.topic_states[0].topic_id == s.topics["t"].topic_id


def test_a_change_that_changes_nothing_sends_nothing() -> None:
    s, _ = cluster()
    assert s.create_topic("t", -1, -1, {0: [1, 2, 3]}, {"retention.ms": "1000"}).error == 0
    s.take_ready()
    assert s.alter_topic_configs("t", {"retention.ms": "5000"}, validate_only=True) == (0, None)
    assert s.alter_topic_configs("t", {"retention.ms": "1000"}) == (0, None)  # as it is
    assert s.alter_cluster_defaults({}) == (0, None)
    ready = s.take_ready()
    assert not ready.records and not ready.sends


def test_a_cluster_default_reaches_exactly_the_topics_without_their_own_value() -> None:
    s, _ = cluster()
    assert s.create_topic("follows", -1, -1, {0: [1, 2, 3]}, {"cleanup.policy": "compact"}
                          ).error == 0
    assert s.create_topic("own", -1, -1, {0: [1]}, {"retention.ms": "1000"}).error == 0
    s.take_ready()
    assert s.alter_cluster_defaults({"retention.ms": "3600000"}) == (0, None)
    sent = sends_by_broker(s)
    assert sorted(sent) == [1, 2, 3]
    for requests in sent.values():
        assert carried(requests[ApiKey.UPDATE_METADATA]) == {"follows": {
            "cleanup.policy": "compact", "retention.ms": "3600000", "segment.bytes": "1048576"}}
    # Back to none: the topic goes back to the static default (Kafka's: no value at all).
    assert s.alter_cluster_defaults({}) == (0, None)
    for requests in sends_by_broker(s).values():
        assert carried(requests[ApiKey.UPDATE_METADATA]) == {"follows": {
            "cleanup.policy": "compact", "segment.bytes": "1048576"}}


def test_a_dead_broker_learns_the_change_in_its_full_state_when_it_returns() -> None:
    """Down while the change was committed: the LeaderAndIsr of its new generation's full state
    carries its topics' settings as decided now (so does a queue replaced by the full state)."""
    s, epochs = cluster()
    assert s.create_topic("t", -1, -1, {0: [1, 2, 3], 1: [2, 3, 1]}, {}).error == 0
    assert s.create_topic("elsewhere", -1, -1, {0: [2]}, {"retention.ms": "1000"}).error == 0
    s.expire_sessions(SESSION_MS)  # no heartbeat from anyone: every generation is over
    for broker in (2, 3):
        register(s, broker, now_ms=SESSION_MS)
    s.take_ready()
    assert s.alter_topic_configs("t", {"segment.ms": "60000"}) == (0, None)
    assert sorted(sends_by_broker(s)) == [2, 3], "nothing for a broker without a generation"
    register(s, 1, now_ms=SESSION_MS)
    sent = sends_by_broker(s)[1]
    assert carried(sent[ApiKey.LEADER_AND_ISR]) == {
        "t": {"segment.ms": "60000", "segment.bytes": "1048576"}}
    assert [p.partition_index for p in sent[ApiKey.LEADER_AND_ISR].topic_states[0]
            .partition_states] == [0, 1]
    full = outbox.full_state_sends(s, 2)
    assert [send.api_key for send in full] == [ApiKey.UPDATE_METADATA, ApiKey.LEADER_AND_ISR]
    assert carried(full[1].message) == {
        "elsewhere": {"retention.ms": "1000", "segment.bytes": "1048576"},
        "t": {"segment.ms": "60000", "segment.bytes": "1048576"}}


def test_settings_of_a_deleted_topic_are_not_sent() -> None:
    s, _ = cluster()
    assert s.create_topic("t", -1, -1, {0: [1, 2, 3]}, {}).error == 0
    s.take_ready()
    assert s.alter_topic_configs("t", {"retention.ms": "1000"}) == (0, None)
    assert s.delete_topic("t") == 0
    for requests in sends_by_broker(s).values():
        assert all(c is None for c in carried(requests[ApiKey.UPDATE_METADATA]).values())


def test_a_replayed_controller_decides_the_same_settings() -> None:
    s, _ = cluster()
    journal = Journal(s)
    assert s.create_topic("t", -1, -1, {0: [1, 2, 3]}, {"retention.ms": "1000"}).error == 0
    s.alter_cluster_defaults({"segment.ms": "60000"})
    journal.take()
    fresh = ControllerState(config(default_segment_bytes=1 << 20))
    fresh.replay(journal.records)
    assert fresh.decided_settings("t") == s.decided_settings("t") == {
        "retention.ms": "1000", "segment.ms": "60000", "segment.bytes": "1048576"}



def test_the_settings_decisions_use_are_parsed_once_per_change_and_follow_the_defaults() -> None:
    """min.insync.replicas and unclean.leader.election.enable reach the controller's own
    decisions (the ELR, unclean elections) as one typed TopicPolicy per topic, derived from the
    decided settings whenever the topic's settings or the cluster's defaults change, and after a
    replay alike."""
    s, _ = cluster()
    journal = Journal(s)
    assert s.create_topic("t", -1, -1, {0: [1, 2, 3]}, {}).error == 0
    assert s.create_topic("own", -1, -1, {0: [1, 2, 3]}, {"min.insync.replicas": "3"}).error == 0
    assert (s.topics["t"].policy.min_insync_replicas,
            s.topics["t"].policy.unclean_leader_election) == (1, False)
    assert s.alter_cluster_defaults({"min.insync.replicas": "2",
                                     "unclean.leader.election.enable": "true"}) == (0, None)
    assert (s.topics["t"].policy.min_insync_replicas,
            s.topics["t"].policy.unclean_leader_election) == (2, True)
    assert s.topics["own"].policy.min_insync_replicas == 3, "its own value wins"
    assert s.alter_topic_configs("t", {"unclean.leader.election.enable": "false"}) == (0, None)
    assert not s.topics["t"].policy.unclean_leader_election
    journal.take()
    fresh = ControllerState(config(default_segment_bytes=1 << 20))
    fresh.replay(journal.records)
    assert {n: t.policy for n, t in fresh.topics.items()} == \
        {n: t.policy for n, t in s.topics.items()}

# ----------------------------------------------------------- answered after the commit
class _SpyLog:
    """The service's metadata log, recording what was made durable; `fail` refuses appends."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.durable: list[Any] = []
        self.fail = False

    def append(self, batch: list[Any]) -> None:
        if self.fail:
            raise OSError("disk refused the write")
        self.real.append(batch)
        self.durable.extend(batch)

    def close(self) -> None:
        self.real.close()


def _create(value: str) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=[CreatableTopic(
        name=f"new-{value}", num_partitions=1, replication_factor=1,
        configs=[CreatableTopicConfig(name="retention.ms", value=value)])])


def _alter(value: str) -> AlterConfigsRequest:
    return AlterConfigsRequest(resources=[AlterConfigsResource(
        resource_type=2, resource_name="t", configs=[
            AlterableConfig(name="retention.ms", value=value)])])


def _incremental(value: str, resource_type: int = 2, name: str = "retention.ms"
                 ) -> IncrementalAlterConfigsRequest:
    return IncrementalAlterConfigsRequest(resources=[IncrementalResource(
        resource_type=resource_type, resource_name="t" if resource_type == 2 else "",
        configs=[IncrementalConfig(name=name, config_operation=0, value=value)])])


ALTERS = [
    pytest.param(handlers.create_topics, _create, TopicCreated, id="CreateTopics"),
    pytest.param(config_handlers.alter_configs, _alter, TopicConfigsChanged, id="AlterConfigs"),
    pytest.param(config_handlers.incremental_alter_configs, _incremental, TopicConfigsChanged,
                 id="IncrementalAlterConfigs"),
    pytest.param(config_handlers.incremental_alter_configs,
                 lambda value: _incremental(value, 4, "log.retention.ms"),
                 ClusterDefaultsChanged, id="IncrementalAlterConfigs-defaults"),
]


@pytest.mark.parametrize("handler, make, record", ALTERS)
async def test_a_settings_change_is_answered_only_once_it_is_durable(
        tmp_path: Any, handler: Any, make: Callable[[str], Any], record: type) -> None:
    """service.handle returns the answer, which the server writes only then, after the
    decision's records came back fsynced from the metadata log, and after the control requests
    that carry the change were queued; when the log refuses them there is no answer at all (the
    process stops)."""
    service = ControllerService(ControllerConfig(data_dir=str(tmp_path)))
    await service.start()
    assert service.metalog is not None
    spy = _SpyLog(service.metalog)
    service.metalog = spy  # type: ignore[assignment]
    try:
        service.handle(lambda state, *_: state.register_broker(
            1, uuid.uuid4(), None, [Listener("PLAINTEXT", "127.0.0.1", 1)], 0), None, 0)
        service.handle(lambda state, *_: state.create_topic("t", 1, 1, None, {}), None, 0)
        before = list(spy.durable)
        answer = service.handle(handler, make("1000"), 4)
        results = getattr(answer, "responses", None) or answer.topics
        assert [r.error_code for r in results] == [E.NONE]
        assert any(isinstance(r, record) for r in spy.durable[len(before):]), spy.durable
        assert service.senders[1].broker_epoch == service.state.brokers[1].broker_epoch

        durable = list(spy.durable)
        spy.fail = True
        with pytest.raises(FatalError):
            service.handle(handler, make("2000"), 4)
        assert spy.durable == durable
    finally:
        spy.fail = False
        await service.stop()
