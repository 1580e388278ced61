"""Cluster settings reach the process that has them: Kafka's dotted names and epochlog's own,
broker, controller or both; an unknown name is refused before anything starts."""

from __future__ import annotations

import pytest

from epochlog.broker.config import BrokerConfig
from epochlog.controller.config import ControllerConfig
from epochlog.testing.settings_routing import BROKER_SETTINGS, CONTROLLER_SETTINGS, route


def test_the_harness_lists_match_the_real_settings() -> None:
    """The harness may not import broker or controller code, so it lists their settings; the
    lists must be exactly the real ones."""
    assert BROKER_SETTINGS == set(BrokerConfig.__struct_fields__)
    assert CONTROLLER_SETTINGS == set(ControllerConfig.__struct_fields__)


def test_kafka_names_and_ours_go_where_they_are_known() -> None:
    brokers, controller = route({
        "min.insync.replicas": 2,  # Kafka's broker-level topic default: the controller's
        "replica.lag.time.max.ms": 2000,  # the brokers'
        "broker_session_timeout_ms": 3000,  # ours, the controller's
        "num.partitions": 4,  # both: the brokers' auto-create and the controller's default
        "unclean.leader.election.enable": True,
    })
    assert brokers == ["--set", "replica_lag_time_max_ms=2000", "--set", "num_partitions=4"]
    assert controller == ["--set", "default_min_insync_replicas=2",
                          "--set", "broker_session_timeout_ms=3000",
                          "--set", "default_num_partitions=4",
                          "--set", "default_unclean_leader_election_enable=true"]


@pytest.mark.parametrize("name, words", [
    ("min.insync.replica", "unknown setting 'min.insync.replica'"),
    ("listen", "chosen by the cluster harness"),
    ("broker.id", "chosen by the cluster harness"),
])
def test_bad_names_are_refused_naming_them(name: str, words: str) -> None:
    with pytest.raises(ValueError, match=words):
        route({name: 1})
