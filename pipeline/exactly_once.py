"""The sink's exactly-once path (`deliveryGuarantee=exactly-once`, streaming queries): each task of
each micro-batch writes its rows in one Kafka transaction, and a task that runs again for a batch
whose transaction already committed writes nothing.

How (docs/spark.md, "Exactly once"):
- A task's transactional id is `<transactionalIdPrefix>-<query id>-<task partition>`: the query id
  is the one Spark keeps in the checkpoint (the same after a restart), so every run of one task
  partition of one query, any attempt, any batch, uses the same id. `init_transactions()` bumps
  the producer epoch: an earlier attempt still running (a zombie: a retried or speculative task,
  a task of a driver that was killed) is fenced, and its open transaction is aborted.
- The batch's mark: in the same transaction the task commits, for a group named as its
  transactional id, the offset `batch id + 1` on partition 0 of a topic it wrote to
  (`send_offsets_to_transaction`). The mark becomes visible exactly when the rows do.
- Before writing, the task reads its group's committed offsets (require_stable: after the
  fencing above nothing is pending). A mark at or past `batch id + 1` means this batch's rows of
  this task partition are in the log already: the task writes nothing.
So every row appears once to read_committed consumers whatever dies when, provided Spark gives a
replayed batch the same rows in the same task partitions (it does for a deterministic query over
a source that replays by offsets, as ours does). A task's rows become visible when the task
commits, not when the micro-batch does: a batch that fails half way shows its committed tasks'
rows, and its replay adds the rest, once.

Spark hands a task its batch and query ids as local properties (`streaming.sql.batchId`,
`sql.streaming.queryId`), which PySpark's TaskContext gives the Python worker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from epochlog.client import Admin, Producer
from epochlog.client.types import TopicPartition

BATCH_ID_PROPERTY = "streaming.sql.batchId"
QUERY_ID_PROPERTY = "sql.streaming.queryId"
MARK_PARTITION = 0  # every topic has a partition 0


@dataclass(frozen=True)
class Task:
    query_id: str
    batch_id: int
    partition: int
    attempt: int

    def transactional_id(self, prefix: str) -> str:
        return f"{prefix}-{self.query_id}-{self.partition}"


def current_task() -> Task:
    """This Spark task's query, micro-batch, partition and attempt."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the epochlog sink's exactly-once write runs only inside a Spark task")
    batch, query = ctx.getLocalProperty(BATCH_ID_PROPERTY), ctx.getLocalProperty(QUERY_ID_PROPERTY)
    if batch is None or query is None:
        raise RuntimeError("the epochlog sink: deliveryGuarantee=exactly-once needs a streaming "
                           "query (Spark gave this task no micro-batch id)")
    return Task(query_id=query, batch_id=int(batch), partition=ctx.partitionId(),
                attempt=ctx.attemptNumber())


async def last_marked_batch(admin: Admin, group: str) -> int | None:
    """The latest micro-batch whose transaction this task partition committed; None if none."""
    offsets = await admin.list_consumer_group_offsets(group)
    marks = [offset - 1 for offset, _ in offsets.values()]
    return max(marks) if marks else None


async def write_once(task: Task, prefix: str, producer_settings: dict[str, Any],
                     send_rows: Callable[[Producer], Awaitable[tuple[int, set[str]]]]
                     ) -> tuple[int, bool]:
    """Run send_rows(producer) in this task's transaction unless its batch is marked already:
    (records written, whether the batch was found written). send_rows returns (records sent, the
    topics written), having awaited every acknowledgement (it raises on the first failure)."""
    txn_id = task.transactional_id(prefix)
    settings = {**producer_settings, "transactional_id": txn_id}
    settings.setdefault("client_id", f"epochlog-spark-writer-{task.partition}")
    producer = Producer(**settings)
    await producer.start()
    try:
        await producer.init_transactions()  # fences every earlier attempt with this id
        async with Admin(settings["bootstrap_servers"]) as admin:
            marked = await last_marked_batch(admin, txn_id)
        if marked is not None and marked >= task.batch_id:
            return 0, True
        producer.begin_transaction()
        try:
            sent, topics = await send_rows(producer)
            if sent:
                await producer.send_offsets_to_transaction(
                    {TopicPartition(min(topics), MARK_PARTITION): task.batch_id + 1}, txn_id)
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()  # nothing to show, nothing to mark
        except BaseException:
            await asyncio.shield(_abort_quietly(producer))
            raise
        return sent, False
    finally:
        await producer.close()


async def _abort_quietly(producer: Producer) -> None:
    """Abort after a failure; a fenced producer cannot, and the next attempt aborts for it."""
    try:
        await producer.abort_transaction()
    except Exception:  # noqa: BLE001 - the original failure is the one to raise
        pass

