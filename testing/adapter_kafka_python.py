"""Recording adapter for kafka-python: `KafkaProducer` and `KafkaConsumer` that record into a
History.

    from epochlog.testing.adapter_kafka_python import KafkaProducer, KafkaConsumer

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", history=history)
    consumer = KafkaConsumer("orders", group_id="g", history=history, ...)

Subclasses of kafka-python's classes, made with the same arguments plus `history` (and an
optional `name`, by default "kafka-python-producer-N" / "kafka-python-consumer-N"); the code
that uses them does not change. kafka-python runs callbacks and rebalance listeners on its own
I/O thread, which History allows. What is recorded:

- send(): the send when called (value and key as the configured serializers make them),
  completed by its future's callback (partition, offset) or errback;
- poll() and iteration: the records returned; a LogTruncationError (kafka-python 3 validates
  positions, KIP-320) as a truncation of each partition at its divergent offset, then raised on;
- subscribe(): the listener's revoked, assigned and lost calls (recorded, then the application's
  listener, sync or async, is called as before); assign() and unsubscribe();
- seek(), seek_to_beginning(), seek_to_end(): a `seek`;
- commit() and commit_async() (through its callback): the offsets (the consumed positions when
  none are given, as kafka-python commits them) and the outcome. Automatic commits are not
  recorded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import kafka
from kafka.consumer.subscription_state import (
    AsyncConsumerRebalanceListener,
    ConsumerRebalanceListener,
)
from kafka.errors import LogTruncationError

from .history import History, Polled, RebalanceChange, Send


class KafkaProducer(kafka.KafkaProducer):  # type: ignore[misc]
    def __init__(self, *args: Any, history: History, name: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history = history
        self.name = name or history.new_name("kafka-python-producer")

    def send(self, topic: str, value: Any = None, key: Any = None, headers: Any = None,
             partition: int | None = None, timestamp_ms: int | None = None) -> Any:
        value_serializer = self.config.get("value_serializer")
        key_serializer = self.config.get("key_serializer")
        op = self.history.send_started(
            self.name, topic,
            value_serializer(value) if value_serializer and value is not None else value,
            key_serializer(key) if key_serializer and key is not None else key, partition)
        try:
            future = super().send(topic, value, key, headers, partition, timestamp_ms)
        except BaseException as exc:
            self.history.send_failed(op, exc)
            raise
        future.add_callback(self._acked, op)
        future.add_errback(self._failed, op)
        return future

    def _acked(self, op: Send, meta: Any) -> None:
        self.history.send_acked(op, meta.partition, meta.offset, None)

    def _failed(self, op: Send, exc: BaseException) -> None:
        self.history.send_failed(op, exc)


class _Recorder(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: KafkaConsumer, inner: Any) -> None:
        self.consumer = consumer
        self.inner = inner

    def on_partitions_revoked(self, revoked: Any) -> None:
        self.consumer._rebalanced("revoked", revoked)
        if self.inner is not None:
            self.inner.on_partitions_revoked(revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.consumer._rebalanced("assigned", assigned)
        if self.inner is not None:
            self.inner.on_partitions_assigned(assigned)

    def on_partitions_lost(self, lost: Any) -> None:
        self.consumer._rebalanced("lost", lost)
        if self.inner is not None:
            self.inner.on_partitions_lost(lost)


class _AsyncRecorder(AsyncConsumerRebalanceListener):  # type: ignore[misc]
    """For an application's AsyncConsumerRebalanceListener: kafka-python awaits coroutine
    functions only, so the recorder's methods must be coroutine functions too."""

    def __init__(self, consumer: KafkaConsumer, inner: Any) -> None:
        self.consumer = consumer
        self.inner = inner

    async def on_partitions_revoked(self, revoked: Any) -> None:
        self.consumer._rebalanced("revoked", revoked)
        await self.inner.on_partitions_revoked(revoked)

    async def on_partitions_assigned(self, assigned: Any) -> None:
        self.consumer._rebalanced("assigned", assigned)
        await self.inner.on_partitions_assigned(assigned)

    async def on_partitions_lost(self, lost: Any) -> None:
        self.consumer._rebalanced("lost", lost)
        method = getattr(self.inner, "on_partitions_lost", self.inner.on_partitions_revoked)
        await method(lost)


class KafkaConsumer(kafka.KafkaConsumer):  # type: ignore[misc]
    def __init__(self, *topics: str, history: History, name: str | None = None,
                 **kwargs: Any) -> None:
        self.history = history
        self.name = name or history.new_name("kafka-python-consumer")
        self.group: str | None = kwargs.get("group_id")
        super().__init__(*topics, **kwargs)
        if topics:  # subscribed by the constructor, without a listener: add ours
            self.subscribe(list(topics))

    # ---- reading
    def poll(self, timeout_ms: int = 0, max_records: int | None = None,
             update_offsets: bool = True) -> Any:
        try:
            batches = super().poll(timeout_ms, max_records, update_offsets)
        except LogTruncationError as exc:
            self._truncated(exc)
            raise
        self._record(r for records in batches.values() for r in records)
        return batches

    def __next__(self) -> Any:
        try:
            record = super().__next__()
        except LogTruncationError as exc:
            self._truncated(exc)
            raise
        self._record([record])
        return record

    def _record(self, records: Iterable[Any]) -> None:
        self.history.record_poll(self.name, [
            Polled(topic=r.topic, partition=r.partition, offset=r.offset,
                   leader_epoch=r.leader_epoch if r.leader_epoch is not None and
                   r.leader_epoch >= 0 else None, key=r.key, value=r.value) for r in records],
            self.group)

    def _truncated(self, exc: Any) -> None:
        for tp, position in sorted(exc.divergent_offsets.items()):
            self.history.record_truncation(self.name, tp.topic, tp.partition, "error",
                                           position.offset, position.leader_epoch, str(exc),
                                           self.group)

    # ---- assignment and positions
    def subscribe(self, topics: Any = (), pattern: Any = None, listener: Any = None) -> None:
        recorder = _AsyncRecorder(self, listener) if isinstance(
            listener, AsyncConsumerRebalanceListener) else _Recorder(self, listener)
        super().subscribe(topics, pattern, recorder)

    def _rebalanced(self, change: RebalanceChange, partitions: Iterable[Any]) -> None:
        self.history.record_rebalance(self.name, change,
                                      [(tp.topic, tp.partition) for tp in partitions],
                                      self.group)

    def assign(self, partitions: Any) -> None:
        before = {(tp.topic, tp.partition) for tp in self.assignment()}
        super().assign(partitions)
        self.history.record_assignment(self.name, before,
                                       [(tp.topic, tp.partition) for tp in partitions],
                                       self.group)

    def seek(self, partition: Any, offset: int) -> None:
        super().seek(partition, offset)
        self._sought([partition], offset)

    def seek_to_beginning(self, *partitions: Any) -> None:
        super().seek_to_beginning(*partitions)
        self._sought(partitions or self.assignment(), None, "to the beginning")

    def seek_to_end(self, *partitions: Any) -> None:
        super().seek_to_end(*partitions)
        self._sought(partitions or self.assignment(), None, "to the end")

    def _sought(self, partitions: Iterable[Any], offset: int | None, detail: str = "") -> None:
        for tp in partitions:
            self.history.record_truncation(self.name, tp.topic, tp.partition, "seek", offset,
                                           None, detail or f"to {offset}", self.group)

    # ---- commits
    def commit(self, offsets: Mapping[Any, Any] | None = None,
               timeout_ms: int | None = None) -> None:
        chosen = self._subscription.all_consumed_offsets() if offsets is None else offsets
        try:
            super().commit(chosen, timeout_ms)
        except BaseException as exc:
            self._committed(chosen, exc)
            raise
        self._committed(chosen, None)

    def commit_async(self, offsets: Mapping[Any, Any] | None = None,
                     callback: Any = None) -> Any:
        chosen = self._subscription.all_consumed_offsets() if offsets is None else offsets

        def done(offsets: Any, response: Any) -> None:
            self._committed(chosen, response if isinstance(response, BaseException) else None)
            if callback is not None:
                callback(offsets, response)

        return super().commit_async(chosen, done)

    def _committed(self, offsets: Mapping[Any, Any], error: BaseException | None) -> None:
        if offsets:
            self.history.record_commit(self.name, {
                (tp.topic, tp.partition): (m.offset, getattr(m, "leader_epoch", None))
                for tp, m in offsets.items()}, error, self.group)
