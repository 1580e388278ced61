"""A broker's own settings as DescribeConfigs answers a BROKER resource, by Kafka's names.

Each BrokerConfig field is described under the name Kafka's brokers use for it where there is
one (`broker.rack`, `log.dirs`, `message.max.bytes`, ...) and otherwise under its own name with
dots (`fetch.sessions.max`). A setting is what the broker was started with
(STATIC_BROKER_CONFIG) or the default (DEFAULT_CONFIG), read-only, unless the cluster has a
dynamic default for it (DYNAMIC_DEFAULT_BROKER_CONFIG, set through the controller).
`ssl.key.password` is sensitive: described with no value (null), as Kafka describes it. The
older listener settings keep their own names (`listen`, `advertised`, ...): Kafka's
`listeners` and `advertised.listeners` are settings of their own now (listeners.py).
"""

from __future__ import annotations

from typing import Any

import msgspec

from epochlog.protocol.apis.describe_configs import (
    DescribeConfigsResourceResult,
    DescribeConfigsSynonym,
)

from ..config import BrokerConfig

SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 3, 4, 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_LONG, TYPE_DOUBLE, TYPE_PASSWORD = 1, 2, 5, 6, 8

KAFKA_NAMES = {
    "broker_id": "broker.id", "rack": "broker.rack", "data_dir": "log.dirs",
    "controller": "controller.quorum.bootstrap.servers", "metrics_listen": "metrics.listen",
    "frame_bytes_max": "socket.request.max.bytes", "connections_max": "max.connections",
    "connection_idle_ms_max": "connections.max.idle.ms",
    "controller_request_timeout_ms": "controller.socket.timeout.ms",
    "controlled_shutdown_retries_max": "controlled.shutdown.max.retries",
    "controlled_shutdown_backoff_ms": "controlled.shutdown.retry.backoff.ms",
    "log_flush_interval_ms": "log.flush.interval.ms",
    "log_cleaner_min_cleanable_ratio": "log.cleaner.min.cleanable.ratio",
    "log_cleaner_dedupe_buffer_size": "log.cleaner.dedupe.buffer.size",
    "log_cleaner_io_buffer_size": "log.cleaner.io.buffer.size",
    "log_cleaner_interval_ms": "log.cleaner.backoff.ms",
    "fetch_wait_ms_max": "fetch.max.wait.ms.max",
}


SENSITIVE = frozenset({"ssl_key_password"})


def kafka_name(field: str) -> str:
    return KAFKA_NAMES.get(field, field.replace("_", "."))


def describe_broker(config: BrokerConfig, keys: list[str] | None, synonyms: bool,
                    dynamic: list[DescribeConfigsResourceResult] | None = None
                    ) -> list[DescribeConfigsResourceResult]:
    """The broker's settings; dynamic cluster defaults (the controller's answer for the
    default BROKER resource) win over them and are listed too."""
    defaults = {f.name: f.default for f in msgspec.structs.fields(BrokerConfig)}
    overlay = {d.name: d for d in dynamic or () if not keys or d.name in keys}
    out = []
    for field in BrokerConfig.__struct_fields__:
        name = kafka_name(field)
        if keys and name not in keys:
            continue
        value = getattr(config, field)
        default = defaults.get(field, msgspec.NODEFAULT)
        source = SOURCE_DEFAULT if value == default else SOURCE_STATIC_BROKER
        sensitive = field in SENSITIVE
        text: str | None = None if sensitive else _text(value)
        chain = [DescribeConfigsSynonym(name=name, value=text, source=source)]
        if source == SOURCE_STATIC_BROKER and default is not msgspec.NODEFAULT:
            chain.append(DescribeConfigsSynonym(
                name=name, value=None if sensitive else _text(default), source=SOURCE_DEFAULT))
        over = overlay.pop(name, None)
        if over is not None:
            chain.insert(0, DescribeConfigsSynonym(name=name, value=over.value,
                                                   source=SOURCE_DYNAMIC_DEFAULT))
            text, source = over.value or "", SOURCE_DYNAMIC_DEFAULT
        out.append(DescribeConfigsResourceResult(
            name=name, value=text, read_only=over is None, config_source=source,
            is_sensitive=sensitive, synonyms=chain if synonyms else [],
            config_type=TYPE_PASSWORD if sensitive else _type(value),
            documentation=None))
    for extra in overlay.values():  # dynamic defaults this broker has no setting for
        out.append(DescribeConfigsResourceResult(
            name=extra.name, value=extra.value, read_only=False,
            config_source=SOURCE_DYNAMIC_DEFAULT, is_sensitive=False,
            synonyms=list(extra.synonyms) if synonyms else [], config_type=extra.config_type,
            documentation=None))
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _type(value: Any) -> int:
    if isinstance(value, bool):
        return TYPE_BOOLEAN
    if isinstance(value, int):
        return TYPE_LONG
    if isinstance(value, float):
        return TYPE_DOUBLE
    return TYPE_STRING
