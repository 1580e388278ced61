"""Which process takes each cluster setting: `settings={"min.insync.replicas": 2}` becomes
`--set default_min_insync_replicas=2` on the controller's command line.

A test names settings as Kafka users do (dotted, `min.insync.replicas`) or as epochlog's own
settings are named (`replica_lag_time_max_ms`). A name is turned into snake_case and then goes:
- to the brokers, if BrokerConfig has it;
- to the controller, if ControllerConfig has it, or has it with Kafka's broker-level `default_`
  prefix for topic defaults (`min.insync.replicas` -> `default_min_insync_replicas`,
  `num.partitions` -> the brokers' `num_partitions` and the controller's
  `default_num_partitions`);
- to both where both have it (`cluster_id`).
A name neither knows is refused here, naming it, before any process starts.

The harness runs brokers and controller as processes and must not import their code, so the two
lists of names are written out below; tests/testing/test_settings_routing.py checks them against
the real BrokerConfig and ControllerConfig, so they cannot drift.
"""

from __future__ import annotations

from collections.abc import Mapping

BROKER_SETTINGS = frozenset({
    "auto_create_topics_enable", "broker_heartbeat_interval_ms", "broker_id", "cluster_id",
    "connection_idle_ms_max", "connections_max", "controlled_shutdown_backoff_ms",
    "controlled_shutdown_ms_max", "controlled_shutdown_retries_max", "controller",
    "controller_request_timeout_ms", "data_dir", "default_replication_factor",
    "fetch_sessions_max", "fetch_wait_ms_max", "fetch_waiters_max", "frame_bytes_max",
    "group_initial_rebalance_delay_ms", "group_max_session_timeout_ms",
    "group_min_session_timeout_ms", "internal_advertised", "internal_listen",
    "isr_retry_backoff_ms", "listen", "advertised", "listeners", "advertised_listeners",
    "listener_security_protocol_map", "inter_broker_listener_name",
    "control_plane_listener_name", "ssl_keystore_type", "ssl_keystore_location",
    "ssl_key_password", "ssl_truststore_type", "ssl_truststore_location", "ssl_client_auth",
    "ssl_endpoint_identification_algorithm", "ssl_principal_mapping_rules",
    "ssl_handshake_timeout_ms", "log_cleaner_dedupe_buffer_size",
    "log_cleaner_delete_retention_ms", "log_cleaner_enable", "log_cleaner_interval_ms",
    "log_cleaner_io_buffer_size", "log_cleaner_min_cleanable_ratio",
    "log_cleaner_min_compaction_lag_ms", "log_cleanup_policy", "log_flush_interval_ms",
    "log_retention_bytes", "log_retention_check_interval_ms", "log_retention_ms",
    "log_segment_bytes", "log_segment_ms", "message_max_bytes", "metrics_listen",
    "num_partitions", "offset_metadata_max_bytes", "offsets_commit_timeout_ms",
    "offsets_topic_num_partitions", "offsets_topic_replication_factor", "produce_waiters_max",
    "rack", "replica_fetch_backoff_ms", "replica_fetch_max_bytes",
    "replica_fetch_partition_max_bytes", "replica_fetch_wait_max_ms", "replica_lag_time_max_ms",
    "replica_selector_class", "request_hooks_listen", "transaction_max_timeout_ms",
    "transaction_remove_expired_transaction_cleanup_interval_ms",
    "transaction_state_log_num_partitions", "transaction_state_log_replication_factor",
    "transactional_id_expiration_ms",
})

CONTROLLER_SETTINGS = frozenset({
    "auto_leader_rebalance_enable", "broker_connection_loss_grace_ms",
    "broker_session_timeout_ms", "cluster_id", "controller_id", "data_dir",
    "default_min_insync_replicas", "default_num_partitions", "default_replication_factor",
    "default_retention_bytes", "default_retention_ms", "default_segment_bytes",
    "default_segment_ms", "default_unclean_leader_election_enable", "frame_bytes_max",
    "leader_imbalance_check_interval_seconds", "leader_imbalance_per_broker_percentage",
    "listen", "metalog_record_bytes_max", "metrics_listen", "queue_requests_max",
    "request_timeout_ms", "send_backoff_ms_max", "unclean_recovery_timeout_ms",
})

# Set by the harness itself from the cluster's plan; a test asking for them is refused.
HARNESS_OWNED = frozenset({"broker_id", "data_dir", "rack", "listen", "advertised",
                           "internal_listen", "internal_advertised", "controller", "listeners",
                           "advertised_listeners"})


def snake(name: str) -> str:
    return name.strip().replace(".", "_").replace("-", "_").lower()


def text_of(value: object) -> str:
    """A setting's value as the command line takes it (booleans as Kafka writes them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def route(settings: Mapping[str, object] | None) -> tuple[list[str], list[str]]:
    """(brokers' arguments, controller's arguments): `--set NAME=VALUE` pairs."""
    brokers, controller = route_names(settings)
    return ([arg for k, v in brokers.items() for arg in ("--set", f"{k}={v}")],
            [arg for k, v in controller.items() for arg in ("--set", f"{k}={v}")])


def route_names(settings: Mapping[str, object] | None) -> tuple[dict[str, str], dict[str, str]]:
    """(brokers' settings, controller's settings): snake_case name -> value as text."""
    brokers: dict[str, str] = {}
    controller: dict[str, str] = {}
    for name, value in (settings or {}).items():
        key = snake(name)
        if key in HARNESS_OWNED:
            raise ValueError(f"setting {name!r} is chosen by the cluster harness (ports, "
                             "folders, racks and ids come from its own arguments)")
        text = text_of(value)
        found = False
        if key in BROKER_SETTINGS:
            brokers[key] = text
            found = True
        for candidate in (key, f"default_{key}"):
            if candidate in CONTROLLER_SETTINGS:
                controller[candidate] = text
                found = True
                break
        if not found:
            raise ValueError(f"unknown setting {name!r}: neither the brokers nor the controller "
                             f"has {key!r} (nor the controller default_{key})")
    return brokers, controller
