"""The "epochlog" sink: a DataFrame's rows as records, batch (write) and streaming (writeStream).

Columns, as Spark's Kafka sink takes them: `value` (binary or string, required), `key`
(binary or string), `topic` (string; the `topic` option, when given, wins over it, as in
Spark), `partition` (int: the record goes there, else the producer's partitioner picks by key)
and `headers` (array<struct<key: string, value: binary>>). Other columns are ignored, as Spark
ignores them. The schema is checked when the writer is built, before any job runs.

Each Spark task writes its rows with its own Producer (idempotent, acks=all by default, in its
own event loop; Arrow batches in, so a row costs one send and no Row object), waits for every
acknowledgement, and fails the task if any record was not acknowledged. What that guarantees
(docs/spark.md, "What the writer guarantees"): every row of a successful write or micro-batch
is acknowledged by min.insync.replicas replicas; the producer's own retries never duplicate
(idempotence); a task that Spark runs again (after a failure, or a micro-batch replayed after a
restart) writes its rows again, so the whole is at-least-once, as with Spark's Kafka sink.
With deliveryGuarantee=exactly-once (streaming only), each task writes in a transaction of its
own and a replayed task whose transaction committed writes nothing: exactly_once.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from epochlog.client import Producer
from epochlog.client.producer import DeliveryFuture

from .exactly_once import current_task, write_once
from .lookup import new_event_loop
from .options import WriteOptions, parse_write
from .schema import HEADER_TYPE

log = logging.getLogger("epochlog.pipeline")

COLUMN_TYPES: dict[str, tuple[DataType, ...]] = {
    "value": (BinaryType(), StringType()),
    "key": (BinaryType(), StringType()),
    "topic": (StringType(),),
    "partition": (IntegerType(),),
    "headers": (ArrayType(HEADER_TYPE), ArrayType(HEADER_TYPE, containsNull=False)),
}


@dataclass(frozen=True)
class Written(WriterCommitMessage):
    records: int
    found_written: bool = False  # exactly-once: an earlier attempt had committed this task


def check_schema(schema: StructType, options: WriteOptions) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ValueError("the epochlog sink needs a value column (binary or string); the "
                         f"DataFrame has {', '.join(fields) or 'no columns'}")
    if options.topic is None and "topic" not in fields:
        raise ValueError("the epochlog sink needs the topic option or a topic column")
    for name, allowed in COLUMN_TYPES.items():
        if name in fields and not any(_same_type(fields[name], t) for t in allowed):
            raise ValueError(f"column {name} is {fields[name].simpleString()}; the epochlog "
                             f"sink takes {' or '.join(t.simpleString() for t in allowed)}")


def _same_type(a: DataType, b: DataType) -> bool:
    if isinstance(a, ArrayType) and isinstance(b, ArrayType):
        return _same_type(a.elementType, b.elementType)
    if isinstance(a, StructType) and isinstance(b, StructType):
        return [(f.name, type(f.dataType)) for f in a.fields] == \
            [(f.name, type(f.dataType)) for f in b.fields]
    return type(a) is type(b)


def write_batches(options: WriteOptions, batches: Iterator[Any]) -> Written:
    """Send every row of the Arrow batches and wait for every acknowledgement; with
    deliveryGuarantee=exactly-once, in this task's transaction (exactly_once.py)."""
    loop = new_event_loop()
    try:
        if options.exactly_once:
            task = current_task()
            sent, found = loop.run_until_complete(write_once(
                task, options.transactional_id_prefix, options.producer,
                lambda producer: _send_all(producer, options.topic, batches)))
            if found:
                log.info("epochlog sink: micro-batch %d, task partition %d: committed by an "
                         "earlier attempt, nothing written again", task.batch_id, task.partition)
            return Written(sent, found)
        return Written(loop.run_until_complete(_send_plain(options, batches)))
    finally:
        loop.close()


async def _send_plain(options: WriteOptions, batches: Iterator[Any]) -> int:
    producer = Producer(**{"client_id": "epochlog-spark-writer", **options.producer})
    try:
        await producer.start()
        sent, _ = await _send_all(producer, options.topic, batches)
        return sent
    finally:
        await producer.close()


async def _send_all(producer: Producer, topic_option: str | None, batches: Iterator[Any]
                    ) -> tuple[int, set[str]]:
    """Send every row, wait for every acknowledgement: (records sent, topics written); raises
    if a record was not acknowledged."""
    failures: list[BaseException] = []

    def delivered(future: DeliveryFuture) -> None:
        error = future.exception()
        if error is not None and not failures:
            failures.append(error)

    sent = 0
    topics_written: set[str] = set()
    for batch in batches:
        columns = _columns(batch, topic_option)
        values, keys, topics, partitions, headers = columns
        if topics is not None:
            topics_written.update(topics)
        elif values:
            topics_written.add(topic_option)  # type: ignore[arg-type]
        for i, value in enumerate(values):
            if failures:
                break
            future = await producer.send(
                topics[i] if topics is not None else topic_option,  # type: ignore[arg-type]
                value=_bytes(value), key=_bytes(keys[i]) if keys is not None else None,
                partition=partitions[i] if partitions is not None else None,
                headers=headers[i] if headers is not None else None)
            future.add_done_callback(delivered)
            sent += 1
    await producer.flush()
    if failures:
        raise RuntimeError(f"the epochlog sink: a record was not acknowledged: "
                           f"{failures[0]!r}") from failures[0]
    return sent, topics_written


def _columns(batch: Any, topic_option: str | None) -> tuple[Any, ...]:
    names = set(batch.schema.names)

    def column(name: str) -> Any:
        return batch.column(name).to_pylist() if name in names else None

    topics = None if topic_option is not None else column("topic")
    if topics is not None and any(t is None for t in topics):
        raise ValueError("the epochlog sink: a row's topic is null and no topic option is "
                         "given")
    headers = column("headers")
    if headers is not None:
        headers = [None if hs is None else [(h["key"], h["value"]) for h in hs]
                   for hs in headers]
    return column("value"), column("key"), topics, column("partition"), headers


def _bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, raw: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        if overwrite:
            raise ValueError("the epochlog sink only appends: save mode Overwrite is not "
                             "supported (as with Spark's Kafka sink; use append)")
        self.options = parse_write(raw)
        if self.options.exactly_once:
            raise ValueError("option deliveryGuarantee=exactly-once applies to streaming "
                             "queries (writeStream), whose micro-batches Spark replays by id; a "
                             "batch write that fails has written the rows of its finished tasks")
        check_schema(schema, self.options)

    def write(self, iterator: Iterator[Any]) -> Written:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("epochlog sink: %d records written",
                 sum(m.records for m in messages if isinstance(m, Written)))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning("epochlog sink: the write failed; %d records of its finished tasks were "
                    "written and stay (a log is append-only)",
                    sum(m.records for m in messages if isinstance(m, Written)))


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, raw: Mapping[str, str], schema: StructType, overwrite: bool) -> None:
        # Streaming "complete" mode asks for overwrite; a log cannot be overwritten, and
        # Spark's Kafka sink appends there too.
        self.options = parse_write(raw)
        check_schema(schema, self.options)

    def write(self, iterator: Iterator[Any]) -> Written:
        return write_batches(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = [m for m in messages if isinstance(m, Written)]
        found = sum(m.found_written for m in written)
        log.info("epochlog sink: micro-batch %d: %d records written%s", batchId,
                 sum(m.records for m in written),
                 f" ({found} tasks found committed by an earlier run)" if found else "")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.exactly_once:
            log.warning("epochlog sink: micro-batch %d failed; Spark runs it again, and the "
                        "tasks whose transactions committed write nothing again", batchId)
        else:
            log.warning("epochlog sink: micro-batch %d failed; Spark runs it again, writing "
                        "its rows again (at-least-once)", batchId)
