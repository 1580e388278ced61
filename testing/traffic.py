"""Produce to a cluster and read it all back, recorded in a History, for `check` to judge.

    from epochlog.testing import History, check
    from epochlog.testing.traffic import produce, produce_paced, read_back

    history = History()
    offsets = produce(c.bootstrap_servers, "orders", [b"a", b"b"], history=history)
    ...faults...
    records = read_back(c.bootstrap_servers, "orders", partitions=3, history=history)
    verdict = check(history)          # lost, duplicated, moved or reordered records

These are the project's one way to write test traffic and to read a topic back. Both go through
confluent-kafka (librdkafka, the reference client) wrapped by `adapter_confluent`, so every send
with its acknowledgement and every record read back lands in the history: the checker then sees
an acknowledged record that the read-back does not hold (lost-write), a value at two offsets
(duplicate), another value at an acknowledged offset (inconsistent-offsets) and a producer's
records out of order (nonmonotonic-send). Every wait is bounded and says what it waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from .history import History
from .requests import WaitTimeout

PRODUCE_S = 60.0  # produce(): every record acknowledged or failed by then
FLUSH_S = 90.0  # produce_paced(): the final flush, once told to stop
READ_BACK_S = 60.0  # read_back(): every partition read up to its high watermark by then
WATERMARK_S = 20.0  # one high-watermark query
MESSAGE_TIMEOUT_MS = 60_000  # librdkafka gives up on a record after this (then it fails)
CONSUME_BATCH = 1000
CONSUME_S = 0.2  # one consume() call returns after this when fewer records came

DeliveryCallback = Callable[[Any, Any], None]
Placement = Callable[[int], Mapping[str, Any]]


def _producer(bootstrap: str, acks: str, history: History, name: str | None,
              extra: Mapping[str, Any] | None) -> Any:
    from .adapter_confluent import Producer  # confluent-kafka: loaded only when used

    config: dict[str, Any] = {"bootstrap.servers": bootstrap, "acks": acks,
                              "message.timeout.ms": MESSAGE_TIMEOUT_MS}
    if acks == "all":
        config["enable.idempotence"] = True
    config.update(extra or {})
    return Producer(config, history=history, name=name)


def produce(bootstrap: str, topic: str, values: list[bytes], *, history: History | None = None,
            acks: str = "all", partition: int | None = 0, placement: Placement | None = None,
            name: str | None = None, timeout_s: float = PRODUCE_S) -> list[int]:
    """Send values (to `partition`, None: the producer picks; or, given placement, with
    placement(n)'s `key` or `partition` for the n-th value) and wait for every outcome; the
    offsets acknowledged, in the order sent. Raises AssertionError naming the failures if any
    failed. acks "all" makes an idempotent producer."""
    history = history if history is not None else History()
    producer = _producer(bootstrap, acks, history, name, None)
    outcomes: dict[int, tuple[int, str | None]] = {}  # n -> (offset, error)

    def on_delivery(n: int) -> DeliveryCallback:
        def delivered(err: Any, msg: Any) -> None:
            outcomes[n] = (msg.offset(), None if err is None else str(err))
        return delivered

    for n, value in enumerate(values):
        where = placement(n) if placement is not None else {
            "partition": -1 if partition is None else partition}
        producer.produce(topic, value=value, on_delivery=on_delivery(n), **where)
    left = producer.flush(timeout_s)
    if left:
        raise WaitTimeout(f"{left} of {len(values)} records to {topic} unacknowledged after "
                          f"{timeout_s:.0f}s")
    failed = [err for _, err in outcomes.values() if err is not None]
    assert not failed, f"{len(failed)} of {len(values)} sends to {topic} failed: {failed[:5]}"
    return [outcomes[n][0] for n in range(len(values))]


def produce_paced(bootstrap: str, topic: str, rate_per_s: int, stop: threading.Event, *,
                  history: History | None = None,
                  placement: Placement = lambda n: {},
                  on_delivery: DeliveryCallback | None = None, name: str | None = None,
                  flush_s: float = FLUSH_S) -> int:
    """Records numbered from 0 (the value is the number, in decimal) from an idempotent
    acks=all producer, offered at rate_per_s until `stop` is set; placement(n) gives
    produce()'s `key` or `partition` for record n; on_delivery(err, msg) is called for each
    outcome after the history recorded it. Then a flush, bounded by flush_s (WaitTimeout if
    records are still unacknowledged). How many records were offered."""
    producer = _producer(bootstrap, "all", history if history is not None else History(), name,
                         {"linger.ms": 5, "retry.backoff.ms": 100})
    number, started = 0, time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate_per_s)
        while number < due:
            try:
                producer.produce(topic, value=str(number).encode(), on_delivery=on_delivery,
                                 **placement(number))
            except BufferError:  # librdkafka's queue is full: let it drain first
                break
            number += 1
        producer.poll(0.01)
    left = producer.flush(flush_s)
    if left:
        raise WaitTimeout(f"{left} records to {topic} still unacknowledged {flush_s:.0f}s after "
                          "the producer was told to stop")
    return number


def read_back(bootstrap: str, topic: str, partitions: int, *, history: History | None = None,
              name: str | None = None, timeout_s: float = READ_BACK_S
              ) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of every partition, partition -> [(offset, value)], read from the beginning
    up to the high watermark each partition had when the read began (records with no value
    are skipped). Recorded in `history` as one consumer's polls, so `check` compares it with
    the sends. WaitTimeout, naming what was read, if it takes longer than timeout_s."""
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    from .adapter_confluent import Consumer

    history = history if history is not None else History()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "epochlog-read-back",
                         "enable.auto.commit": False, "enable.partition.eof": True},
                        history=history, name=name or history.new_name("read-back"))
    try:
        ends = {i: consumer.get_watermark_offsets(TopicPartition(topic, i),
                                                  timeout=WATERMARK_S)[1]
                for i in range(partitions)}
        consumer.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
        got: dict[int, list[tuple[int, bytes]]] = {i: [] for i in range(partitions)}
        next_offset = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + timeout_s
        while any(next_offset[i] < ends[i] for i in got):
            if time.monotonic() > deadline:
                raise WaitTimeout(
                    f"read-back of {topic}: after {timeout_s:.0f}s read up to offsets "
                    f"{next_offset}, high watermarks {ends}")
            for message in consumer.consume(CONSUME_BATCH, timeout=CONSUME_S):
                if message.error() is not None:
                    continue  # partition EOF, and transient errors librdkafka retries
                next_offset[message.partition()] = message.offset() + 1
                if message.value() is not None:
                    got[message.partition()].append((message.offset(), message.value()))
        return got
    finally:
        consumer.close()
