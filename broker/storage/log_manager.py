"""`LogManager`: one data dir: its partition logs, its checkpoints and its identity.

Files at the top of the data dir:
- `meta.properties`: `version=0`, `broker.id=N`, `cluster.id=X` (Kafka's layout). Opening a data dir
  that names another broker or cluster is refused (InconsistentIdentity).
- `replication-offset-checkpoint` (high watermarks), `recovery-point-offset-checkpoint` (offsets up
  to which each log is fsynced), `log-start-offset-checkpoint`; see checkpoints.py.
- `.kafka_cleanshutdown`: written (and fsynced) by close() after every log is flushed and every
  checkpoint written; removed on open before anything is appended. Its absence on open means the
  last run crashed, so each log recovers from its recovery point.

A checkpoint that is corrupt is not read as numbers: the manager logs which file and why, and
rebuilds safely: no recovery point means recovering whole logs; no log start offset means the first
segment's base offset; no high watermark means the log start offset (the leader re-learns it).

Partition folders are `<topic>-<partition>`; a folder ending in `-delete` is a deletion that a crash
interrupted and is finished on open.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from ..clock import Clock
from .checkpoints import (
    HIGH_WATERMARK_FILE,
    LOG_START_OFFSET_FILE,
    RECOVERY_POINT_FILE,
    TopicPartition,
    fsync_dir,
    read_offsets,
    write_atomically,
    write_offsets,
)
from .config import LogConfig
from .descriptors import is_exhaustion
from .disk_health import DiskHealth
from .errors import CorruptCheckpoint, DescriptorsExhausted, DiskWriteFailed, InconsistentIdentity
from .log import FlushJob, Log
from .open_files import FILES_MAX_DEFAULT, OpenFiles
from .truncations import Truncations

IDENTITY_FILE = "meta.properties"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_SUFFIX = "-delete"
CHECKPOINT_INTERVAL_MS = 5000  # Kafka's replica.high.watermark.checkpoint.interval.ms
RETENTION_CHECK_INTERVAL_MS = 300_000  # Kafka's log.retention.check.interval.ms
CLOSE_FLUSH_THREADS = 8  # fsyncs at a clean stop run on this many threads
CLOSE_FLUSH_BATCH = 64  # logs whose flush jobs (and descriptors) are out at once at close
IDENTITY_BYTES_MAX = 64 << 10

log = logging.getLogger("epochlog.storage")


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> TopicPartition | None:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit() or name.startswith("."):
        return None
    return topic, int(partition)


class LogManager:
    def __init__(self, data_dir: str, config: LogConfig, clock: Clock,
                 retention_check_interval_ms: int = RETENTION_CHECK_INTERVAL_MS,
                 files_max: int = FILES_MAX_DEFAULT) -> None:
        """Use LogManager.open."""
        assert retention_check_interval_ms > 0, retention_check_interval_ms
        self.data_dir = data_dir
        # Every log's segment and index descriptors: a bounded cache (open_files.py).
        self.files = OpenFiles(files_max)
        self.config = config
        self.clock = clock
        self.retention_check_interval_ms = retention_check_interval_ms
        self.logs: dict[TopicPartition, Log] = {}
        self.disk = DiskHealth(data_dir, clock)
        self.truncations = Truncations(data_dir)
        self.had_clean_shutdown = False
        # The broker generation the clean-shutdown marker names (KIP-966), -1 if none.
        self.previous_broker_epoch = -1
        # Logs whose recovery at open cut records below their checkpointed high watermark: they
        # may no longer hold what their ISR committed (replicas.py takes them offline until the
        # controller has taken them out of the ISR).
        self.cut_at_open: set[TopicPartition] = set()
        self._last_checkpoint_ms = clock()
        self._written: dict[str, dict[TopicPartition, int]] = {}  # checkpoint -> what it holds
        self._unflushed: set[Log] = set()  # logs told us they have something to flush
        self._creating = False  # inside creating_logs
        self._created_unsynced = False  # a log was created there: the data dir needs an fsync
        self._last_retention_ms = clock()

    @classmethod
    def open(cls, data_dir: str, config: LogConfig, clock: Clock, *, broker_id: int,
             cluster_id: str, configs: dict[str, LogConfig] | None = None,
             retention_check_interval_ms: int = RETENTION_CHECK_INTERVAL_MS,
             files_max: int = FILES_MAX_DEFAULT) -> LogManager:
        """Open (or create) a data dir; configs gives per-topic settings; files_max bounds the
        log files open at once (descriptors.py)."""
        self = cls(data_dir, config, clock, retention_check_interval_ms, files_max)
        os.makedirs(data_dir, exist_ok=True)
        check_identity(data_dir, broker_id, cluster_id)
        marker = os.path.join(data_dir, CLEAN_SHUTDOWN_FILE)
        self.had_clean_shutdown = os.path.exists(marker)
        if self.had_clean_shutdown:
            self.previous_broker_epoch = _marker_epoch(marker)
        recovery_points = self._read_checkpoint(RECOVERY_POINT_FILE)
        start_offsets = self._read_checkpoint(LOG_START_OFFSET_FILE)
        high_watermarks = self._read_checkpoint(HIGH_WATERMARK_FILE)
        for name in sorted(os.listdir(data_dir)):
            path = os.path.join(data_dir, name)
            if name.endswith(DELETE_SUFFIX) and os.path.isdir(path):
                shutil.rmtree(path)
                continue
            tp = parse_partition_dir_name(name)
            if tp is None or not os.path.isdir(path):
                continue
            self.logs[tp] = opened = Log.open(
                path, (configs or {}).get(tp[0], config), clock,
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp, 0),
                high_watermark=high_watermarks.get(tp, 0),
                clean_shutdown=self.had_clean_shutdown, files=self.files)
            self._adopt(opened)
            if opened.log_end_offset < high_watermarks.get(tp, 0):
                self.cut_at_open.add(tp)
                self.truncations.record(
                    name, opened.log_end_offset, high_watermarks[tp],
                    "recovery at start cut the log below its checkpointed high watermark")
        if self.had_clean_shutdown:
            os.unlink(marker)
        fsync_dir(data_dir)
        self.write_checkpoints()
        log.info("opened data dir %s: %d logs, %s", data_dir, len(self.logs),
                 "after a clean shutdown" if self.had_clean_shutdown else "after a crash")
        return self

    def _read_checkpoint(self, name: str) -> dict[TopicPartition, int]:
        path = os.path.join(self.data_dir, name)
        if not os.path.exists(path):
            return {}
        try:
            return read_offsets(path)
        except CorruptCheckpoint as e:
            log.warning("%s; ignoring it and rebuilding safely", e)
            return {}

    # --- logs ---

    def _adopt(self, opened: Log) -> None:
        """A log of this data dir: its disk health, truncation record and flush tracking."""
        opened.disk, opened.truncations = self.disk, self.truncations
        opened.on_unflushed = self._unflushed.add
        if opened.has_unflushed:
            self._unflushed.add(opened)

    def unflushed(self) -> list[Log]:
        """The logs with something to flush (the periodic flush looks at these, not at all);
        those flushed since are forgotten here."""
        done = [each for each in self._unflushed if each.deleted or not each.has_unflushed]
        self._unflushed.difference_update(done)
        return list(self._unflushed)

    def get(self, topic: str, partition: int) -> Log | None:
        return self.logs.get((topic, partition))

    def get_or_create(self, topic: str, partition: int, config: LogConfig | None = None) -> Log:
        existing = self.logs.get((topic, partition))
        if existing is not None:
            return existing
        path = os.path.join(self.data_dir, partition_dir_name(topic, partition))
        created = Log.open(path, config or self.config, self.clock, clean_shutdown=True,
                           files=self.files, sync_parent=not self._creating)
        self._created_unsynced = self._created_unsynced or self._creating
        self._adopt(created)
        self.logs[(topic, partition)] = created
        log.info("created log %s", path)
        return created

    @contextlib.contextmanager
    def creating_logs(self) -> Iterator[None]:
        """Logs created inside share one fsync of the data dir, at the end, instead of one each
        (a LeaderAndIsr slice of 200 new partitions: 200 fsyncs of a folder of thousands of
        entries were most of the time it took, issue 33). The caller must not let anything
        depend on those logs being durable before the end (no await inside). A refused fsync
        is counted as the data dir's failure: its writes are refused until the disk takes them
        again, and the next start recovers."""
        assert not self._creating, "creating_logs does not nest"
        self._creating = True
        try:
            yield
        finally:
            self._creating = False
            if self._created_unsynced:
                self._created_unsynced = False
                try:
                    fsync_dir(self.data_dir)
                except OSError as exc:
                    self.disk.failed(f"new log folders in {self.data_dir}", exc)

    def reconfigure(self, topic: str, partition: int, config: LogConfig) -> bool:
        """Give an open log other settings (its topic's); they apply from its next append and
        retention check. False if there is no such log or nothing changes."""
        found = self.logs.get((topic, partition))
        if found is None or found.config == config:
            return False
        found.config = config
        log.info("%s: settings changed: segment_bytes=%d segment_ms=%d retention_ms=%d "
                 "retention_bytes=%d", found.directory, config.segment_bytes, config.segment_ms,
                 config.retention_ms, config.retention_bytes)
        return True

    def delete_log(self, topic: str, partition: int) -> None:
        """Remove a partition's log: renamed aside first, so a crash cannot leave half of it."""
        removed = self.logs.pop((topic, partition), None)
        if removed is None:
            return
        removed.deleted = True
        self._unflushed.discard(removed)
        removed.close(snapshot=False)  # its folder goes: a snapshot there would be fsynced away
        aside = f"{removed.directory}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
        os.rename(removed.directory, aside)
        fsync_dir(self.data_dir)
        shutil.rmtree(aside)
        log.info("deleted log %s", removed.directory)

    # --- periodic work ---

    def tick(self) -> None:
        """Flush what is due (logs with auto_flush), apply retention, write checkpoints, each on
        its own interval; close the log files unused for a while."""
        now_ms = self.clock()
        for each in self.unflushed():
            if each.auto_flush:
                with contextlib.suppress(DiskWriteFailed, DescriptorsExhausted):  # counted or
                    # said (descriptors.py); tried again next tick
                    each.maybe_flush()
        if now_ms - self._last_retention_ms >= self.retention_check_interval_ms:
            self._last_retention_ms = now_ms
            for each in self.logs.values():
                each.delete_retained_segments()
        if now_ms - self._last_checkpoint_ms >= CHECKPOINT_INTERVAL_MS:
            self.write_checkpoints()
        self.files.close_idle()  # idle partitions hold no descriptor (open_files.py)

    def write_checkpoints(self) -> bool:
        """Write the three offset checkpoints; False if the disk refused one (it is counted in
        `disk`, the old file stays whole, and the next interval tries again)."""
        self._last_checkpoint_ms = self.clock()
        written = [
            self._write(HIGH_WATERMARK_FILE,
                        {tp: lg.high_watermark for tp, lg in self.logs.items()}),
            self._write(RECOVERY_POINT_FILE,
                        {tp: lg.recovery_point for tp, lg in self.logs.items()}),
            self._write(LOG_START_OFFSET_FILE,
                        {tp: lg.log_start_offset for tp, lg in self.logs.items()})]
        if all(written):
            self.disk.succeeded()
        return all(written)

    def _write(self, name: str, offsets: dict[TopicPartition, int]) -> bool:
        """Write one checkpoint, unless the file already holds these offsets: an idle broker
        with 10,000 partitions would format, fsync and rename three files of 10,000 lines every
        interval, on the event loop, to say nothing new (issue 33)."""
        if self._written.get(name) == offsets:
            return True
        path = os.path.join(self.data_dir, name)
        self._written.pop(name, None)  # a write that fails may leave either version
        try:
            write_offsets(path, offsets)
        except OSError as exc:
            self.disk.failed(f"checkpoint {path}", exc)
            return False
        self._written[name] = offsets
        return True

    def close(self, broker_epoch: int = -1) -> None:
        """Clean shutdown: flush every log, write the checkpoints, then the marker, which names
        the broker generation that shut down (KIP-966). On a disk that refuses writes the marker
        is left out, so the next start recovers the logs."""
        snapshots = sum(each.close_snapshot(sync=False) for each in self.logs.values())
        flushed = self._flush_all(list(self.logs.values()))
        flushed = self.write_checkpoints() and flushed
        for each in self.logs.values():
            each.close(snapshot=False)  # taken above, and flushed with the rest
        self.files.close_all()
        log.info("data dir %s: %d logs flushed, %d producer snapshots written", self.data_dir,
                 len(self.logs), snapshots)
        if flushed:
            try:
                write_atomically(os.path.join(self.data_dir, CLEAN_SHUTDOWN_FILE),
                                 json.dumps({"version": 0, "brokerEpoch": broker_epoch}).encode())
            except OSError as exc:
                self.disk.failed("the clean-shutdown marker", exc)
                flushed = False
        if flushed:
            log.info("closed data dir %s cleanly", self.data_dir)
        else:
            log.warning("closed data dir %s without its clean-shutdown marker (the disk refused "
                        "writes): the next start recovers the logs", self.data_dir)


    def _flush_all(self, logs: list[Log]) -> bool:
        """Flush every log, CLOSE_FLUSH_BATCH at a time, their fsyncs on CLOSE_FLUSH_THREADS
        threads (one after another, 10,000 logs' fsyncs took most of a clean stop); False if
        one was refused (the clean-shutdown marker is then left out: the next start recovers).
        A batch at a time bounds the descriptors held by flush jobs."""
        flushed = True
        with ThreadPoolExecutor(CLOSE_FLUSH_THREADS, thread_name_prefix="close-flush") as pool:
            for first in range(0, len(logs), CLOSE_FLUSH_BATCH):
                jobs = []
                for each in logs[first:first + CLOSE_FLUSH_BATCH]:
                    try:
                        jobs.append((each, each.begin_flush()))
                    except (DiskWriteFailed, DescriptorsExhausted):  # counted or said
                        flushed = False
                for (each, job), exc in zip(jobs, pool.map(_fsyncs, [j for _, j in jobs]),
                                            strict=True):
                    if exc is None:
                        each.end_flush(job)
                    elif is_exhaustion(exc):
                        each.flush_not_done(job, exc)
                        flushed = False
                    else:
                        self.disk.failed(f"fsync in {each.directory} at close", exc)
                        flushed = False
        return flushed


def _fsyncs(job: FlushJob) -> OSError | None:
    """A flush job's fsyncs (on a pool thread): the error, not raised, for the loop above."""
    try:
        job.run()
    except OSError as exc:
        return exc
    return None


def read_identity(path: str) -> dict[str, str]:
    with open(path, "rb") as f:
        data = f.read(IDENTITY_BYTES_MAX + 1)
    if len(data) > IDENTITY_BYTES_MAX or not data.endswith(b"\n"):
        raise CorruptCheckpoint(path, "too large or cut short")
    fields = {}
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise CorruptCheckpoint(path, f"line {line!r} is not key=value")
        fields[key.strip()] = value.strip()
    if fields.get("version") != "0" or "broker.id" not in fields or "cluster.id" not in fields:
        raise CorruptCheckpoint(path, "needs version=0, broker.id and cluster.id")
    return fields


def check_identity(data_dir: str, broker_id: int, cluster_id: str) -> None:
    """Refuse a data dir that belongs to another broker or cluster; claim a new one."""
    path = os.path.join(data_dir, IDENTITY_FILE)
    if not os.path.exists(path):
        write_atomically(path, (f"#epochlog data dir identity\nversion=0\nbroker.id={broker_id}\n"
                                f"cluster.id={cluster_id}\n").encode())
        return
    fields = read_identity(path)
    if fields["broker.id"] != str(broker_id) or fields["cluster.id"] != cluster_id:
        raise InconsistentIdentity(
            f"{path} belongs to broker {fields['broker.id']} of cluster {fields['cluster.id']}, "
            f"not broker {broker_id} of cluster {cluster_id}")


def _marker_epoch(path: str) -> int:
    """The broker epoch in a clean-shutdown marker (Kafka's JSON, {"version": 0, "brokerEpoch":
    N}); -1 for an empty or unreadable one (written before epochs were kept there)."""
    try:
        with open(path, "rb") as f:
            epoch = json.loads(f.read() or b"{}").get("brokerEpoch", -1)
    except (OSError, ValueError, AttributeError):
        return -1
    return epoch if isinstance(epoch, int) else -1
