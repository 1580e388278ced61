"""`BrokerConfig`: the broker's settings, validated once at start.

Loaded by `epochlog.settings.load_settings` from flags, `EPOCHLOG_*` variables and a TOML file
(flags win). A bad value is refused with the setting's name and the reason, before any port or
file is opened. Names follow Kafka's broker settings in snake_case where one exists
(`auto.create.topics.enable` -> `auto_create_topics_enable`, `log.segment.bytes` ->
`log_segment_bytes`, ...).

Listeners, as Kafka's `listeners` / `advertised.listeners` (docs/control-plane.md "Listeners"):
`listen` is where the broker binds for clients and `advertised` where clients reach it (listener
EXTERNAL). An optional second listener, `internal_listen` / `internal_advertised` (listener
INTERNAL), is for traffic inside the cluster: the controller's control requests and, later,
followers' fetches. Inside containers the two differ: clients on the host reach `localhost:19092`,
the controller reaches `broker1:9091`. Without `internal_listen` there is one listener, EXTERNAL,
used for everything. Each `*_advertised` defaults to its listen address with the port bound.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from .replica_selector import selector_for
from .storage import LogConfig, LogConfigError

MS_PER_DAY = 24 * 60 * 60 * 1000
# Producer ids are (broker id << 40) | counter (see producer_ids.py), so ids must stay below 2**23
# for every producer id to fit an int64.
BROKER_ID_MAX = (1 << 23) - 1

EXTERNAL_LISTENER = "EXTERNAL"  # clients; always present, registered first
INTERNAL_LISTENER = "INTERNAL"  # the controller and other brokers, when configured
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def parse_host_port(text: str, name: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); raises ValueError starting with the setting's name."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{name}: expected HOST:PORT with a port 0-65535, got {text!r}")
    return host.strip("[]"), int(port)


class BrokerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    broker_id: Annotated[int, msgspec.Meta(ge=0, le=BROKER_ID_MAX)]
    data_dir: str
    rack: str = ""  # empty: no rack
    listen: str = "127.0.0.1:9092"
    advertised: str = ""  # empty: the listen address (with the port actually bound)
    internal_listen: str = ""  # a second listener for the cluster's own traffic; empty: none
    internal_advertised: str = ""  # empty: the internal listen address (port bound)
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
        parse_host_port(self.listen, "listen")
        parse_host_port(self.controller, "controller")
        _check_advertised(self.advertised, "advertised")
        self._check_internal()
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

    def _check_internal(self) -> None:
        if not self.internal_listen:
            if self.internal_advertised:
                raise ValueError("internal_advertised: needs internal_listen")
            return
        host, port = parse_host_port(self.internal_listen, "internal_listen")
        if port != 0 and (host, port) == self.listen_address:
            raise ValueError("internal_listen: must differ from listen (one port, one listener)")
        _check_advertised(self.internal_advertised, "internal_advertised")

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
    def listen_address(self) -> tuple[str, int]:
        return parse_host_port(self.listen, "listen")

    @property
    def controller_address(self) -> tuple[str, int]:
        return parse_host_port(self.controller, "controller")

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return parse_host_port(self.metrics_listen, "metrics_listen") if self.metrics_listen \
            else None

    @property
    def listener_addresses(self) -> dict[str, tuple[str, int]]:
        """Listener name -> where to bind, EXTERNAL first (the registration order)."""
        listeners = {EXTERNAL_LISTENER: self.listen_address}
        if self.internal_listen:
            listeners[INTERNAL_LISTENER] = parse_host_port(self.internal_listen,
                                                           "internal_listen")
        return listeners

    def advertised_address(self, bound_port: int,
                           listener: str = EXTERNAL_LISTENER) -> tuple[str, int]:
        """Where others reach a listener: its advertised setting, else its listen host with
        the port bound."""
        if listener == INTERNAL_LISTENER:
            advertised, (host, _) = self.internal_advertised, self.listener_addresses[listener]
            name = "internal_advertised"
        else:
            advertised, (host, _), name = self.advertised, self.listen_address, "advertised"
        if advertised:
            return parse_host_port(advertised, name)
        if host in WILDCARD_HOSTS:
            host = "127.0.0.1"  # a wildcard is no address to give out; set the advertised one
        return host, bound_port

    @property
    def rack_or_none(self) -> str | None:
        return self.rack or None


def _check_advertised(text: str, name: str) -> None:
    if text and parse_host_port(text, name)[1] == 0:
        raise ValueError(f"{name}: needs a real port, not 0")
