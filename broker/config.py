"""`BrokerConfig`: the broker's settings, validated once at start.

Loaded by `epochlog.settings.load_settings` from flags, `EPOCHLOG_*` variables and a TOML file
(flags win). A bad value is refused with the setting's name and the reason, before any port or
file is opened. Names follow Kafka's broker settings in snake_case where one exists
(`auto.create.topics.enable` -> `auto_create_topics_enable`, `log.segment.bytes` ->
`log_segment_bytes`, ...).

Listeners (listeners.py, docs/security.md): Kafka's `listeners`, `advertised.listeners`,
`listener.security.protocol.map`, `inter.broker.listener.name` and `control.plane.listener.name`,
or epochlog's older `listen`/`advertised` (listener EXTERNAL) with an optional
`internal_listen`/`internal_advertised` (listener INTERNAL, for the controller and other brokers;
docs/control-plane.md "Listeners"). Either form becomes one `ListenerPlan` (`listener_plan`),
which is all the rest of the broker reads. SSL listeners take the `ssl_*` settings (tls.py).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from .listeners import (
    EXTERNAL_LISTENER,
    INTERNAL_LISTENER,
    ListenerPlan,
    ListenerSettings,
    parse_host_port,
    plan_listeners,
)
from .principal import Rule, parse_rules
from .replica_selector import selector_for
from .storage import LogConfig, LogConfigError
from .tls import CLIENT_AUTH, TlsFiles

MS_PER_DAY = 24 * 60 * 60 * 1000
# Producer ids are (broker id << 40) | counter (see producer_ids.py), so ids must stay below 2**23
# for every producer id to fit an int64.
BROKER_ID_MAX = (1 << 23) - 1

LISTEN_DEFAULT = "127.0.0.1:9092"
SSL_STORE_TYPES = ("PEM",)  # Python's ssl reads PEM; JKS and PKCS12 are Java's stores


class BrokerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    broker_id: Annotated[int, msgspec.Meta(ge=0, le=BROKER_ID_MAX)]
    data_dir: str
    rack: str = ""  # empty: no rack
    # Listeners, Kafka's form (listeners.py); when `listeners` is set, the older four below
    # stay unset.
    listeners: str = ""  # NAME://HOST:PORT,...; empty: the older settings below
    advertised_listeners: str = ""  # NAME://HOST:PORT,...; a name left out: its bind address
    listener_security_protocol_map: str = ""  # NAME:PROTOCOL,...; empty: Kafka's default
    inter_broker_listener_name: str = ""  # empty: PLAINTEXT (Kafka's), or the only listener
    control_plane_listener_name: str = ""  # KIP-291; empty: the inter-broker listener
    # The older form: listener EXTERNAL, and INTERNAL when internal_listen is set.
    listen: str = LISTEN_DEFAULT
    advertised: str = ""  # empty: the listen address (with the port actually bound)
    internal_listen: str = ""  # a second listener for the cluster's own traffic; empty: none
    internal_advertised: str = ""  # empty: the internal listen address (port bound)
    # TLS on SSL listeners and to other brokers' SSL listeners (tls.py), Kafka's names.
    ssl_keystore_type: str = "PEM"
    ssl_keystore_location: str = ""  # PEM: private key, then the certificate chain
    ssl_key_password: str = ""  # never logged
    ssl_truststore_type: str = "PEM"
    ssl_truststore_location: str = ""  # PEM CA certificates; empty: the system's
    ssl_client_auth: str = "none"  # none | requested | required (mutual TLS)
    ssl_endpoint_identification_algorithm: str = "https"  # https: check names; "": do not
    ssl_principal_mapping_rules: str = "DEFAULT"  # principal.py
    # A TLS handshake not finished in this time closes the connection.
    ssl_handshake_timeout_ms: Annotated[int, msgspec.Meta(ge=100, le=600_000)] = 10_000
    controller: str = "127.0.0.1:9093"
    cluster_id: str = "epochlog"
    metrics_listen: str = ""  # Prometheus /metrics on HOST:PORT; empty: off
    # Test-only request hooks (request_hooks.py): their HTTP control on HOST:PORT; empty: off.
    request_hooks_listen: str = ""

    # Topics created on first use (Metadata or Produce for an unknown topic), as in Kafka.
    auto_create_topics_enable: bool = True
    num_partitions: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1
    # Kafka's default.replication.factor for auto-created topics; -1 (the default) leaves it to
    # the controller: min(3, live brokers), so a topic created on first use is replicated as
    # widely as the cluster allows (followers fetch: follower.py, fetcher.py).
    default_replication_factor: Annotated[int, msgspec.Meta(ge=-1, le=32767)] = -1

    # Network limits (Kafka's socket.request.max.bytes, max.connections, connections.max.idle.ms).
    frame_bytes_max: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 100 << 20
    connections_max: Annotated[int, msgspec.Meta(ge=1)] = 4096
    connection_idle_ms_max: Annotated[int, msgspec.Meta(ge=100)] = 600_000

    # Control plane (docs/control-plane.md): heartbeat ~1/4 of the controller's session timeout.
    broker_heartbeat_interval_ms: Annotated[int, msgspec.Meta(ge=10, le=600_000)] = 2250
    controller_request_timeout_ms: Annotated[int, msgspec.Meta(ge=100)] = 10_000
    controlled_shutdown_retries_max: Annotated[int, msgspec.Meta(ge=0, le=100)] = 5
    controlled_shutdown_backoff_ms: Annotated[int, msgspec.Meta(ge=10)] = 1000
    # The whole controlled shutdown, retries included (an unreachable controller must not hold
    # a stopping broker for retries x request timeout).
    controlled_shutdown_ms_max: Annotated[int, msgspec.Meta(ge=100)] = 15_000
    # A follower that has not caught up for this long leaves the ISR (isr.py); the ISR task
    # looks every half of it.
    replica_lag_time_max_ms: Annotated[int, msgspec.Meta(ge=100)] = 30_000
    # After an AlterPartition failed (controller unreachable) or a replica was refused as
    # ineligible: how long before the same proposal, or that replica, is tried again.
    isr_retry_backoff_ms: Annotated[int, msgspec.Meta(ge=10, le=60_000)] = 500

    # Follower fetchers (follower.py, fetcher.py; Kafka's replica.fetch.*): bytes per Fetch and
    # per partition, the long-poll wait, and the retry backoff (first retries are faster).
    replica_fetch_max_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 10 << 20
    replica_fetch_partition_max_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 1 << 20
    replica_fetch_wait_max_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 500
    replica_fetch_backoff_ms: Annotated[int, msgspec.Meta(ge=10, le=60_000)] = 1000

    # Waiting requests (acks=all produce, long-poll fetch), each kind bounded.
    produce_waiters_max: Annotated[int, msgspec.Meta(ge=1)] = 10_000
    fetch_waiters_max: Annotated[int, msgspec.Meta(ge=1)] = 10_000
    fetch_wait_ms_max: Annotated[int, msgspec.Meta(ge=0)] = 30_000  # caps a client's max_wait_ms
    # Incremental fetch sessions kept (KIP-227, Kafka's max.incremental.fetch.session.cache.slots);
    # the least recently used goes first. 0: none (every fetch is a full one).
    fetch_sessions_max: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 1000
    # Which replica consumers are told to read from (KIP-392, Kafka's replica.selector.class):
    # "leader" or "rack-aware" (Kafka's class names also accepted; broker/replica_selector.py).
    replica_selector_class: str = "leader"

    # Consumer groups (broker/groups/; Kafka's offsets.* and group.* settings). The offsets topic
    # is created on the first FindCoordinator; replication factor -1: min(3, live brokers).
    offsets_topic_num_partitions: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 50
    offsets_topic_replication_factor: Annotated[int, msgspec.Meta(ge=-1, le=32767)] = -1
    offsets_commit_timeout_ms: Annotated[int, msgspec.Meta(ge=1, le=600_000)] = 5000
    offset_metadata_max_bytes: Annotated[int, msgspec.Meta(ge=0)] = 4096
    group_min_session_timeout_ms: Annotated[int, msgspec.Meta(ge=1)] = 6000
    group_max_session_timeout_ms: Annotated[int, msgspec.Meta(ge=1)] = 1_800_000
    group_initial_rebalance_delay_ms: Annotated[int, msgspec.Meta(ge=0, le=600_000)] = 3000

    # Transactions (broker/txn/; Kafka's transaction.* settings). The transaction state topic is
    # created on the first FindCoordinator for a transactional id; replication factor -1 as above.
    transaction_state_log_num_partitions: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 50
    transaction_state_log_replication_factor: Annotated[int, msgspec.Meta(ge=-1, le=32767)] = -1
    transaction_max_timeout_ms: Annotated[int, msgspec.Meta(ge=1)] = 900_000
    # An id with no transaction (Empty, Complete*) for this long is forgotten: a tombstone in
    # the log, its producer id no longer kept (Kafka's transactional.id.expiration.ms); looked
    # for every ..._cleanup_interval_ms (Kafka's
    # transaction.remove.expired.transaction.cleanup.interval.ms).
    transactional_id_expiration_ms: Annotated[int, msgspec.Meta(ge=1)] = 7 * MS_PER_DAY
    transaction_remove_expired_transaction_cleanup_interval_ms: Annotated[
        int, msgspec.Meta(ge=1)] = 3_600_000

    # Log defaults for every partition (Kafka's log.* broker settings).
    log_segment_bytes: int = 1 << 30
    log_segment_ms: int = 7 * MS_PER_DAY
    log_retention_ms: int = 7 * MS_PER_DAY
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: Annotated[int, msgspec.Meta(ge=10)] = 300_000
    log_flush_interval_ms: int = 1000
    message_max_bytes: int = (1 << 20) + 12
    # Compaction (broker/storage/cleaner.py), Kafka's log.cleanup.policy and log.cleaner.*: topic
    # defaults, then the cleaner: on or off, how often it looks for a log to clean, its offset
    # map's memory bound (several passes when a dirty section has more keys), its read/write size.
    log_cleanup_policy: str = "delete"
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_delete_retention_ms: Annotated[int, msgspec.Meta(ge=0)] = MS_PER_DAY
    log_cleaner_min_compaction_lag_ms: Annotated[int, msgspec.Meta(ge=0)] = 0
    log_cleaner_enable: bool = True
    log_cleaner_interval_ms: Annotated[int, msgspec.Meta(ge=10, le=3_600_000)] = 15_000
    log_cleaner_dedupe_buffer_size: Annotated[int, msgspec.Meta(ge=1 << 10, le=1 << 34)] = \
        128 << 20
    log_cleaner_io_buffer_size: Annotated[int, msgspec.Meta(ge=1 << 10, le=1 << 30)] = 512 << 10

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ValueError("data_dir: must not be empty")
        parse_host_port(self.controller, "controller")
        self._check_listeners()
        if self.metrics_listen:
            parse_host_port(self.metrics_listen, "metrics_listen")
        if self.request_hooks_listen:
            parse_host_port(self.request_hooks_listen, "request_hooks_listen")
        if self.offsets_topic_replication_factor == 0:
            raise ValueError("offsets_topic_replication_factor: must be -1 (min(3, live "
                             "brokers)) or >= 1")
        if self.transaction_state_log_replication_factor == 0:
            raise ValueError("transaction_state_log_replication_factor: must be -1 (min(3, live "
                             "brokers)) or >= 1")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise ValueError("group_min_session_timeout_ms: must not exceed "
                             "group_max_session_timeout_ms")
        if self.default_replication_factor == 0:
            raise ValueError("default_replication_factor: must be -1 (the controller's) or >= 1")
        self.log_config()  # refuses a bad log_* setting, naming it
        selector_for(self.replica_selector_class)  # refuses an unknown selector, naming it

    def _check_listeners(self) -> None:
        older = {"listen": self.listen != LISTEN_DEFAULT, "advertised": bool(self.advertised),
                 "internal_listen": bool(self.internal_listen),
                 "internal_advertised": bool(self.internal_advertised)}
        if self.listeners and any(older.values()):
            name = next(n for n, set_ in older.items() if set_)
            raise ValueError(f"{name}: set listeners (Kafka's form) or listen/advertised/"
                             f"internal_listen, not both")
        plan = self.listener_plan
        if not plan.tls:
            return
        for name, value in (("ssl_keystore_type", self.ssl_keystore_type),
                            ("ssl_truststore_type", self.ssl_truststore_type)):
            if value.upper() not in SSL_STORE_TYPES:
                raise ValueError(f"{name}: only PEM is supported (Python's ssl module reads "
                                 f"PEM files), got {value!r}")
        if not self.ssl_keystore_location:
            raise ValueError("ssl_keystore_location: an SSL listener needs the broker's key and "
                             "certificate chain (one PEM file)")
        if self.ssl_client_auth not in CLIENT_AUTH:
            raise ValueError(f"ssl_client_auth: one of {', '.join(CLIENT_AUTH)}, got "
                             f"{self.ssl_client_auth!r}")
        if self.ssl_endpoint_identification_algorithm.lower() not in ("https", ""):
            raise ValueError("ssl_endpoint_identification_algorithm: https or empty")
        self.principal_rules()

    @property
    def listener_plan(self) -> ListenerPlan:
        """The listeners, parsed once per distinct settings (listeners.py caches the plan)."""
        return plan_listeners(ListenerSettings(
            listeners=self.listeners, advertised_listeners=self.advertised_listeners,
            listener_security_protocol_map=self.listener_security_protocol_map,
            inter_broker_listener_name=self.inter_broker_listener_name,
            control_plane_listener_name=self.control_plane_listener_name,
            listen=self.listen, advertised=self.advertised,
            internal_listen=self.internal_listen, internal_advertised=self.internal_advertised))

    def tls_files(self) -> TlsFiles:
        return TlsFiles(keystore=self.ssl_keystore_location,
                        truststore=self.ssl_truststore_location,
                        key_password=self.ssl_key_password, client_auth=self.ssl_client_auth,
                        check_hostname=self.ssl_endpoint_identification_algorithm.lower()
                        == "https")

    def principal_rules(self) -> tuple[Rule, ...]:
        return parse_rules(self.ssl_principal_mapping_rules)

    def log_config(self) -> LogConfig:
        pairs = (("log_segment_bytes", "segment_bytes"), ("log_segment_ms", "segment_ms"),
                 ("log_retention_ms", "retention_ms"), ("log_retention_bytes", "retention_bytes"),
                 ("log_flush_interval_ms", "flush_ms"), ("message_max_bytes", "max_message_bytes"),
                 ("log_cleanup_policy", "cleanup_policy"),
                 ("log_cleaner_min_cleanable_ratio", "min_cleanable_dirty_ratio"),
                 ("log_cleaner_delete_retention_ms", "delete_retention_ms"),
                 ("log_cleaner_min_compaction_lag_ms", "min_compaction_lag_ms"))
        values = {theirs: getattr(self, ours) for ours, theirs in pairs}
        try:
            return LogConfig(**values)
        except LogConfigError as exc:
            ours = next((o for o, t in pairs if str(exc).startswith(t)), "log settings")
            raise ValueError(f"{ours}: {exc}") from None

    @property
    def controller_address(self) -> tuple[str, int]:
        return parse_host_port(self.controller, "controller")

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return parse_host_port(self.metrics_listen, "metrics_listen") if self.metrics_listen \
            else None

    @property
    def rack_or_none(self) -> str | None:
        return self.rack or None


__all__ = ["EXTERNAL_LISTENER", "INTERNAL_LISTENER", "BrokerConfig", "parse_host_port"]
