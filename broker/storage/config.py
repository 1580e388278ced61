"""`LogConfig`: the per-log settings, with Kafka's topic-config names in snake_case.

Validated on construction (and when decoded with msgspec): a bad value raises LogConfigError naming
the setting. Defaults are Kafka's except `flush_ms` (see below).

Flush policy. Kafka's defaults never fsync (flush.messages = flush.ms = Long.MAX) and rely on
replication. Ours keep `flush_messages` at "never" but fsync every `flush_ms` = 1000 ms, so a power
loss of every replica loses at most about a second of acknowledged writes; a SIGKILL of the process
loses nothing, since every append has reached the page cache before it returns.
"""

from __future__ import annotations

import msgspec

from .errors import LogConfigError

LONG_MAX = 2**63 - 1
MS_PER_DAY = 24 * 60 * 60 * 1000
SEGMENT_BYTES_MIN = 14  # Kafka's floor: room for one empty batch's log overhead
INDEX_ENTRY_BYTES_MAX = 12  # a time index entry; an index must hold at least one
CLEANUP_POLICIES = ("delete", "compact")  # cleanup_policy: one or both, comma-separated
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
# compression.type -> the codec id batches are stored with (None: the producer's).
COMPRESSION_CODECS = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3,
                      "zstd": 4}
COMPRESSION_TYPES = tuple(COMPRESSION_CODECS)


class LogConfig(msgspec.Struct, kw_only=True, frozen=True):
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * MS_PER_DAY
    segment_index_bytes: int = 10 << 20
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * MS_PER_DAY  # -1: keep forever
    retention_bytes: int = -1  # -1: no size limit
    flush_messages: int = LONG_MAX  # LONG_MAX: never fsync by count
    flush_ms: int = 1000  # LONG_MAX: never fsync by time
    cleanup_policy: str = "delete"
    max_message_bytes: int = (1 << 20) + 12  # Kafka's 1048588: 1 MiB plus the log overhead
    # Compaction (cleaner.py), with cleanup_policy "compact" or "compact,delete".
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = MS_PER_DAY  # how long a tombstone outlives its first cleaning
    min_compaction_lag_ms: int = 0  # a segment newer than this is never cleaned
    # message.timestamp.*: "LogAppendTime" stamps batches with the leader's clock; with
    # "CreateTime" a batch timestamped more than before/after max ms from now is refused.
    timestamp_type: str = "CreateTime"
    # compression.type: "producer" keeps each batch as the producer compressed it; a codec
    # ("uncompressed", "gzip", ...) makes the leader recompress batches that differ.
    compression_type: str = "producer"
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX

    def __post_init__(self) -> None:
        _at_least("segment_bytes", self.segment_bytes, SEGMENT_BYTES_MIN)
        _at_most("segment_bytes", self.segment_bytes, 2**31 - 1)  # positions are int32
        _at_least("segment_ms", self.segment_ms, 1)
        _at_least("segment_index_bytes", self.segment_index_bytes, INDEX_ENTRY_BYTES_MAX)
        _at_least("index_interval_bytes", self.index_interval_bytes, 0)
        _at_least("retention_ms", self.retention_ms, -1)
        _at_least("retention_bytes", self.retention_bytes, -1)
        _at_least("flush_messages", self.flush_messages, 1)
        _at_least("flush_ms", self.flush_ms, 0)
        _at_least("max_message_bytes", self.max_message_bytes, 0)
        _at_least("delete_retention_ms", self.delete_retention_ms, 0)
        _at_least("min_compaction_lag_ms", self.min_compaction_lag_ms, 0)
        _at_least("timestamp_before_max_ms", self.timestamp_before_max_ms, 0)
        _at_least("timestamp_after_max_ms", self.timestamp_after_max_ms, 0)
        if self.compression_type not in COMPRESSION_TYPES:
            raise LogConfigError(f"compression_type must be one of "
                                 f"{', '.join(COMPRESSION_TYPES)}, got {self.compression_type!r}")
        if self.timestamp_type not in TIMESTAMP_TYPES:
            raise LogConfigError(f"timestamp_type must be one of {', '.join(TIMESTAMP_TYPES)}, "
                                 f"got {self.timestamp_type!r}")
        ratio = self.min_cleanable_dirty_ratio
        if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not 0 <= ratio <= 1:
            raise LogConfigError(f"min_cleanable_dirty_ratio must be from 0 to 1, got {ratio!r}")
        policies = self.cleanup_policy.split(",")
        if not set(policies) <= set(CLEANUP_POLICIES) or len(set(policies)) != len(policies):
            raise LogConfigError(f"cleanup_policy {self.cleanup_policy!r} is not supported "
                                 f"(supported: {', '.join(CLEANUP_POLICIES)}, or both "
                                 "comma-separated)")

    @property
    def compact(self) -> bool:
        """Key-based compaction applies (cleaner.py); produced records must have keys."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def codec(self) -> int | None:
        """The codec the leader stores batches with; None: as the producer sent them."""
        return COMPRESSION_CODECS[self.compression_type]

    @property
    def log_append_time(self) -> bool:
        return self.timestamp_type == "LogAppendTime"

    @property
    def delete(self) -> bool:
        """Retention (retention_ms, retention_bytes) deletes old segments."""
        return "delete" in self.cleanup_policy.split(",")


def _at_least(name: str, value: int, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise LogConfigError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise LogConfigError(f"{name} must be at least {minimum}, got {value}")


def _at_most(name: str, value: int, maximum: int) -> None:
    if value > maximum:
        raise LogConfigError(f"{name} must be at most {maximum}, got {value}")
