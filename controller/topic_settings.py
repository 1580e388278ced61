"""The topic settings the controller accepts, by Kafka's names, with their types and bounds.

A topic stores only the settings it was created with (overrides); the rest follow the cluster's
defaults (`ControllerConfig.topic_defaults`), as in Kafka. Values travel and are stored as strings,
Kafka's way; `check` refuses a bad one with a message naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

LONG_MAX = 2**63 - 1
INT_MAX = 2**31 - 1

# Kafka's DescribeConfigs config_type numbers.
TYPE_BOOLEAN, TYPE_INT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST = 1, 3, 5, 6, 7
CLEANUP_POLICIES = ("compact", "delete")


@dataclass(frozen=True)
class SettingSpec:
    config_type: int
    low: int = 0
    high: int = LONG_MAX
    doc: str = ""
    choices: tuple[str, ...] = ()  # TYPE_LIST: the words allowed (each at most once)


SPECS: dict[str, SettingSpec] = {
    "retention.ms": SettingSpec(TYPE_LONG, -1, doc="How long to keep a segment; -1: forever."),
    "retention.bytes": SettingSpec(TYPE_LONG, -1, doc="Bytes to keep per partition; -1: no limit."),
    "segment.bytes": SettingSpec(TYPE_INT, 14, INT_MAX, doc="Largest segment file."),
    "segment.ms": SettingSpec(TYPE_LONG, 1, doc="Roll a segment after this long."),
    "min.insync.replicas": SettingSpec(TYPE_INT, 1, INT_MAX,
                                       doc="In-sync replicas an acks=all write needs."),
    "unclean.leader.election.enable": SettingSpec(
        TYPE_BOOLEAN, doc="Elect a replica outside the ISR when no ISR member is alive."),
    "cleanup.policy": SettingSpec(
        TYPE_LIST, choices=CLEANUP_POLICIES,
        doc="delete (retention), compact (keep the latest record per key), or both."),
    "min.cleanable.dirty.ratio": SettingSpec(
        TYPE_DOUBLE, 0, 1, doc="Dirty share of a compacted log that makes it worth cleaning."),
    "delete.retention.ms": SettingSpec(
        TYPE_LONG, 0, doc="How long a tombstone outlives its first cleaning."),
    "min.compaction.lag.ms": SettingSpec(
        TYPE_LONG, 0, doc="A record stays uncompacted at least this long."),
}


def check(configs: Mapping[str, str | None]) -> tuple[str | None, dict[str, str]]:
    """(None, normalized overrides) or (the reason, {}) for the first bad setting."""
    out: dict[str, str] = {}
    for name, value in configs.items():
        spec = SPECS.get(name)
        if spec is None:
            return f"unknown topic setting {name!r} (known: {', '.join(sorted(SPECS))})", {}
        if value is None:  # Kafka: a null value means "use the default"
            continue
        normalized = _normalize(spec, value.strip())
        if normalized is None:
            return f"topic setting {name}={value!r}: {_expectation(spec)}", {}
        out[name] = normalized
    return None, out


def _normalize(spec: SettingSpec, value: str) -> str | None:
    if spec.config_type == TYPE_BOOLEAN:
        low = value.lower()
        return low if low in ("true", "false") else None
    if spec.config_type == TYPE_LIST:
        words = [w.strip().lower() for w in value.split(",")]
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


def _expectation(spec: SettingSpec) -> str:
    if spec.config_type == TYPE_BOOLEAN:
        return "expected true or false"
    if spec.config_type == TYPE_LIST:
        return f"expected one or more of {', '.join(spec.choices)}, comma-separated"
    if spec.config_type == TYPE_DOUBLE:
        return f"expected a number from {spec.low} to {spec.high}"
    return f"expected an integer from {spec.low} to {spec.high}"


def is_true(value: str | None) -> bool:
    return value is not None and value.lower() == "true"
