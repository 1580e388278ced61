"""`TopicConfigs`: each topic's settings, as the controller decided them, on top of broker defaults.

Theory of operation
-------------------
The controller owns topic settings (docs/control-plane.md, "Topic settings") and pushes them in
its epoch-stamped control requests: the LeaderAndIsr that opens a topic's partitions here carries
the topic's settings, and an UpdateMetadata carries them again whenever they change (AlterConfigs,
a new cluster default). What it sends is what it decides: the topic's own values and the
cluster's dynamic and static defaults, by Kafka's names; Kafka's own defaults are left to this
broker's settings. The broker resolves nothing. `take(topic, pushed)` keeps them as a
`TopicSettings`: the broker's `LogConfig` with the topic's retention, segment, flush, size,
timestamp, compression and compaction settings put in, plus min.insync.replicas for the partition
state. The replica manager puts a change into force on the partitions open here.

Rules:
- Each set pushed is parsed once (`settings_from`); the same set again (every LeaderAndIsr naming
  the topic carries it) changes nothing and is not parsed again.
- A value that cannot be used is left out, with one WARNING naming it: that setting keeps the
  broker's default and every other setting (min.insync.replicas among them) stays in force, so a
  partition opens, and one bad value never weakens the rest.
- A topic is forgotten when its last partition here is deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from .storage import LogConfig, LogConfigError

log = logging.getLogger("epochlog.broker")

# Kafka's topic setting -> LogConfig field. The rest of LogConfig stays the broker's.
LOG_SETTINGS = {"retention.ms": "retention_ms", "retention.bytes": "retention_bytes",
                "segment.bytes": "segment_bytes", "segment.ms": "segment_ms",
                "segment.index.bytes": "segment_index_bytes",
                "index.interval.bytes": "index_interval_bytes",
                "flush.messages": "flush_messages", "flush.ms": "flush_ms",
                "max.message.bytes": "max_message_bytes",
                "cleanup.policy": "cleanup_policy",
                "min.cleanable.dirty.ratio": "min_cleanable_dirty_ratio",
                "delete.retention.ms": "delete_retention_ms",
                "min.compaction.lag.ms": "min_compaction_lag_ms",
                "message.timestamp.type": "timestamp_type",
                "compression.type": "compression_type",
                "message.timestamp.before.max.ms": "timestamp_before_max_ms",
                "message.timestamp.after.max.ms": "timestamp_after_max_ms"}
# Kafka's deprecated single bound: both of the above, where they are not given themselves.
TIMESTAMP_DIFFERENCE = "message.timestamp.difference.max.ms"
MIN_INSYNC = "min.insync.replicas"
MIN_INSYNC_DEFAULT = 1


@dataclass(frozen=True)
class TopicSettings:
    log: LogConfig
    min_insync_replicas: int = MIN_INSYNC_DEFAULT


def settings_from(defaults: LogConfig, described: Mapping[str, str | None]
                  ) -> tuple[TopicSettings, list[str]]:
    """The broker's defaults with the given values put in, and why each value that could not
    be used was left out (not an integer, or one LogConfig refuses): that setting keeps the
    broker's default, the others are in force."""
    described = dict(described)
    difference = described.get(TIMESTAMP_DIFFERENCE)
    for bound in ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms"):
        if difference is not None and described.get(bound) is None:
            described[bound] = difference
    problems: list[str] = []
    changes: dict[str, Any] = {}
    for name, field in LOG_SETTINGS.items():
        if described.get(name) is not None:
            try:
                changes[field] = _PARSERS.get(name, _integer)(name, described[name])
            except ValueError as exc:
                problems.append(str(exc))
    try:
        config = msgspec.structs.replace(defaults, **changes)
    except LogConfigError:
        config = defaults  # one at a time, to keep every value LogConfig takes
        for field, value in changes.items():
            try:
                config = msgspec.structs.replace(config, **{field: value})
            except LogConfigError as exc:
                problems.append(str(exc))
    min_insync = MIN_INSYNC_DEFAULT
    if described.get(MIN_INSYNC) is not None:
        try:
            min_insync = max(MIN_INSYNC_DEFAULT, _integer(MIN_INSYNC, described[MIN_INSYNC]))
        except ValueError as exc:
            problems.append(str(exc))
    return TopicSettings(config, min_insync), problems


def _integer(name: str, value: str | None) -> int:
    try:
        return int(value or "")
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def _ratio(name: str, value: str | None) -> float:
    try:
        return float(value or "")
    except ValueError:
        raise ValueError(f"{name}={value!r} is not a number") from None


def _policy(name: str, value: str | None) -> str:
    """Kafka's list form, e.g. "compact, delete" -> "compact,delete" (LogConfig checks it)."""
    return ",".join(part.strip().lower() for part in (value or "").split(","))


def _text(name: str, value: str | None) -> str:
    return (value or "").strip()


_PARSERS = {"cleanup.policy": _policy, "min.cleanable.dirty.ratio": _ratio,
            "message.timestamp.type": _text, "compression.type": _text}


class TopicConfigs:
    def __init__(self, defaults: LogConfig) -> None:
        self.defaults = TopicSettings(defaults)
        self._known: dict[str, TopicSettings] = {}
        self._pushed: dict[str, dict[str, str]] = {}  # topic -> its settings as last pushed

    def get(self, topic: str) -> TopicSettings:
        return self._known.get(topic, self.defaults)

    def knows(self, topic: str) -> bool:
        return topic in self._known

    def forget(self, topic: str) -> None:
        self._pushed.pop(topic, None)
        if self._known.pop(topic, None) is not None:
            log.info("topic %s: settings forgotten (no partition of it left here)", topic)

    def take(self, topic: str, pushed: Mapping[str, str]) -> bool:
        """The topic's settings as a control request carried them. True when the settings in
        force for the topic changed (its open partitions must take them)."""
        if self._pushed.get(topic) == pushed:
            return False
        self._pushed[topic] = dict(pushed)
        settings, problems = settings_from(self.defaults.log, pushed)
        if problems:
            log.warning("topic %s: settings from the controller left out (the broker's defaults "
                        "stand for them, the others are in force): %s", topic, "; ".join(problems))
        before = self._known.get(topic)
        self._known[topic] = settings
        if before != settings:
            log.info("topic %s: settings %s", topic, describe(settings))
        return settings != (self.defaults if before is None else before)


def describe(settings: TopicSettings) -> str:
    """For log lines: the topic settings a broker applies, by Kafka's names."""
    parts = [f"{name}={getattr(settings.log, field)}" for name, field in LOG_SETTINGS.items()]
    return ", ".join([*parts, f"{MIN_INSYNC}={settings.min_insync_replicas}"])
