"""Recording adapter for epochlog's own client: `Producer` and `Consumer` recording into a History.

    from epochlog.testing.adapter_ours import Producer, Consumer

    producer = Producer(bootstrap, acks="all", history=history)   # then as usual
    consumer = Consumer(bootstrap, group_id="g", history=history)

Each is a subclass of epochlog.client's class, made with the same arguments plus `history` (and
an optional `name`, unique in the history; by default "ours-producer-N"), so the code that uses
it does not change. What is recorded:

- send / send_and_wait / send_nowait: the send when called (the value and key as the producer's
  serializers make them), completed by its acknowledgement (partition, offset, leader epoch) or
  its error;
- poll (and `async for`): the records returned; a LogTruncationError it raises, as a truncation
  of each partition with its divergent offset (then raised on);
- a reset the consumer made by itself: epochlog's consumer announces a truncation it resolved with
  auto_offset_reset (and an out-of-range reset) in its counters (`metrics()`), and the next
  records of that partition start below where the last poll left it; that move is recorded as
  a `reset` at the first offset returned. A move back with no such announcement is not
  recorded, so the checker judges it;
- subscribe: the listener's revoked, assigned and lost calls (before the application's own
  listener, which is called as before); assign(): the partitions given and taken;
- seek, seek_to_beginning, seek_to_end, called by the application: a `seek`;
- commit: the offsets committed (next_offsets() when none are given) and the outcome. Automatic
  commits are not recorded (the consumer offers no hook for them).
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from epochlog.client import (
    Consumer as _Consumer,
)
from epochlog.client import (
    DeliveryFuture,
    LogTruncationError,
    RebalanceListener,
    TopicPartition,
)
from epochlog.client import (
    Producer as _Producer,
)
from epochlog.client.consumer import READ_COMMITTED
from epochlog.client.types import ConsumerRecord

from .history import History, Polled, Send


class Producer(_Producer):
    def __init__(self, *args: Any, history: History, name: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history = history
        self.name = name or history.new_name("ours-producer")
        self.transactional_id: str | None = kwargs.get("transactional_id")
        self._txn_name: str | None = None  # the open transaction's, while one is open

    async def send(self, topic: str, value: Any = None, key: Any = None, *,
                   headers: Any = None, partition: int | None = None,
                   timestamp_ms: int | None = None) -> DeliveryFuture:
        op = self._started(topic, value, key, partition)
        try:
            delivery = await super().send(topic, value, key, headers=headers,
                                          partition=partition, timestamp_ms=timestamp_ms)
        except BaseException as exc:
            self.history.send_failed(op, exc)
            raise
        delivery.add_done_callback(lambda d: self._delivered(op, d))
        return delivery

    def send_nowait(self, topic: str, value: Any = None, key: Any = None, *,
                    headers: Any = None, partition: int | None = None,
                    timestamp_ms: int | None = None) -> DeliveryFuture:
        op = self._started(topic, value, key, partition)
        try:
            delivery = super().send_nowait(topic, value, key, headers=headers,
                                           partition=partition, timestamp_ms=timestamp_ms)
        except BaseException as exc:
            self.history.send_failed(op, exc)
            raise
        delivery.add_done_callback(lambda d: self._delivered(op, d))
        return delivery

    def _started(self, topic: str, value: Any, key: Any, partition: int | None) -> Send:
        value, key = self._serialize(value, key)
        return self.history.send_started(self.name, topic, value, key, partition,
                                         self._txn_name)

    # ---- transactions: each send names its transaction; each commit and abort is a Txn op
    @property
    def transaction_name(self) -> str | None:
        """The open transaction's name in the history (None when none is open)."""
        return self._txn_name

    def begin_transaction(self) -> None:
        super().begin_transaction()
        self._txn_name = self.history.new_name(f"{self.name}-txn")

    async def commit_transaction(self) -> None:
        await self._ending("commit", super().commit_transaction)

    async def abort_transaction(self) -> None:
        await self._ending("abort", super().abort_transaction)

    async def _ending(self, wanted: Any, call: Callable[[], Awaitable[None]]) -> None:
        name = self._txn_name
        if name is None:  # no transaction of ours open: the call raises, nothing to record
            await call()
            return
        op = self.history.txn_ending(self.name, name, self.transactional_id or "", wanted)
        try:
            await call()
        except BaseException as exc:
            self.history.txn_ended(op, exc)
            raise
        self.history.txn_ended(op)
        self._txn_name = None

    def _delivered(self, op: Send, delivery: DeliveryFuture) -> None:
        try:
            meta = delivery.result()
        except BaseException as exc:  # noqa: BLE001 - the delivery's error, recorded
            self.history.send_failed(op, exc)
            return
        self.history.send_acked(op, meta.partition, meta.offset, meta.leader_epoch)


class _Recorder(RebalanceListener):
    """Records each call, then calls the application's listener (whose result, perhaps a
    coroutine, the consumer awaits as before)."""

    def __init__(self, consumer: Consumer, inner: RebalanceListener | None) -> None:
        self.consumer = consumer
        self.inner = inner

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        self.consumer._rebalanced("revoked", revoked)
        return self.inner.on_partitions_revoked(revoked) if self.inner else None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        self.consumer._rebalanced("assigned", assigned)
        return self.inner.on_partitions_assigned(assigned) if self.inner else None

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        self.consumer._rebalanced("lost", lost)
        return self.inner.on_partitions_lost(lost) if self.inner else None


class Consumer(_Consumer):
    def __init__(self, *args: Any, history: History, name: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history = history
        self.name = name or history.new_name("ours-consumer")
        self.group: str | None = kwargs.get("group_id")
        self._next: dict[TopicPartition, int] = {}  # offset after the last record returned
        self._announced = self._resets_announced()
        self._inside = 0  # > 0 while in poll() or position(): seeks then are the consumer's own

    # ---- reading
    async def poll(self, timeout_ms: int = 0, max_records: int | None = None
                   ) -> list[ConsumerRecord]:
        self._inside += 1
        try:
            records = await super().poll(timeout_ms, max_records)
        except LogTruncationError as exc:
            for tp, (offset, epoch) in sorted(exc.divergent_offsets.items()):
                self.history.record_truncation(self.name, tp.topic, tp.partition, "error",
                                               offset, epoch, str(exc), self.group)
                self._next.pop(tp, None)
            raise
        finally:
            self._inside -= 1
        self._record(records)
        return records

    async def position(self, partition: TopicPartition, timeout_ms: int = 30_000) -> int:
        self._inside += 1
        try:
            return await super().position(partition, timeout_ms)
        finally:
            self._inside -= 1

    def _record(self, records: list[ConsumerRecord]) -> None:
        if not records:
            return
        announced = self._resets_announced()
        if announced != self._announced:
            self._announced = announced
            for tp, group in itertools.groupby(records, key=lambda r: r.topic_partition):
                first = next(group)
                expected = self._next.get(tp)
                if expected is not None and first.offset < expected:
                    self.history.record_truncation(
                        self.name, tp.topic, tp.partition, "reset", first.offset,
                        first.leader_epoch, f"the consumer moved from {expected} back to "
                        f"{first.offset} by itself (auto_offset_reset)", self.group)
        self.history.record_poll(self.name, [
            Polled(topic=r.topic, partition=r.partition, offset=r.offset,
                   leader_epoch=r.leader_epoch if r.leader_epoch >= 0 else None, key=r.key,
                   value=r.value) for r in records], self.group,
            read_committed=self.isolation_level == READ_COMMITTED)
        for r in records:
            self._next[r.topic_partition] = r.offset + 1

    def _resets_announced(self) -> int:
        return self.counters.truncations_detected + self.counters.offset_resets

    # ---- assignment and positions
    def subscribe(self, topics: Iterable[str] | None = None, *, pattern: Any = None,
                  listener: RebalanceListener | None = None) -> None:
        super().subscribe(topics, pattern=pattern, listener=_Recorder(self, listener))

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        wanted = {TopicPartition(*tp) for tp in partitions}
        before = self.assignment()
        super().assign(wanted)
        if before - wanted:
            self._rebalanced("revoked", before - wanted)
        if wanted - before:
            self._rebalanced("assigned", wanted - before)

    def _rebalanced(self, change: Any, partitions: Iterable[TopicPartition]) -> None:
        tps = sorted(partitions)
        for tp in tps:
            self._next.pop(tp, None)
        self.history.record_rebalance(self.name, change, tps, self.group)

    def seek(self, partition: TopicPartition, offset: int, leader_epoch: int | None = None
             ) -> None:
        super().seek(partition, offset, leader_epoch)
        if not self._inside:
            self._sought(TopicPartition(*partition), offset, leader_epoch)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        super().seek_to_beginning(*partitions)
        for tp in partitions or tuple(self.assignment()):
            self._sought(TopicPartition(*tp), None, None, "to the beginning")

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        super().seek_to_end(*partitions)
        for tp in partitions or tuple(self.assignment()):
            self._sought(TopicPartition(*tp), None, None, "to the end")

    def _sought(self, tp: TopicPartition, offset: int | None, epoch: int | None,
                detail: str = "") -> None:
        self._next.pop(tp, None)
        self.history.record_truncation(self.name, tp.topic, tp.partition, "seek", offset, epoch,
                                       detail or f"to {offset}", self.group)

    # ---- commits
    async def commit(self, offsets: Mapping[TopicPartition, int | tuple[int, int]] | None = None
                     ) -> None:
        chosen = self.next_offsets() if offsets is None else {
            TopicPartition(*tp): (v, -1) if isinstance(v, int) else (int(v[0]), int(v[1]))
            for tp, v in offsets.items()}
        recorded = {(tp.topic, tp.partition): (o, e if e >= 0 else None)
                    for tp, (o, e) in chosen.items()}
        try:
            await super().commit(chosen)
        except BaseException as exc:
            self.history.record_commit(self.name, recorded, exc, self.group)
            raise
        self.history.record_commit(self.name, recorded, None, self.group)
