"""The "epochlog" Spark data source: batch and streaming reads, and the sink (pipeline.sink).

Where each piece runs, which decides what it may hold:

- `EpochlogDataSource` is built from the options wherever Spark needs it (the driver's Python
  planner processes) and pickled to executors: it holds the options and nothing else.
- `BatchReader.partitions()` runs once in a planner process: it asks the cluster for the
  offsets (a Lookup it opens and closes) and returns one `RangePartition` per piece of work.
  `read()` runs on executors (pipeline.partition_reader).
- `StreamReader` has two lives. Spark keeps one instance in a long-lived Python process on the
  driver for the whole query and calls initialOffset, latestOffset, partitions and commit on it
  each trigger: that one keeps a Lookup (an event loop and an Admin) between calls. Another
  instance is built in a planner process and pickled to executors for read(): so the Lookup is
  made on first use, never in __init__, and is left out of pickling.

Options are parsed and checked when the source is built (pipeline.options), so a bad one fails
`load()` before any job runs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from epochlog.client.types import TopicPartition

from . import planning
from .lookup import Lookup, now_ms
from .options import EARLIEST, OffsetSpec, ReadOptions, Topics, parse_read
from .partition_reader import DataLossError, ReaderSettings, read_range
from .planning import OffsetRange, Position
from .schema import source_schema

log = logging.getLogger("epochlog.pipeline")


class RangePartition(InputPartition):
    """One task's work: an offset range of one partition (picklable)."""

    def __init__(self, rng: OffsetRange) -> None:
        super().__init__(rng)
        self.rng = rng

    def __repr__(self) -> str:
        r = self.rng
        return (f"RangePartition({r.tp.topic}-{r.tp.partition} [{r.start}, {r.end}) epoch "
                f"{r.start_epoch})")


class EpochlogDataSource(DataSource):
    """spark.read / readStream / write / writeStream .format("epochlog")."""

    @classmethod
    def name(cls) -> str:
        return "epochlog"

    def schema(self) -> StructType:
        # Checked here too (batch or stream is not known yet), so load() names a bad option
        if "topic" in _lower(self.options):  # a sink's options: writer() checks them
            return source_schema(False)
        return source_schema(parse_read(self.options, streaming=None).include_headers)

    def reader(self, schema: StructType) -> BatchReader:
        return BatchReader(parse_read(self.options, streaming=False))

    def streamReader(self, schema: StructType) -> StreamReader:
        return StreamReader(parse_read(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        from .sink import BatchWriter

        return BatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from .sink import StreamWriter

        return StreamWriter(self.options, schema, overwrite)


def _lower(options: Mapping[str, str]) -> set[str]:
    return {str(k).lower() for k in options}


def _settings(options: ReadOptions) -> ReaderSettings:
    return ReaderSettings(consumer=dict(options.consumer),
                          fail_on_data_loss=options.fail_on_data_loss,
                          include_headers=options.include_headers,
                          poll_timeout_ms=options.poll_timeout_ms)


def _specs(spec: OffsetSpec | dict[TopicPartition, OffsetSpec],
           tps: Sequence[TopicPartition], default: OffsetSpec) -> dict[TopicPartition,
                                                                       OffsetSpec]:
    """Per partition: a spec for all, or the JSON's entry (default for partitions it omits,
    as Spark does for startingOffsets)."""
    if isinstance(spec, OffsetSpec):
        return dict.fromkeys(tps, spec)
    return {tp: spec.get(tp, default) for tp in tps}


def _check_named(spec: OffsetSpec | dict[TopicPartition, OffsetSpec],
                 tps: Sequence[TopicPartition], option: str) -> None:
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(tps))
        if unknown:
            raise ValueError(f"option {option} names partitions the query does not read: "
                             f"{', '.join(f'{tp.topic}-{tp.partition}' for tp in unknown)}")


# ----------------------------------------------------------------------------------- batch
class BatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.settings = _settings(options)

    def partitions(self) -> list[RangePartition]:
        lookup = Lookup(self.options)
        try:
            found = lookup.partitions()
            _check_exist(self.options.topics, found)
            tps = sorted(found)
            _check_named(self.options.starting, tps, "startingOffsets")
            _check_named(self.options.ending, tps, "endingOffsets")
            start = lookup.offsets(_specs(self.options.starting, tps, OffsetSpec(EARLIEST)))
            end = lookup.offsets(_specs(self.options.ending, tps, OffsetSpec()))
        finally:
            lookup.close()
        ranges = []
        for tp in tps:
            if end[tp].offset < start[tp].offset:
                raise ValueError(f"{tp.topic}-{tp.partition}: the ending offset "
                                 f"{end[tp].offset} is before the starting offset "
                                 f"{start[tp].offset}")
            ranges.append(OffsetRange(tp, start[tp].offset, end[tp].offset, start[tp].epoch))
        pieces = planning.split(ranges, self.options.min_partitions,
                                self.options.max_records_per_partition)
        return [RangePartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if type(partition) is InputPartition and partition.value is None:
            # What PySpark hands read() when partitions() planned none: nothing to read
            return iter(())
        assert isinstance(partition, RangePartition), partition
        return read_range(self.settings, partition.rng)


def _check_exist(topics: Topics, found: Mapping[TopicPartition, bool]) -> None:
    """A batch query's topics must exist, as in Spark's Kafka source: `subscribe` of a missing
    topic fails (there, with Kafka's UnknownTopicOrPartitionException; here, naming it), and
    so does `assign` of a missing partition. A `subscribePattern` matching nothing reads
    nothing: an empty DataFrame."""
    missing = sorted(tp for tp, exists in found.items() if not exists)
    if missing:
        raise ValueError("option assign names partitions that do not exist: "
                         + ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing))
    absent = sorted(set(topics.subscribe) - {tp.topic for tp in found})
    if absent:
        raise ValueError(f"option subscribe names topics that do not exist: "
                         f"{', '.join(absent)}")


# ----------------------------------------------------------------------------------- stream
class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.settings = _settings(options)
        self._lookup: Lookup | None = None
        self._last_trigger_ms = now_ms()
        self._available_now: dict[TopicPartition, Position] | None = None
        self._latest: dict[TopicPartition, Position] = {}

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options; the driver's loop and connections stay on the driver
        state = dict(self.__dict__)
        state["_lookup"] = None
        return state

    @property
    def lookup(self) -> Lookup:
        if self._lookup is None:
            self._lookup = Lookup(self.options)
        return self._lookup

    def initialOffset(self) -> dict[str, Any]:
        found = self.lookup.partitions()
        tps = sorted(tp for tp, exists in found.items() if exists)
        _check_named(self.options.starting, tps, "startingOffsets")
        start = self.lookup.offsets(_specs(self.options.starting, tps, OffsetSpec(EARLIEST)))
        return planning.to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self.lookup.latest(sorted(
            tp for tp, exists in self.lookup.partitions().items() if exists))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = planning.from_json(start)
        found = self.lookup.partitions()
        gone = sorted(tp for tp in begin if not found.get(tp, False))
        if gone:
            self._data_loss(f"partitions {', '.join(f'{tp.topic}-{tp.partition}' for tp in gone)}"
                            " are gone (the topic was deleted, or no longer matches)")
        tps = sorted(tp for tp, exists in found.items() if exists)
        latest = self.lookup.latest(tps)
        if self._available_now is not None:
            latest = {tp: min(pos, self._available_now.get(tp, pos)) for tp, pos in
                      latest.items()}
        self._latest = latest
        new = [tp for tp in tps if tp not in begin]
        froms = {tp: pos.offset for tp, pos in begin.items() if tp in latest}
        froms.update({tp: pos.offset for tp, pos in self.lookup.earliest(new).items()})
        end = self._admitted(froms, latest, limit)
        if end is None:
            return start
        return planning.to_json(end)

    def _admitted(self, froms: dict[TopicPartition, int],
                  latest: dict[TopicPartition, Position], limit: ReadLimit
                  ) -> dict[TopicPartition, Position] | None:
        """Spark's admission control: none for ReadAllAvailable (Trigger.Once, AvailableNow);
        else the options' minOffsetsPerTrigger (within maxTriggerDelay) and
        maxOffsetsPerTrigger. None: skip this trigger."""
        if isinstance(limit, ReadAllAvailable):
            return latest
        waiting = planning.available(froms, latest)
        min_rows = self.options.min_offsets_per_trigger
        if min_rows is not None and waiting < min_rows:
            if now_ms() - self._last_trigger_ms < self.options.max_trigger_delay_ms:
                return None
        self._last_trigger_ms = now_ms()
        max_rows = self.options.max_offsets_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_rows = min(limit.max_rows, max_rows or limit.max_rows)
        if max_rows is None:
            return latest
        return planning.rate_limit(froms, latest, max_rows)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return planning.to_json(self._latest) if self._latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[RangePartition]:
        begin = planning.from_json(start)
        until = planning.from_json(end)
        new = [tp for tp in until if tp not in begin]
        if new:
            earliest = self.lookup.earliest(new)
            for tp in new:
                if earliest[tp].offset != 0:
                    self._data_loss(f"added partition {tp.topic}-{tp.partition} starts from "
                                    f"offset {earliest[tp].offset} instead of 0: some of its "
                                    "records were deleted before the query saw it")
            begin.update(earliest)
        ranges = []
        went_back = []
        for tp, stop in sorted(until.items()):
            first = begin[tp]
            if stop.offset < first.offset:
                # The log's end is below the checkpoint: only the executor's validation can
                # say where it diverged (or a data loss, with no epoch)
                went_back.append(OffsetRange(tp, first.offset, stop.offset, first.epoch))
            else:
                ranges.append(OffsetRange(tp, first.offset, stop.offset, first.epoch))
        pieces = planning.split(ranges, self.options.min_partitions,
                                self.options.max_records_per_partition) + went_back
        return [RangePartition(r) for r in pieces]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition), partition
        return read_range(self.settings, partition.rng)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # offsets live in Spark's checkpoint; nothing is committed to the cluster

    def stop(self) -> None:
        if self._lookup is not None:
            self._lookup.close()
            self._lookup = None

    def _data_loss(self, what: str) -> None:
        if self.options.fail_on_data_loss:
            raise DataLossError(f"some data may have been lost: {what}. If you do not want the "
                                "query to fail on such cases, set the source option "
                                "failOnDataLoss to false.")
        log.warning("some data may have been lost: %s (failOnDataLoss=false)", what)
