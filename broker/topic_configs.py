"""`TopicConfigs`: each topic's settings, as the controller holds them, on top of broker defaults.

Theory of operation
-------------------
The controller owns topic settings (docs/control-plane.md, "Topic settings"); a broker learns
them the way any client does: DescribeConfigs (32) for the topic, on its admin connection to the
controller. `ensure(topics)` runs before a LeaderAndIsr opens a partition of a topic not seen yet
(or a topic just created, `is_new`, which may be a re-creation with other settings); one request
covers every topic named. The answer becomes a `TopicSettings`: the broker's `LogConfig` with the
topic's retention.ms, retention.bytes, segment.bytes, segment.ms and its compaction settings
(cleanup.policy, min.cleanable.dirty.ratio, delete.retention.ms, min.compaction.lag.ms) put in,
plus min.insync.replicas for the partition state.

Rules:
- Bounded: `DESCRIBE_TRIES_MAX` tries of at most `DESCRIBE_TRY_MS_MAX` each, well inside the
  controller's request timeout for the LeaderAndIsr that waits on us.
- When no answer comes, or a value cannot be used, the topic gets the broker's defaults and a
  WARNING says so: a partition must open even if its settings cannot be read. That fallback is not
  cached, so the next LeaderAndIsr naming the topic asks again.
- A topic is forgotten when its last partition here is deleted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from epochlog.protocol.apis.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from epochlog.protocol.error_codes import name_of

from .controller_link import ControllerLinkClosed
from .storage import LogConfig, LogConfigError

log = logging.getLogger("epochlog.broker")

DESCRIBE_CONFIGS_KEY = 32
RESOURCE_TOPIC = 2  # Kafka's ConfigResource.Type.TOPIC
# DYNAMIC_TOPIC_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG and STATIC_BROKER_CONFIG: the topic's own
# value, the cluster's dynamic default, the cluster's static default.
DECIDED_SOURCES = frozenset({1, 3, 4})
DESCRIBE_TRIES_MAX = 3
DESCRIBE_TRY_MS_MAX = 2000
DESCRIBE_BACKOFF_MS_MIN = 100
TOPICS_PER_REQUEST_MAX = 1000

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

# (key, version or None for the highest both speak, request) -> answer; ControllerLink.forward.
Fetch = Callable[[int, int | None, Any], Awaitable[Any]]


@dataclass(frozen=True)
class TopicSettings:
    log: LogConfig
    min_insync_replicas: int = MIN_INSYNC_DEFAULT


def settings_from(defaults: LogConfig, described: Mapping[str, str | None]) -> TopicSettings:
    """The broker's defaults with the described values put in. Raises ValueError naming the
    setting for a value that is not an integer or that LogConfig refuses."""
    described = dict(described)
    difference = described.get(TIMESTAMP_DIFFERENCE)
    for bound in ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms"):
        if difference is not None and described.get(bound) is None:
            described[bound] = difference
    changes = {field: _PARSERS.get(name, _integer)(name, described[name])
               for name, field in LOG_SETTINGS.items() if described.get(name) is not None}
    try:
        config = msgspec.structs.replace(defaults, **changes)
    except LogConfigError as exc:
        raise ValueError(str(exc)) from None
    min_insync = described.get(MIN_INSYNC)
    return TopicSettings(config, MIN_INSYNC_DEFAULT if min_insync is None
                         else max(MIN_INSYNC_DEFAULT, _integer(MIN_INSYNC, min_insync)))


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

    def get(self, topic: str) -> TopicSettings:
        return self._known.get(topic, self.defaults)

    def knows(self, topic: str) -> bool:
        return topic in self._known

    def forget(self, topic: str) -> None:
        if self._known.pop(topic, None) is not None:
            log.info("topic %s: settings forgotten (no partition of it left here)", topic)

    async def ensure(self, topics: Iterable[str], fetch: Fetch) -> None:
        """Ask the controller for these topics' settings (bounded); remember what it answers.
        ControllerLinkClosed if the broker stops meanwhile."""
        wanted = sorted(set(topics))
        for start in range(0, len(wanted), TOPICS_PER_REQUEST_MAX):
            chunk = wanted[start:start + TOPICS_PER_REQUEST_MAX]
            answer = await self._describe(chunk, fetch)
            for topic in chunk:
                self._adopt(topic, answer.get(topic) if answer is not None else None)

    async def _describe(self, topics: list[str], fetch: Fetch
                        ) -> dict[str, Mapping[str, str | None] | str] | None:
        """topic -> its settings, or the controller's error text; None if no answer came."""
        request = DescribeConfigsRequest(resources=[
            DescribeConfigsResource(resource_type=RESOURCE_TOPIC, resource_name=t,
                                    configuration_keys=None) for t in topics])
        backoff_ms = DESCRIBE_BACKOFF_MS_MIN
        for attempt in range(1, DESCRIBE_TRIES_MAX + 1):
            try:
                async with asyncio.timeout(DESCRIBE_TRY_MS_MAX / 1000):
                    answer = await fetch(DESCRIBE_CONFIGS_KEY, None, request)
                return {r.resource_name: _result(r) for r in answer.results}
            except ControllerLinkClosed:
                raise  # the broker is stopping: nothing to warn about, nothing to retry
            except (ConnectionError, TimeoutError) as exc:
                log.warning("DescribeConfigs for %d topics failed (try %d/%d): %s", len(topics),
                            attempt, DESCRIBE_TRIES_MAX, exc or type(exc).__name__)
            if attempt < DESCRIBE_TRIES_MAX:
                await asyncio.sleep(backoff_ms / 1000)
                backoff_ms *= 2
        return None

    def _adopt(self, topic: str, described: Mapping[str, str | None] | str | None) -> None:
        if described is None or isinstance(described, str):
            why = described or "the controller did not answer"
            log.warning("topic %s: settings unknown (%s); its logs use the broker's defaults "
                        "until a later LeaderAndIsr names it", topic, why)
            return
        try:
            settings = settings_from(self.defaults.log, described)
        except ValueError as exc:
            log.warning("topic %s: the controller's settings cannot be used (%s); its logs use "
                        "the broker's defaults", topic, exc)
            return
        if self._known.get(topic) != settings:
            log.info("topic %s: settings %s", topic, describe(settings))
        self._known[topic] = settings


def _result(result: Any) -> Mapping[str, str | None] | str:
    """The settings the controller decides: the topic's own and the cluster's defaults. Kafka's
    defaults (DEFAULT_CONFIG) give way to this broker's own settings."""
    if result.error_code != 0:
        return f"{name_of(result.error_code)}: {result.error_message or ''}".rstrip(": ")
    return {c.name: c.value for c in result.configs if c.config_source in DECIDED_SOURCES}


def describe(settings: TopicSettings) -> str:
    """For log lines: the topic settings a broker applies, by Kafka's names."""
    parts = [f"{name}={getattr(settings.log, field)}" for name, field in LOG_SETTINGS.items()]
    return ", ".join([*parts, f"{MIN_INSYNC}={settings.min_insync_replicas}"])
