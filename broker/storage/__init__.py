"""The storage engine: partition logs of segments, their indexes, the leader epoch cache, producer
state, checkpoints and crash recovery, in Kafka's on-disk formats.

Synchronous plain Python with an injected clock (ms): the broker's asyncio code calls it, and a
deterministic simulation can drive it. Modules, bottom up: config, errors, descriptors (the
open-files limit and running out of it), disk_health, checkpoints, open_files (the bounded cache
of log file descriptors), durability, epoch_cache, indexes, txn_index, segment, segment_swap,
producer_state, producer_snapshots, truncations, log, log_manager, cleaner.
"""

from .config import LogConfig
from .disk_health import DiskHealth
from .epoch_cache import EpochEntry, LeaderEpochCache
from .errors import (
                     AppendRefused,
                     CorruptCheckpoint,
                     CorruptLog,
                     CorruptRecords,
                     DescriptorsExhausted,
                     DiskWriteFailed,
                     DuplicateSequence,
                     InconsistentIdentity,
                     InvalidProducerEpoch,
                     InvalidRecord,
                     InvalidTimestamp,
                     LogConfigError,
                     LogDeleted,
                     OffsetOutOfRange,
                     OffsetsNotIncreasing,
                     OutOfOrderSequence,
                     RecordError,
                     RecordsRefused,
                     RecordTooLarge,
                     StorageError,
)
from .log import AppendInfo, FlushJob, Log, StaleLeaderEpoch
from .log_manager import LogManager

__all__ = [
    "AppendInfo", "AppendRefused", "CorruptCheckpoint", "CorruptLog", "CorruptRecords",
    "DescriptorsExhausted", "DiskHealth", "DiskWriteFailed", "DuplicateSequence", "EpochEntry",
    "FlushJob",
    "InconsistentIdentity", "InvalidProducerEpoch",
    "InvalidRecord", "LeaderEpochCache", "Log", "LogConfig", "LogConfigError", "LogDeleted",
    "LogManager",
    "InvalidTimestamp", "OffsetOutOfRange", "OffsetsNotIncreasing", "OutOfOrderSequence",
    "RecordError", "RecordTooLarge", "RecordsRefused", "StaleLeaderEpoch", "StorageError",
]
