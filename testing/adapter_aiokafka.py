"""Recording adapter for aiokafka: `AIOKafkaProducer` and `AIOKafkaConsumer` that record into a
History.

    from epochlog.testing.adapter_aiokafka import AIOKafkaProducer, AIOKafkaConsumer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", history=history)
    consumer = AIOKafkaConsumer("orders", group_id="g", history=history, ...)

Subclasses of aiokafka's classes, made with the same arguments plus `history` (and an optional
`name`, by default "aiokafka-producer-N" / "aiokafka-consumer-N"); the code that uses them does
not change. What is recorded:

- send() and send_and_wait(): the send when called (value and key as the configured serializers
  make them), completed by its future (partition, offset) or its error. send_batch() is not
  recorded (its records are not known one by one until sent);
- getmany(), getone() and `async for`: the records returned. aiokafka does not validate
  positions against leader epochs (KIP-320): it reports no truncation, and its records carry no
  leader epoch;
- subscribe(): the listener's revoked and assigned calls (recorded, then the application's
  listener, sync or coroutine, as before); assign() called by the application;
- seek(), seek_to_beginning(), seek_to_end(), seek_to_committed(): a `seek`;
- commit(): the offsets (the consumed positions when none are given, as aiokafka commits them)
  and the outcome. Automatic commits are not recorded.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any

import aiokafka
from aiokafka.abc import ConsumerRebalanceListener

from .history import History, Polled, RebalanceChange, Send


class AIOKafkaProducer(aiokafka.AIOKafkaProducer):  # type: ignore[misc]
    def __init__(self, *args: Any, history: History, name: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.history = history
        self.name = name or history.new_name("aiokafka-producer")

    async def send(self, topic: str, value: Any = None, key: Any = None,
                   partition: int | None = None, timestamp_ms: int | None = None,
                   headers: Any = None) -> Any:
        value_serializer, key_serializer = self._value_serializer, self._key_serializer
        op = self.history.send_started(
            self.name, topic,
            value_serializer(value) if value_serializer and value is not None else value,
            key_serializer(key) if key_serializer and key is not None else key, partition)
        try:
            future = await super().send(topic, value, key, partition, timestamp_ms, headers)
        except BaseException as exc:
            self.history.send_failed(op, exc)
            raise
        future.add_done_callback(lambda f: self._delivered(op, f))
        return future

    def _delivered(self, op: Send, future: asyncio.Future[Any]) -> None:
        if future.cancelled():
            self.history.send_failed(op, "cancelled")
        elif future.exception() is not None:
            self.history.send_failed(op, future.exception())  # type: ignore[arg-type]
        else:
            meta = future.result()
            self.history.send_acked(op, meta.partition, meta.offset, None)


class _Recorder(ConsumerRebalanceListener):  # type: ignore[misc]
    """Records each call, then returns the application's listener's result (aiokafka awaits it
    when it is a coroutine)."""

    def __init__(self, consumer: AIOKafkaConsumer, inner: Any) -> None:
        self.consumer = consumer
        self.inner = inner

    def on_partitions_revoked(self, revoked: Any) -> Any:
        self.consumer._rebalanced("revoked", revoked)
        return self.inner.on_partitions_revoked(revoked) if self.inner is not None else None

    def on_partitions_assigned(self, assigned: Any) -> Any:
        self.consumer._rebalanced("assigned", assigned)
        return self.inner.on_partitions_assigned(assigned) if self.inner is not None else None


class AIOKafkaConsumer(aiokafka.AIOKafkaConsumer):  # type: ignore[misc]
    def __init__(self, *topics: str, history: History, name: str | None = None,
                 **kwargs: Any) -> None:
        self.history = history
        self.name = name or history.new_name("aiokafka-consumer")
        self.group: str | None = kwargs.get("group_id")
        super().__init__(*topics, **kwargs)
        if topics:  # subscribed by the constructor, without a listener: add ours
            self.subscribe(list(topics))

    # ---- reading
    async def getmany(self, *partitions: Any, timeout_ms: int = 0,
                      max_records: int | None = None) -> Any:
        batches = await super().getmany(*partitions, timeout_ms=timeout_ms,
                                        max_records=max_records)
        self._record(r for records in batches.values() for r in records)
        return batches

    async def getone(self, *partitions: Any) -> Any:
        record = await super().getone(*partitions)
        self._record([record])
        return record

    def _record(self, records: Iterable[Any]) -> None:
        self.history.record_poll(self.name, [
            Polled(topic=r.topic, partition=r.partition, offset=r.offset, leader_epoch=None,
                   key=r.key, value=r.value) for r in records], self.group)

    # ---- assignment and positions
    def subscribe(self, topics: Any = (), pattern: Any = None, listener: Any = None) -> None:
        super().subscribe(topics, pattern, _Recorder(self, listener))

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

    async def seek_to_beginning(self, *partitions: Any) -> Any:
        result = await super().seek_to_beginning(*partitions)
        self._sought(partitions or self.assignment(), None, "to the beginning")
        return result

    async def seek_to_end(self, *partitions: Any) -> Any:
        result = await super().seek_to_end(*partitions)
        self._sought(partitions or self.assignment(), None, "to the end")
        return result

    async def seek_to_committed(self, *partitions: Any) -> Any:
        result = await super().seek_to_committed(*partitions)
        self._sought(partitions or self.assignment(), None, "to the committed offset")
        return result

    def _sought(self, partitions: Iterable[Any], offset: int | None, detail: str = "") -> None:
        for tp in partitions:
            self.history.record_truncation(self.name, tp.topic, tp.partition, "seek", offset,
                                           None, detail or f"to {offset}", self.group)

    # ---- commits
    async def commit(self, offsets: Mapping[Any, Any] | None = None) -> None:
        chosen: Mapping[Any, Any] | None = offsets
        if chosen is None:
            subscription = self._subscription.subscription
            assignment = subscription.assignment if subscription is not None else None
            chosen = assignment.all_consumed_offsets() if assignment is not None else {}
        try:
            await super().commit(offsets)
        except BaseException as exc:
            self._committed(chosen, exc)
            raise
        self._committed(chosen, None)

    def _committed(self, offsets: Mapping[Any, Any], error: BaseException | None) -> None:
        pairs = {(tp.topic, tp.partition): (m if isinstance(m, int) else m[0], None)
                 for tp, m in offsets.items()}
        if pairs:
            self.history.record_commit(self.name, pairs, error, self.group)
