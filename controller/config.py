"""`ControllerConfig`: the controller's settings, validated once at start.

Loaded by `epochlog.settings.load_settings` from flags, `EPOCHLOG_*` variables and a TOML file.
A bad value is refused with the setting's name and the reason. Topic defaults use Kafka's names in
snake_case with a `default_` prefix; a topic's own settings use Kafka's dotted names
(`retention.ms`, ...) and are checked by `topic_settings.py`.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

MS_PER_DAY = 24 * 60 * 60 * 1000
Positive = Annotated[int, msgspec.Meta(ge=1)]


def parse_host_port(text: str, name: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); raises ValueError starting with the setting's name."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{name}: expected HOST:PORT with a port 0-65535, got {text!r}")
    return host.strip("[]"), int(port)


class ControllerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, frozen=True):
    data_dir: str
    listen: str = "127.0.0.1:9093"
    # Prometheus /metrics on HOST:PORT; empty: no metrics server.
    metrics_listen: str = ""
    # The controller's node id in control requests; distinct from broker ids, as in KRaft.
    controller_id: Annotated[int, msgspec.Meta(ge=0)] = 3000
    # Brokers must register with this cluster id (an empty one in a registration is accepted).
    cluster_id: str = "epochlog"
    # A broker missing heartbeats this long is dead. Brokers heartbeat every ~1/4 of it.
    broker_session_timeout_ms: Annotated[int, msgspec.Meta(ge=100, le=3_600_000)] = 9000
    # When the connection a broker heartbeats on closes (a killed process's close at once), its
    # generation fails unless it heartbeats again (on a new connection) within this long.
    broker_connection_loss_grace_ms: Annotated[int, msgspec.Meta(ge=0, le=3_600_000)] = 500
    frame_bytes_max: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 8 << 20
    # Per broker: control requests waiting to be sent; past it the queue is replaced by full state.
    queue_requests_max: Annotated[int, msgspec.Meta(ge=8)] = 1000
    request_timeout_ms: Annotated[int, msgspec.Meta(ge=100)] = 10_000
    send_backoff_ms_max: Annotated[int, msgspec.Meta(ge=10)] = 2000
    metalog_record_bytes_max: Annotated[int, msgspec.Meta(ge=4096)] = 16 << 20
    # Topic defaults. default_replication_factor -1 means min(3, live brokers).
    default_num_partitions: Positive = 1
    default_replication_factor: Annotated[int, msgspec.Meta(ge=-1, le=32767)] = -1
    default_min_insync_replicas: Positive = 1
    default_retention_ms: Annotated[int, msgspec.Meta(ge=-1)] = 7 * MS_PER_DAY
    default_retention_bytes: Annotated[int, msgspec.Meta(ge=-1)] = -1
    default_segment_bytes: Annotated[int, msgspec.Meta(ge=14)] = 1 << 30
    default_segment_ms: Positive = 7 * MS_PER_DAY
    default_unclean_leader_election_enable: bool = False
    # KIP-966 unclean recovery (unclean_recovery.py): an unclean election first asks the live
    # replicas for their log ends and waits up to this long for all of them, then elects the one
    # holding the most; -1: elect the first live replica at once (before KIP-966).
    unclean_recovery_timeout_ms: Annotated[int, msgspec.Meta(ge=-1, le=3_600_000)] = 5000
    # Kafka's automatic preferred-leader rebalancing (controller/rebalance.py), same names.
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: Annotated[int, msgspec.Meta(ge=0, le=100)] = 10
    leader_imbalance_check_interval_seconds: Annotated[int, msgspec.Meta(ge=1, le=86_400)] = 300

    def __post_init__(self) -> None:
        parse_host_port(self.listen, "listen")
        if self.metrics_listen:
            parse_host_port(self.metrics_listen, "metrics_listen")
        if not self.data_dir:
            raise ValueError("data_dir: must not be empty")
        if self.default_replication_factor == 0:
            raise ValueError("default_replication_factor: must be -1 (automatic) or at least 1")

    @property
    def listen_address(self) -> tuple[str, int]:
        return parse_host_port(self.listen, "listen")

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return parse_host_port(self.metrics_listen, "metrics_listen") if self.metrics_listen \
            else None

    def topic_defaults(self) -> dict[str, str]:
        """The cluster's defaults for every topic setting, by Kafka's name, as strings."""
        return {
            "retention.ms": str(self.default_retention_ms),
            "retention.bytes": str(self.default_retention_bytes),
            "segment.bytes": str(self.default_segment_bytes),
            "segment.ms": str(self.default_segment_ms),
            "min.insync.replicas": str(self.default_min_insync_replicas),
            "unclean.leader.election.enable":
                "true" if self.default_unclean_leader_election_enable else "false",
        }
