"""The source's and sink's options: named and meant as in Spark's Kafka connector, checked at once.

Spark hands a Python data source its options in a case-insensitive dict whose keys come out
lower-cased (`subscribePattern` is `subscribepattern`), so every name is looked up lower-cased
and named back to the user in its documented spelling. Every option is checked when the source
or sink is built, before any job runs: an unknown name, a bad value, or two options that
contradict each other is a `ValueError` naming the option (Spark shows it from `load()` or
`save()`).

`kafka.*` options are the client's settings under Kafka's Java names (`kafka.client.rack` is the
Consumer's `client_rack`), as Spark's connector passes them to its Java client. Those that make
no sense here are refused with the reason, as Spark refuses them: deserializers (rows are bytes;
cast in Spark), `auto.offset.reset` (startingOffsets says where to start), `enable.auto.commit`
and `group.id` (the source joins no group: offsets live in Spark's checkpoint).

Pure functions of the options: no I/O, so the tests check every error without Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from epochlog.client.types import TopicPartition

EARLIEST, LATEST = -2, -1  # as in Spark's offsets JSON

# Spark's names for the read options, keyed by their lower-cased form.
READ_OPTIONS = {name.lower(): name for name in (
    "assign", "subscribe", "subscribePattern",
    "startingOffsets", "endingOffsets",
    "startingTimestamp", "endingTimestamp",
    "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "failOnDataLoss", "maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay",
    "minPartitions", "maxRecordsPerPartition", "includeHeaders",
    "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries", "fetchOffset.retryIntervalMs",
)}
WRITE_OPTIONS = {name.lower(): name for name in (
    "topic", "deliveryGuarantee", "transactionalIdPrefix")}
# deliveryGuarantee's values (as Flink's Kafka sink names them); exactly-once: exactly_once.py
AT_LEAST_ONCE, EXACTLY_ONCE = "at-least-once", "exactly-once"
TRANSACTIONAL_ID_PREFIX = "epochlog-spark"
# Spark's own options, which it passes to a sink with the user's: the sink has no use for them
ENGINE_OPTIONS = {name.lower(): name for name in ("checkpointLocation",)}
STREAM_ONLY = ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay")
BATCH_ONLY = ("endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp")

# Kafka's Java setting -> (the client's keyword, its type)
CONSUMER_SETTINGS: dict[str, tuple[str, type]] = {
    "bootstrap.servers": ("bootstrap_servers", str),
    "client.id": ("client_id", str),
    "client.rack": ("client_rack", str),
    "fetch.min.bytes": ("fetch_min_bytes", int),
    "fetch.max.wait.ms": ("fetch_max_wait_ms", int),
    "fetch.max.bytes": ("fetch_max_bytes", int),
    "max.partition.fetch.bytes": ("max_partition_fetch_bytes", int),
    "isolation.level": ("isolation_level", str),
    "check.crcs": ("check_crcs", bool),
    "request.timeout.ms": ("request_timeout_ms", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "reconnect.backoff.ms": ("reconnect_backoff_ms", int),
    "reconnect.backoff.max.ms": ("reconnect_backoff_max_ms", int),
    "metadata.max.age.ms": ("metadata_max_age_ms", int),
}
PRODUCER_SETTINGS: dict[str, tuple[str, type]] = {
    "bootstrap.servers": ("bootstrap_servers", str),
    "client.id": ("client_id", str),
    "acks": ("acks", str),
    "enable.idempotence": ("enable_idempotence", bool),
    "compression.type": ("compression_type", str),
    "batch.size": ("batch_size", int),
    "linger.ms": ("linger_ms", int),
    "max.in.flight.requests.per.connection": ("max_in_flight_requests_per_connection", int),
    "retries": ("retries", int),
    "retry.backoff.ms": ("retry_backoff_ms", int),
    "delivery.timeout.ms": ("delivery_timeout_ms", int),
    "request.timeout.ms": ("request_timeout_ms", int),
    "buffer.memory": ("buffer_memory", int),
    "max.block.ms": ("max_block_ms", int),
    "max.request.size": ("max_request_size", int),
    "metadata.max.age.ms": ("metadata_max_age_ms", int),
    "transaction.timeout.ms": ("transaction_timeout_ms", int),
}
REFUSED_SETTINGS = {
    "group.id": "the source joins no consumer group: it reads by assignment and keeps its "
                "offsets in Spark's checkpoint",
    "auto.offset.reset": "set the source option startingOffsets instead",
    "enable.auto.commit": "the source commits nothing to the cluster: offsets live in Spark's "
                          "checkpoint",
    "key.deserializer": "keys are always bytes: cast the column in Spark (CAST(key AS STRING))",
    "value.deserializer": "values are always bytes: cast the column in Spark",
    "key.serializer": "write key as a binary or string column",
    "value.serializer": "write value as a binary or string column",
    "interceptor.classes": "the client has no interceptors",
    "transactional.id": "with deliveryGuarantee=exactly-once the sink gives each task its own "
                        "transactional id; name their prefix with transactionalIdPrefix",
}
GROUP_OPTIONS = {"groupidprefix": "groupIdPrefix"}

POLL_TIMEOUT_MS = 120_000  # Spark's default kafkaConsumer.pollTimeoutMs (spark.network.timeout)
FETCH_RETRIES = 3
FETCH_RETRY_INTERVAL_MS = 10


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end in one partition: EARLIEST, LATEST, an offset (with the leader
    epoch of the record before it, if known), or a timestamp in ms."""

    offset: int = LATEST
    epoch: int | None = None
    timestamp_ms: int | None = None


@dataclass(frozen=True)
class Topics:
    """What to read: assign (fixed partitions), subscribe (topics) or subscribePattern."""

    assign: tuple[TopicPartition, ...] = ()
    subscribe: tuple[str, ...] = ()
    pattern: str | None = None

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.subscribe or any(tp.topic == topic for tp in self.assign)


@dataclass(frozen=True)
class ReadOptions:
    topics: Topics
    starting: OffsetSpec | dict[TopicPartition, OffsetSpec]
    ending: OffsetSpec | dict[TopicPartition, OffsetSpec]
    timestamp_strategy: str = "error"  # startingOffsetsByTimestampStrategy: error or latest
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    include_headers: bool = False
    poll_timeout_ms: int = POLL_TIMEOUT_MS
    fetch_retries: int = FETCH_RETRIES
    fetch_retry_interval_ms: int = FETCH_RETRY_INTERVAL_MS
    consumer: dict[str, Any] = field(default_factory=dict)  # Consumer keyword arguments


@dataclass(frozen=True)
class WriteOptions:
    topic: str | None
    producer: dict[str, Any] = field(default_factory=dict)  # Producer keyword arguments
    exactly_once: bool = False  # deliveryGuarantee=exactly-once (streaming only)
    transactional_id_prefix: str = TRANSACTIONAL_ID_PREFIX


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """The options as a plain dict with lower-cased names (what Spark's dict does anyway)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def parse_read(raw: Mapping[str, str], streaming: bool | None) -> ReadOptions:
    """streaming None: batch or stream is not known yet (the schema is asked first); the
    checks that depend on it wait for reader() or streamReader()."""
    options = lower_keys(raw)
    _check_names(options, READ_OPTIONS, CONSUMER_SETTINGS, "source")
    only = () if streaming is None else STREAM_ONLY if not streaming else BATCH_ONLY
    for name in only:
        if name.lower() in options:
            kind = "streaming (readStream)" if name in STREAM_ONLY else "batch (read)"
            raise ValueError(f"option {name} applies to {kind} queries only")
    consumer = _client_settings(options, CONSUMER_SETTINGS)
    topics = _topics(options)
    starting = _starting(options, streaming)
    ending: OffsetSpec | dict[TopicPartition, OffsetSpec] = OffsetSpec(LATEST)
    if not streaming:
        ending = _ending(options)
    strategy = options.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in ("error", "latest"):
        raise ValueError(f"option startingOffsetsByTimestampStrategy must be 'error' or "
                         f"'latest', not {strategy!r}")
    max_per = _positive(options, "maxOffsetsPerTrigger")
    min_per = _positive(options, "minOffsetsPerTrigger")
    if max_per is not None and min_per is not None and min_per > max_per:
        raise ValueError(f"option minOffsetsPerTrigger ({min_per}) is larger than "
                         f"maxOffsetsPerTrigger ({max_per})")
    if "maxtriggerdelay" in options and min_per is None:
        raise ValueError("option maxTriggerDelay needs minOffsetsPerTrigger (it bounds how "
                         "long a trigger waits for that many records)")
    return ReadOptions(
        topics=topics, starting=starting, ending=ending, timestamp_strategy=strategy,
        fail_on_data_loss=_bool(options, "failOnDataLoss", True),
        max_offsets_per_trigger=max_per, min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=_duration_ms(options.get("maxtriggerdelay", "15m"),
                                          "maxTriggerDelay"),
        min_partitions=_positive(options, "minPartitions"),
        max_records_per_partition=_positive(options, "maxRecordsPerPartition"),
        include_headers=_bool(options, "includeHeaders", False),
        poll_timeout_ms=_positive(options, "kafkaConsumer.pollTimeoutMs") or POLL_TIMEOUT_MS,
        fetch_retries=_positive(options, "fetchOffset.numRetries") or FETCH_RETRIES,
        fetch_retry_interval_ms=_positive(options, "fetchOffset.retryIntervalMs")
        or FETCH_RETRY_INTERVAL_MS,
        consumer=consumer)


def parse_write(raw: Mapping[str, str]) -> WriteOptions:
    options = lower_keys(raw)
    _check_names(options, WRITE_OPTIONS, PRODUCER_SETTINGS, "sink")
    producer = _client_settings(options, PRODUCER_SETTINGS)
    producer.setdefault("acks", "all")
    idempotent = producer.setdefault("enable_idempotence", True)
    if idempotent and str(producer["acks"]) not in ("all", "-1"):
        raise ValueError(f"option kafka.acks={producer['acks']} contradicts "
                         "kafka.enable.idempotence=true (the sink's default): an idempotent "
                         "producer needs acks=all; set kafka.enable.idempotence=false to use "
                         "another acks")
    topic = options.get("topic")
    if topic is not None and not topic.strip():
        raise ValueError("option topic is empty")
    guarantee = options.get("deliveryguarantee", AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise ValueError(f"option deliveryGuarantee is {guarantee!r}: {AT_LEAST_ONCE} (the "
                         f"default) or {EXACTLY_ONCE}")
    exactly_once = guarantee == EXACTLY_ONCE
    if exactly_once and not idempotent:
        raise ValueError("option kafka.enable.idempotence=false contradicts "
                         "deliveryGuarantee=exactly-once (transactions are idempotent)")
    prefix = options.get("transactionalidprefix", TRANSACTIONAL_ID_PREFIX).strip()
    if not prefix:
        raise ValueError("option transactionalIdPrefix is empty")
    if "transactionalidprefix" in options and not exactly_once:
        raise ValueError("option transactionalIdPrefix applies with "
                         "deliveryGuarantee=exactly-once only")
    return WriteOptions(topic=topic, producer=producer, exactly_once=exactly_once,
                        transactional_id_prefix=prefix)


# ------------------------------------------------------------------------------- helpers
def _check_names(options: Mapping[str, str], known: Mapping[str, str],
                 settings: Mapping[str, tuple[str, type]], what: str) -> None:
    if "kafka.bootstrap.servers" not in options:
        raise ValueError(f"option kafka.bootstrap.servers is required (the {what}'s "
                         "bootstrap brokers, e.g. 127.0.0.1:9092)")
    for name in options:
        if name.startswith("kafka."):
            setting = name[len("kafka."):]
            if setting in REFUSED_SETTINGS:
                raise ValueError(f"option kafka.{setting} is not supported: "
                                 f"{REFUSED_SETTINGS[setting]}")
            if setting not in settings:
                raise ValueError(f"option kafka.{setting} is not a setting the {what} knows; "
                                 f"known: {', '.join('kafka.' + s for s in sorted(settings))}")
        elif name in GROUP_OPTIONS:
            raise ValueError(f"option {GROUP_OPTIONS[name]} is not supported: "
                             f"{REFUSED_SETTINGS['group.id']}")
        elif name not in known and not (known is WRITE_OPTIONS and name in ENGINE_OPTIONS):
            other = READ_OPTIONS if known is WRITE_OPTIONS else WRITE_OPTIONS
            hint = (f" ({other[name]} is a {'source' if other is READ_OPTIONS else 'sink'} "
                    "option)") if name in other else ""
            raise ValueError(f"unknown option {name!r} for the epochlog {what}{hint}; known: "
                             f"{', '.join(sorted(known.values()))} and kafka.*")


def _client_settings(options: Mapping[str, str], settings: Mapping[str, tuple[str, type]]
                     ) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in options.items():
        if not name.startswith("kafka."):
            continue
        keyword, kind = settings[name[len("kafka."):]]
        if kind is int:
            out[keyword] = _int(value, name)
        elif kind is bool:
            out[keyword] = _parse_bool(value, name)
        else:
            out[keyword] = value
    servers = [s.strip() for s in out["bootstrap_servers"].split(",") if s.strip()]
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"option kafka.bootstrap.servers: {server!r} is not host:port")
    if not servers:
        raise ValueError("option kafka.bootstrap.servers is empty")
    out["bootstrap_servers"] = servers
    return out


def _topics(options: Mapping[str, str]) -> Topics:
    given = [READ_OPTIONS[n] for n in ("assign", "subscribe", "subscribepattern")
             if n in options]
    if len(given) != 1:
        raise ValueError("exactly one of the options assign, subscribe and subscribePattern "
                         f"must be given, not {' and '.join(given) if given else 'none'}")
    if "assign" in options:
        return Topics(assign=tuple(sorted(_assign(options["assign"]))))
    if "subscribe" in options:
        names = tuple(t.strip() for t in options["subscribe"].split(",") if t.strip())
        if not names:
            raise ValueError("option subscribe names no topic")
        return Topics(subscribe=names)
    pattern = options["subscribepattern"]
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"option subscribePattern: {pattern!r} is not a regular expression: "
                         f"{exc}") from None
    return Topics(pattern=pattern)


def _assign(text: str) -> list[TopicPartition]:
    parsed = _json(text, "assign")
    if not isinstance(parsed, dict) or not parsed or not all(
            isinstance(ps, list) and ps and all(isinstance(p, int) and p >= 0 for p in ps)
            for ps in parsed.values()):
        raise ValueError('option assign must be JSON like {"topic": [0, 1]}: partitions per '
                         f"topic, not {text!r}")
    return [TopicPartition(t, p) for t, ps in parsed.items() for p in ps]


def _starting(options: Mapping[str, str], streaming: bool | None
              ) -> OffsetSpec | dict[TopicPartition, OffsetSpec]:
    # Spark's precedence: startingTimestamp, then startingOffsetsByTimestamp, then
    # startingOffsets.
    if "startingtimestamp" in options:
        return OffsetSpec(timestamp_ms=_int(options["startingtimestamp"], "startingTimestamp"))
    if "startingoffsetsbytimestamp" in options:
        return _by_timestamp(options["startingoffsetsbytimestamp"],
                             "startingOffsetsByTimestamp")
    text = options.get("startingoffsets", "latest" if streaming else "earliest")
    spec = _offsets(text, "startingOffsets")
    if streaming is False:
        latest = [f"{tp.topic}-{tp.partition}" for tp, s in _items(spec) if s.offset == LATEST]
        if latest:
            raise ValueError("option startingOffsets: latest (-1) is not a valid start for a "
                             f"batch query ({', '.join(latest)}): it would read nothing")
    return spec


def _ending(options: Mapping[str, str]) -> OffsetSpec | dict[TopicPartition, OffsetSpec]:
    if "endingtimestamp" in options:
        return OffsetSpec(timestamp_ms=_int(options["endingtimestamp"], "endingTimestamp"))
    if "endingoffsetsbytimestamp" in options:
        return _by_timestamp(options["endingoffsetsbytimestamp"], "endingOffsetsByTimestamp")
    spec = _offsets(options.get("endingoffsets", "latest"), "endingOffsets")
    earliest = [f"{tp.topic}-{tp.partition}" for tp, s in _items(spec) if s.offset == EARLIEST]
    if earliest:
        raise ValueError("option endingOffsets: earliest (-2) is not a valid end for a batch "
                         f"query ({', '.join(earliest)})")
    return spec


def _items(spec: OffsetSpec | dict[TopicPartition, OffsetSpec]
           ) -> list[tuple[TopicPartition, OffsetSpec]]:
    if isinstance(spec, OffsetSpec):
        return [(TopicPartition("*", -1), spec)]
    return sorted(spec.items())


def _offsets(text: str, name: str) -> OffsetSpec | dict[TopicPartition, OffsetSpec]:
    word = text.strip().lower()
    if word == "earliest":
        return OffsetSpec(EARLIEST)
    if word == "latest":
        return OffsetSpec(LATEST)
    parsed = _json(text, name)
    if not isinstance(parsed, dict) or not parsed:
        raise ValueError(f"option {name} must be earliest, latest or JSON like "
                         f'{{"topic": {{"0": 42, "1": -2}}}}, not {text!r}')
    out: dict[TopicPartition, OffsetSpec] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"option {name}: topic {topic!r} must map partitions to offsets")
        for partition, value in partitions.items():
            tp = TopicPartition(topic, _partition(partition, name))
            if isinstance(value, dict):  # {"offset": 42, "epoch": 3}
                unknown = set(value) - {"offset", "epoch"}
                offset, epoch = value.get("offset"), value.get("epoch")
                if unknown or not isinstance(offset, int) or not (
                        epoch is None or isinstance(epoch, int) and epoch >= 0):
                    raise ValueError(f"option {name}: {topic}-{partition} must be an offset or "
                                     f'{{"offset": N, "epoch": E}}, not {json.dumps(value)}')
                if offset < 0 and epoch is not None:
                    raise ValueError(f"option {name}: {topic}-{partition} gives an epoch with "
                                     f"offset {offset}; an epoch goes with a real offset")
                out[tp] = OffsetSpec(offset, epoch)
            elif isinstance(value, int) and not isinstance(value, bool):
                out[tp] = OffsetSpec(value)
            else:
                raise ValueError(f"option {name}: {topic}-{partition} must be an offset, not "
                                 f"{json.dumps(value)}")
            if out[tp].offset < EARLIEST:
                raise ValueError(f"option {name}: {topic}-{partition} offset {out[tp].offset} "
                                 "is not an offset, -1 (latest) or -2 (earliest)")
    return out


def _by_timestamp(text: str, name: str) -> dict[TopicPartition, OffsetSpec]:
    parsed = _json(text, name)
    if not isinstance(parsed, dict) or not parsed:
        raise ValueError(f'option {name} must be JSON like {{"topic": {{"0": 1700000000000}}}}')
    out = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise ValueError(f"option {name}: topic {topic!r} must map partitions to "
                             "timestamps")
        for partition, ts in partitions.items():
            if not isinstance(ts, int) or isinstance(ts, bool) or ts < 0:
                raise ValueError(f"option {name}: {topic}-{partition} must be a timestamp in "
                                 f"ms, not {json.dumps(ts)}")
            out[TopicPartition(topic, _partition(partition, name))] = OffsetSpec(
                timestamp_ms=ts)
    return out


def _partition(text: str, name: str) -> int:
    if not text.isdigit():
        raise ValueError(f"option {name}: partition {text!r} is not a number")
    return int(text)


def _json(text: str, name: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"option {name} is not valid JSON ({exc}): {text!r}") from None


def _int(text: str, name: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"option {name} must be a whole number, not {text!r}") from None


def _positive(options: Mapping[str, str], name: str) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return None
    value = _int(text, name)
    if value <= 0:
        raise ValueError(f"option {name} must be positive, not {value}")
    return value


def _parse_bool(text: str, name: str) -> bool:
    word = text.strip().lower()
    if word not in ("true", "false"):
        raise ValueError(f"option {name} must be true or false, not {text!r}")
    return word == "true"


def _bool(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name.lower())
    return default if text is None else _parse_bool(text, name)


_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|min|h|d)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(text: str, name: str) -> int:
    """Spark's durations: "15m", "30s", "500ms"; a bare number is in ms."""
    match = _DURATION.match(text.lower())
    if match is None:
        raise ValueError(f"option {name} must be a duration like 30s, 15m or 500ms, not "
                         f"{text!r}")
    return int(match.group(1)) * _UNIT_MS[match.group(2) or "ms"]
