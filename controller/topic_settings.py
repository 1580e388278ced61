"""The topic settings the controller accepts: every topic-level config Kafka documents, by Kafka's
names, with Kafka's types, defaults, bounds and allowed values.

A topic stores only the settings it was created or altered with (overrides); the rest follow
the cluster's defaults (`ControllerConfig.topic_defaults`, which the brokers apply too) or,
below those, Kafka's own defaults, as in Kafka. Values travel and are stored as strings, Kafka's
way; `check` refuses a bad one with a message naming it and what was expected. `effective`
resolves a topic's settings, for DescribeConfigs and, through `decided`, for the control requests
that carry them to brokers: the one place where that precedence is written.

`acted_on` says whether epochlog changes its behaviour for a setting. The others (tiered storage,
replication throttles, preallocation, down-conversion, ...) are accepted, validated, stored and
described, so tools that create topics with them work, and have no effect; docs/settings.md lists
them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .model import TopicPolicy

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# Kafka's DescribeConfigs config_type numbers.
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 2, 3, 5, 6, 7
CLEANUP_POLICIES = ("compact", "delete")
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
DAY_MS = 24 * 60 * 60 * 1000


@dataclass(frozen=True)
class SettingSpec:
    config_type: int
    default: str  # Kafka's default
    low: float = 0
    high: float = LONG_MAX
    doc: str = ""
    choices: tuple[str, ...] = ()  # STRING: one of them; LIST: one or more, each at most once
    broker_name: str | None = None  # the broker setting Kafka takes the default from (synonym)
    acted_on: bool = True
    free_list: bool = False  # LIST of free-form items (replication throttles)


def _long(default: int, low: int = 0, doc: str = "", broker: str | None = None,
          acted_on: bool = True) -> SettingSpec:
    return SettingSpec(TYPE_LONG, str(default), low, LONG_MAX, doc, broker_name=broker,
                       acted_on=acted_on)


def _int(default: int, low: int = 0, high: int = INT_MAX, doc: str = "",
         broker: str | None = None, acted_on: bool = True) -> SettingSpec:
    return SettingSpec(TYPE_INT, str(default), low, high, doc, broker_name=broker,
                       acted_on=acted_on)


def _bool(default: bool, doc: str, broker: str | None = None, acted_on: bool = True
          ) -> SettingSpec:
    return SettingSpec(TYPE_BOOLEAN, "true" if default else "false", doc=doc, broker_name=broker,
                       acted_on=acted_on)


SPECS: dict[str, SettingSpec] = {
    "cleanup.policy": SettingSpec(
        TYPE_LIST, "delete", choices=CLEANUP_POLICIES, broker_name="log.cleanup.policy",
        doc="delete (retention), compact (keep the latest record per key), or both."),
    "compression.type": SettingSpec(
        TYPE_STRING, "producer", choices=COMPRESSION_TYPES, broker_name="compression.type",
        doc="The codec batches are stored with; producer keeps the producer's."),
    "compression.gzip.level": _int(-1, -1, 9, "gzip level for compression.type=gzip.",
                                   "compression.gzip.level", acted_on=False),
    "compression.lz4.level": _int(9, 1, 17, "lz4 level for compression.type=lz4.",
                                  "compression.lz4.level", acted_on=False),
    "compression.zstd.level": _int(3, -131072, 22, "zstd level for compression.type=zstd.",
                                   "compression.zstd.level", acted_on=False),
    "delete.retention.ms": _long(DAY_MS, 0, "How long a tombstone outlives its first cleaning.",
                                 "log.cleaner.delete.retention.ms"),
    "file.delete.delay.ms": _long(60_000, 0, "Delay before a deleted segment's file goes.",
                                  "log.segment.delete.delay.ms", acted_on=False),
    "flush.messages": _long(LONG_MAX, 1, "fsync after this many messages.",
                            "log.flush.interval.messages"),
    "flush.ms": _long(LONG_MAX, 0, "fsync after this long.", "log.flush.interval.ms"),
    "follower.replication.throttled.replicas": SettingSpec(
        TYPE_LIST, "", free_list=True, acted_on=False,
        broker_name="follower.replication.throttled.replicas",
        doc="Replicas throttled on the follower side: partition:broker,... or *."),
    "index.interval.bytes": _int(4096, 0, doc="Bytes between offset index entries.",
                                 broker="log.index.interval.bytes", acted_on=False),
    "leader.replication.throttled.replicas": SettingSpec(
        TYPE_LIST, "", free_list=True, acted_on=False,
        broker_name="leader.replication.throttled.replicas",
        doc="Replicas throttled on the leader side: partition:broker,... or *."),
    "local.retention.bytes": _long(-2, -2, "Tiered storage: bytes kept locally.",
                                   "log.local.retention.bytes", acted_on=False),
    "local.retention.ms": _long(-2, -2, "Tiered storage: time kept locally.",
                                "log.local.retention.ms", acted_on=False),
    "max.compaction.lag.ms": _long(LONG_MAX, 1, "A record stays uncompacted at most this long.",
                                   "log.cleaner.max.compaction.lag.ms", acted_on=False),
    "max.message.bytes": _int(1048588, 0, doc="Largest record batch a producer may send.",
                              broker="message.max.bytes"),
    "message.downconversion.enable": _bool(True, "Down-convert for old consumers.",
                                           "log.message.downconversion.enable", acted_on=False),
    "message.format.version": SettingSpec(
        TYPE_STRING, "3.0-IV1", broker_name="log.message.format.version", acted_on=False,
        doc="Deprecated: record format v2 is always used."),
    "message.timestamp.after.max.ms": _long(
        LONG_MAX, 0, "Refuse batches timestamped further in the future than this.",
        "log.message.timestamp.after.max.ms"),
    "message.timestamp.before.max.ms": _long(
        LONG_MAX, 0, "Refuse batches timestamped further in the past than this.",
        "log.message.timestamp.before.max.ms"),
    "message.timestamp.difference.max.ms": _long(
        LONG_MAX, 0, "Deprecated: both bounds at once (before and after).",
        "log.message.timestamp.difference.max.ms"),
    "message.timestamp.type": SettingSpec(
        TYPE_STRING, "CreateTime", choices=TIMESTAMP_TYPES,
        broker_name="log.message.timestamp.type",
        doc="CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's."),
    "min.cleanable.dirty.ratio": SettingSpec(
        TYPE_DOUBLE, "0.5", 0, 1, broker_name="log.cleaner.min.cleanable.ratio",
        doc="Dirty share of a compacted log that makes it worth cleaning."),
    "min.compaction.lag.ms": _long(0, 0, "A record stays uncompacted at least this long.",
                                   "log.cleaner.min.compaction.lag.ms"),
    "min.insync.replicas": _int(1, 1, doc="In-sync replicas an acks=all write needs.",
                                broker="min.insync.replicas"),
    "preallocate": _bool(False, "Preallocate segment files.", "log.preallocate",
                         acted_on=False),
    "remote.storage.enable": _bool(False, "Tiered storage (not in epochlog).", acted_on=False),
    "retention.bytes": _long(-1, -1, "Bytes to keep per partition; -1: no limit.",
                             "log.retention.bytes"),
    "retention.ms": _long(7 * DAY_MS, -1, "How long to keep a segment; -1: forever.",
                          "log.retention.ms"),
    "segment.bytes": _int(1 << 30, 14, doc="Largest segment file.", broker="log.segment.bytes"),
    "segment.index.bytes": _int(10 << 20, 4, doc="Largest offset index file.",
                                broker="log.index.size.max.bytes", acted_on=False),
    "segment.jitter.ms": _long(0, 0, "Random jitter subtracted from segment.ms.",
                               "log.roll.jitter.ms", acted_on=False),
    "segment.ms": _long(7 * DAY_MS, 1, "Roll a segment after this long.", "log.roll.ms"),
    "unclean.leader.election.enable": _bool(
        False, "Elect a replica outside the ISR when no ISR member is alive.",
        "unclean.leader.election.enable"),
}


def check(configs: Mapping[str, str | None]) -> tuple[str | None, dict[str, str]]:
    """(None, normalized overrides) or (the reason, {}) for the first bad setting. A null value
    means "back to the default" and is left out."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        spec = SPECS.get(name)
        if spec is None:
            return f"unknown topic setting {name!r}", {}
        if value is None:
            continue
        normalized = normalize(spec, value.strip())
        if normalized is None:
            return f"topic setting {name}={value!r}: {_expectation(spec)}", {}
        out[name] = normalized
    return None, out


def normalize(spec: SettingSpec, value: str) -> str | None:
    if spec.config_type == TYPE_BOOLEAN:
        low = value.lower()
        return low if low in ("true", "false") else None
    if spec.config_type == TYPE_STRING:
        if not spec.choices:
            return value if value else None
        by_lower = {c.lower(): c for c in spec.choices}
        return by_lower.get(value.lower())
    if spec.config_type == TYPE_LIST:
        words = [w.strip() for w in value.split(",")] if value else []
        if spec.free_list:
            return ",".join(words) if all(_throttle_item(w) for w in words) else None
        words = [w.lower() for w in words]
        ok = words and set(words) <= set(spec.choices) and len(set(words)) == len(words)
        return ",".join(words) if ok else None
    if spec.config_type == TYPE_DOUBLE:
        try:
            ratio = float(value)
        except ValueError:
            return None
        return repr(ratio) if spec.low <= ratio <= spec.high else None
    try:
        number = int(value)
    except ValueError:
        return None
    return str(number) if spec.low <= number <= spec.high else None


def _throttle_item(item: str) -> bool:
    """Kafka's throttled-replicas items: "*", or PARTITION:BROKER."""
    if item == "*":
        return True
    partition, _, broker = item.partition(":")
    return partition.isdigit() and broker.isdigit()


def _expectation(spec: SettingSpec) -> str:
    if spec.config_type == TYPE_BOOLEAN:
        return "expected true or false"
    if spec.config_type == TYPE_STRING:
        return f"expected one of {', '.join(spec.choices)}" if spec.choices else \
            "expected a non-empty string"
    if spec.config_type == TYPE_LIST:
        if spec.free_list:
            return "expected * or a comma-separated list of PARTITION:BROKER"
        return f"expected one or more of {', '.join(spec.choices)}, comma-separated"
    if spec.config_type == TYPE_DOUBLE:
        return f"expected a number from {spec.low:g} to {spec.high:g}"
    return f"expected an integer from {int(spec.low)} to {int(spec.high)}"


def is_true(value: str | None) -> bool:
    return value is not None and value.lower() == "true"


def policy(decided_settings: Mapping[str, str]) -> TopicPolicy:
    """The settings the controller acts on, typed, from a topic's decided settings (values
    `check` accepted, so they parse; a value that does not keeps Kafka's default)."""
    try:
        min_isr = max(1, int(decided_settings.get("min.insync.replicas", "1")))
    except ValueError:
        min_isr = 1
    return TopicPolicy(min_insync_replicas=min_isr, unclean_leader_election=is_true(
        decided_settings.get("unclean.leader.election.enable")))


# Kafka's DescribeConfigs config_source numbers.
SOURCE_TOPIC, SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC_BROKER, SOURCE_DEFAULT = 1, 3, 4, 5
# What the controller decides for a topic, and pushes to its brokers (`decided`): the topic's own
# value, the cluster's dynamic default, the cluster's static default. Kafka's defaults
# (DEFAULT_CONFIG) are left to each broker's own settings, as Kafka's brokers do.
DECIDED_SOURCES = frozenset({SOURCE_TOPIC, SOURCE_DYNAMIC_DEFAULT, SOURCE_STATIC_BROKER})

# Kafka's broker setting -> the topic setting it is the default of (log.retention.ms ->
# retention.ms): the names a dynamic cluster-wide default is set under.
BROKER_SYNONYMS = {spec.broker_name: name for name, spec in SPECS.items() if spec.broker_name}


@dataclass(frozen=True)
class Effective:
    """One setting as a topic has it: the value in force, where it comes from (SOURCE_*), and
    Kafka's synonyms, strongest first: (name, value, source)."""

    name: str
    value: str
    source: int
    synonyms: tuple[tuple[str, str, int], ...]


def effective(overrides: Mapping[str, str], cluster_defaults: Mapping[str, str],
              dynamic_defaults: Mapping[str, str] | None = None) -> list[Effective]:
    """Every setting of a topic with these overrides, by name. A dynamic cluster default
    (AlterConfigs on the default BROKER resource) is DYNAMIC_DEFAULT_BROKER_CONFIG. A cluster
    default from the controller's own settings that differs from Kafka's is
    STATIC_BROKER_CONFIG, named as Kafka's broker setting. The rest are Kafka's defaults
    (DEFAULT_CONFIG), which a broker replaces with its own settings where it has them
    (log.segment.bytes, ...), as Kafka's brokers do."""
    out = []
    for name, spec in sorted(SPECS.items()):
        broker_name = spec.broker_name or name
        chain: list[tuple[str, str, int]] = []
        if name in overrides:
            chain.append((name, overrides[name], SOURCE_TOPIC))
        if dynamic_defaults and name in dynamic_defaults:
            chain.append((broker_name, dynamic_defaults[name], SOURCE_DYNAMIC_DEFAULT))
        if name in cluster_defaults and cluster_defaults[name] != spec.default:
            chain.append((broker_name, cluster_defaults[name], SOURCE_STATIC_BROKER))
        chain.append((broker_name, spec.default, SOURCE_DEFAULT))
        out.append(Effective(name, chain[0][1], chain[0][2], tuple(chain)))
    return out


def decided(overrides: Mapping[str, str], cluster_defaults: Mapping[str, str],
            dynamic_defaults: Mapping[str, str] | None = None) -> dict[str, str]:
    """A topic's settings as the controller decides them (`effective`'s, from DECIDED_SOURCES),
    by name: what its control requests carry to brokers, which resolve nothing themselves."""
    return {e.name: e.value for e in effective(overrides, cluster_defaults, dynamic_defaults)
            if e.source in DECIDED_SOURCES}
