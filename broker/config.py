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

    # Topics created on first use (Metadata or Produce for an unknown topic), as in Kafka.
    auto_create_topics_enable: bool = True
    num_partitions: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1
    # Kafka's default.replication.factor (1) for auto-created topics; -1 leaves it to the
    # controller (min(3, live brokers)). Until followers fetch (the replication issue), a topic
    # with more than one replica cannot commit, so 1 is also the only default that works today.
    default_replication_factor: Annotated[int, msgspec.Meta(ge=-1, le=32767)] = 1

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
    # A follower that has not caught up for this long leaves the ISR (the replication issue).
    replica_lag_time_max_ms: Annotated[int, msgspec.Meta(ge=100)] = 30_000

    # Waiting requests (acks=all produce, long-poll fetch), each kind bounded.
    produce_waiters_max: Annotated[int, msgspec.Meta(ge=1)] = 10_000
    fetch_waiters_max: Annotated[int, msgspec.Meta(ge=1)] = 10_000
    fetch_wait_ms_max: Annotated[int, msgspec.Meta(ge=0)] = 30_000  # caps a client's max_wait_ms

    # Log defaults for every partition (Kafka's log.* broker settings).
    log_segment_bytes: int = 1 << 30
    log_segment_ms: int = 7 * MS_PER_DAY
    log_retention_ms: int = 7 * MS_PER_DAY
    log_retention_bytes: int = -1
    log_retention_check_interval_ms: Annotated[int, msgspec.Meta(ge=10)] = 300_000
    log_flush_interval_ms: int = 1000
    message_max_bytes: int = (1 << 20) + 12

    def __post_init__(self) -> None:
        if not self.data_dir:
            raise ValueError("data_dir: must not be empty")
        parse_host_port(self.listen, "listen")
        parse_host_port(self.controller, "controller")
        _check_advertised(self.advertised, "advertised")
        self._check_internal()
        if self.metrics_listen:
            parse_host_port(self.metrics_listen, "metrics_listen")
        if self.default_replication_factor == 0:
            raise ValueError("default_replication_factor: must be -1 (the controller's) or >= 1")
        self.log_config()  # refuses a bad log_* setting, naming it

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
                 ("log_flush_interval_ms", "flush_ms"), ("message_max_bytes", "max_message_bytes"))
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
