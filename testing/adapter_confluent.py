"""Recording adapter for confluent-kafka: `Producer` and `Consumer` that record into a History.

    from epochlog.testing.adapter_confluent import Producer, Consumer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"}, history=history)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g"}, history=history)

Subclasses of confluent_kafka's classes, made from the same configuration plus `history` (and an
optional `name`, by default "confluent-producer-N" / "confluent-consumer-N"); the code that uses
them does not change. Delivery reports and commit results arrive on whichever thread serves
poll() or flush(), which History allows. What is recorded:

- produce(): the send when called, completed by its delivery report (partition, offset) or its
  error. The per-message on_delivery (or callback) and the configuration's on_delivery are still
  called, after recording. "delivery.report.only.error" is refused: it would hide every
  acknowledgement from the history;
- poll() / consume(): the messages returned; librdkafka's report of a log truncation (KIP-320)
  as a truncation of its partition: with auto.offset.reset=error it is an _AUTO_OFFSET_RESET
  error saying "log truncation detected", whose divergent offset only its text gives (the
  leader's end offset); _LOG_TRUNCATION is taken too. With an automatic reset librdkafka moves
  to the divergent offset and tells the application nothing: nothing to record (check sees the
  move back);
- subscribe(): on_assign, on_revoke and on_lost (recorded, then the application's callbacks are
  called as confluent-kafka would: lost goes to on_revoke when no on_lost was given);
  assign(), incremental_assign(), incremental_unassign() and unassign() called by the
  application;
- seek(): a `seek`;
- commit(asynchronous=False): the offsets it returns and their errors; asynchronous and automatic
  commits through the on_commit callback (the configuration's on_commit is still called).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import confluent_kafka

from .history import History, Polled, RebalanceChange, Send

DeliveryCallback = Callable[[Any, Any], None]
# librdkafka's words for a truncation it detected (KIP-320) and the offset the logs part at
_TRUNCATION_TEXT = "log truncation detected"
_END_OFFSET = re.compile(r"broker end offset is (-?\d+)")


def is_truncation(err: Any) -> bool:
    """Whether a consumer error is librdkafka reporting a log truncation: _LOG_TRUNCATION, or,
    with auto.offset.reset=error, _AUTO_OFFSET_RESET saying "log truncation detected"."""
    code = err.code()
    return bool(code == confluent_kafka.KafkaError._LOG_TRUNCATION or (
        code == confluent_kafka.KafkaError._AUTO_OFFSET_RESET
        and _TRUNCATION_TEXT in err.str().lower()))


def truncation_offset(msg: Any) -> int | None:
    """Where the logs part, for a truncation error message: its offset, else the leader's end
    offset librdkafka names in the error's text (it gives no field for it); None if neither."""
    if msg.offset() is not None and msg.offset() >= 0:
        return int(msg.offset())
    found = _END_OFFSET.search(msg.error().str())
    return int(found.group(1)) if found else None


class Producer(confluent_kafka.Producer):
    def __init__(self, config: Mapping[str, Any], *, history: History,
                 name: str | None = None) -> None:
        conf = dict(config)
        if str(conf.get("delivery.report.only.error", "false")).lower() == "true":
            raise ValueError("delivery.report.only.error=true hides acknowledgements from the "
                             "history: leave it off for a recording producer")
        self._default_delivery: DeliveryCallback | None = conf.pop("on_delivery", None)
        super().__init__(conf)
        self.history = history
        self.name = name or history.new_name("confluent-producer")

    def produce(self, topic: str, value: Any = None, key: Any = None, partition: int = -1,
                callback: DeliveryCallback | None = None,
                on_delivery: DeliveryCallback | None = None, timestamp: int = 0,
                headers: Any = None) -> None:
        op = self.history.send_started(self.name, topic, value, key, partition)
        chained = on_delivery or callback or self._default_delivery

        def delivered(err: Any, msg: Any) -> None:
            self._delivered(op, err, msg)
            if chained is not None:
                chained(err, msg)

        try:
            super().produce(topic, value, key, partition, on_delivery=delivered,
                            timestamp=timestamp, headers=headers)
        except BaseException as exc:
            self.history.send_failed(op, exc)
            raise

    def _delivered(self, op: Send, err: Any, msg: Any) -> None:
        if err is not None:
            self.history.send_failed(op, f"{err.name()}: {err.str()}", msg.partition())
        else:
            self.history.send_acked(op, msg.partition(), msg.offset(), msg.leader_epoch())


class Consumer(confluent_kafka.Consumer):
    def __init__(self, config: Mapping[str, Any], *, history: History,
                 name: str | None = None) -> None:
        conf = dict(config)
        self._user_on_commit: Callable[[Any, Any], None] | None = conf.pop("on_commit", None)
        conf["on_commit"] = self._on_commit
        self.history = history
        self.name = name or history.new_name("confluent-consumer")
        self.group: str | None = conf.get("group.id")
        self._in_callback = False  # inside a rebalance callback: its assign() is the group's
        super().__init__(conf)

    # ---- reading
    def poll(self, *args: Any, **kwargs: Any) -> Any:
        msg = super().poll(*args, **kwargs)
        if msg is not None:
            self._record([msg])
        return msg

    def consume(self, *args: Any, **kwargs: Any) -> Any:
        msgs = super().consume(*args, **kwargs)
        self._record(msgs)
        return msgs

    def _record(self, msgs: Iterable[Any]) -> None:
        records: list[Polled] = []
        for msg in msgs:
            err = msg.error()
            if err is None:
                records.append(Polled(topic=msg.topic(), partition=msg.partition(),
                                      offset=msg.offset(), leader_epoch=msg.leader_epoch(),
                                      key=msg.key(), value=msg.value()))
            elif is_truncation(err):
                self.history.record_truncation(
                    self.name, msg.topic(), msg.partition(), "error", truncation_offset(msg),
                    None, err.str(), self.group)
        self.history.record_poll(self.name, records, self.group)

    # ---- assignment and positions
    def subscribe(self, topics: list[str], *args: Any, on_assign: Any = None,
                  on_revoke: Any = None, on_lost: Any = None, **kwargs: Any) -> None:
        if args:
            raise TypeError("pass on_assign, on_revoke and on_lost by name to a recording "
                            "consumer")
        super().subscribe(topics, on_assign=self._callback("assigned", on_assign),
                          on_revoke=self._callback("revoked", on_revoke),
                          on_lost=self._callback("lost", on_lost or on_revoke), **kwargs)

    def _callback(self, change: RebalanceChange, inner: Any) -> Callable[[Any, Any], None]:
        def called(consumer: Any, partitions: list[Any]) -> None:
            self._rebalanced(change, partitions)
            if inner is not None:
                self._in_callback = True
                try:
                    inner(consumer, partitions)
                finally:
                    self._in_callback = False
        return called

    def _rebalanced(self, change: RebalanceChange, partitions: Iterable[Any]) -> None:
        self.history.record_rebalance(self.name, change,
                                      [(tp.topic, tp.partition) for tp in partitions],
                                      self.group)

    def assign(self, partitions: list[Any]) -> None:
        before = {(tp.topic, tp.partition) for tp in self.assignment()}
        super().assign(partitions)
        if not self._in_callback:
            wanted = {(tp.topic, tp.partition) for tp in partitions}
            self._changed(before - wanted, wanted - before)

    def unassign(self) -> None:
        before = {(tp.topic, tp.partition) for tp in self.assignment()}
        super().unassign()
        if not self._in_callback:
            self._changed(before, set())

    def incremental_assign(self, partitions: list[Any]) -> None:
        super().incremental_assign(partitions)
        if not self._in_callback:
            self._changed(set(), {(tp.topic, tp.partition) for tp in partitions})

    def incremental_unassign(self, partitions: list[Any]) -> None:
        super().incremental_unassign(partitions)
        if not self._in_callback:
            self._changed({(tp.topic, tp.partition) for tp in partitions}, set())

    def _changed(self, revoked: set[tuple[str, int]], assigned: set[tuple[str, int]]) -> None:
        self.history.record_assignment(self.name, revoked, assigned, self.group)

    def seek(self, partition: Any) -> None:
        super().seek(partition)
        self.history.record_truncation(self.name, partition.topic, partition.partition, "seek",
                                       partition.offset, partition.leader_epoch,
                                       f"to {partition.offset}", self.group)

    # ---- commits
    def commit(self, *args: Any, **kwargs: Any) -> Any:
        result = super().commit(*args, **kwargs)
        if result is not None:  # synchronous: on_commit is not called for it
            self._committed(None, result)
        return result

    def _on_commit(self, err: Any, partitions: list[Any]) -> None:
        self._committed(err, partitions)
        if self._user_on_commit is not None:
            self._user_on_commit(err, partitions)

    def _committed(self, err: Any, partitions: list[Any]) -> None:
        """A commit's result; a partition with no offset (nothing consumed yet) was not
        committed and is left out, as is a commit that found nothing to commit."""
        if err is not None and err.code() == confluent_kafka.KafkaError._NO_OFFSET:
            return
        if err is not None:
            failed = {(tp.topic, tp.partition): (tp.offset, tp.leader_epoch) for tp in partitions}
            if failed:
                self.history.record_commit(self.name, failed, err.str(), self.group)
            return
        ok = {(tp.topic, tp.partition): (tp.offset, tp.leader_epoch) for tp in partitions
              if tp.error is None and tp.offset >= 0}
        if ok:
            self.history.record_commit(self.name, ok, None, self.group)
        for tp in partitions:
            if tp.error is not None:
                self.history.record_commit(self.name, {(tp.topic, tp.partition): (
                    tp.offset, tp.leader_epoch)}, str(tp.error), self.group)
