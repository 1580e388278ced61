"""The chaos workload: idempotent acks=all producers and a consumer group committing offsets, in
any of the four clients, each recorded in one History through that client's adapter.

Every producer and consumer runs on a thread of its own (the asyncio clients, epochlog's and
aiokafka, run an event loop on theirs), so one client stuck across a fault holds up no other.
Producers send unique values ("<producer>-<n>", keyed so they spread over the partitions), paced
to `rate_per_s` each; consumers poll and commit after every non-empty poll. Errors a client
raises are counted and kept (at most ERRORS_KEPT) for the report, and the client goes on: during
a fault, errors are expected; what matters is what check() finds in the history. A client whose
library is not installed is refused before anything starts (`require_client`, naming the pip
package), not discovered as errors of threads that never sent anything.

Ending: `stop_producing` has every producer stop and flush (bounded by FLUSH_S); `read_back`
reads every partition from its start to its end with a fresh consumer of epochlog's own client
(the final log, as check takes it); `drain` lets the group's consumers poll until between them
they have seen every value of the final log (bounded); `close` stops the consumers.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Literal

from epochlog.client import Consumer as PlainConsumer
from epochlog.client import KafkaError, LogTruncationError, TopicPartition

from .. import adapter_ours
from ..history import History

log = logging.getLogger("epochlog.chaos")

Client = Literal["ours", "confluent", "kafka-python", "aiokafka"]
CLIENTS: tuple[Client, ...] = ("ours", "confluent", "kafka-python", "aiokafka")
FLUSH_S = 60.0  # producers flush their last records within this
POLL_S = 0.3
SESSION_MS = 6000
HEARTBEAT_MS = 500
ERRORS_KEPT = 200
CONSUMERS_MAX = 6
JOIN_S = 30.0  # a thread's start and end
# client -> (its recording adapter, the pip package its library comes from); epochlog's own
# client is always there
CLIENT_LIBRARIES: dict[Client, tuple[str, str]] = {
    "confluent": ("epochlog.testing.adapter_confluent", "confluent-kafka"),
    "kafka-python": ("epochlog.testing.adapter_kafka_python", "kafka-python"),
    "aiokafka": ("epochlog.testing.adapter_aiokafka", "aiokafka"),
}


class ClientUnavailable(RuntimeError):
    """The workload's client library is not installed here; the message names its package."""


def require_client(client: Client) -> None:
    """Raise ClientUnavailable, naming the pip package to install, if client's library (or its
    recording adapter) cannot be imported."""
    if client not in CLIENT_LIBRARIES:
        return
    adapter, package = CLIENT_LIBRARIES[client]
    try:
        importlib.import_module(adapter)
    except ImportError as exc:
        raise ClientUnavailable(f"--client {client} needs the {package} package, which cannot "
                                f"be imported here ({exc}): pip install {package}") from None


class Workload:
    def __init__(self, bootstrap: str, history: History, *, topic: str, partitions: int,
                 client: Client = "ours", acks: str = "all", idempotent: bool = True,
                 producers: int = 2, consumers: int = 2, rate_per_s: float = 50.0,
                 group: str = "chaos") -> None:
        if client not in CLIENTS:
            raise ValueError(f"client {client!r}: one of {', '.join(CLIENTS)}")
        require_client(client)
        self.bootstrap, self.history, self.topic = bootstrap, history, topic
        self.partitions, self.client, self.acks, self.idempotent = partitions, client, acks, \
            idempotent
        self.group, self.interval_s = group, 1.0 / rate_per_s
        # Without idempotence, a retried request may land behind a later one: one in flight
        # keeps each producer's order (aiokafka sends one batch per partition at a time anyway).
        self.in_flight_max = 5 if idempotent else 1
        self.producing = threading.Event()
        self.errors: list[str] = []
        self.error_count = 0
        self.corrupt_count = 0  # errors saying a batch's CRC failed (a corrupt byte served)
        self._lock = threading.Lock()
        self._seen: set[bytes] = set()  # values the group's consumers polled
        self._wanted: set[bytes] | None = None  # set by drain: the final log's values
        self._threads: list[threading.Thread] = []
        self._consumers: list[tuple[str, threading.Event]] = []  # (its name, its stop)
        self._n_producers, self._n_consumers = producers, consumers

    # ---- lifecycle
    def start(self) -> None:
        self.producing.set()
        for i in range(1, self._n_producers + 1):
            self._spawn(self._producer, f"{self.client}-producer-{i}")
        for _ in range(self._n_consumers):
            self.add_consumer()

    def _spawn(self, target: Callable[..., None], *args: Any) -> threading.Thread:
        thread = threading.Thread(target=self._guarded, args=(target, *args), daemon=True,
                                  name=f"chaos-{args[0]}")
        thread.start()
        self._threads.append(thread)
        return thread

    def _guarded(self, target: Callable[..., None], *args: Any) -> None:
        try:
            target(*args)
        except Exception as exc:  # noqa: BLE001 - reported: the run's verdict names it
            self.error(str(args[0]), exc)

    def error(self, who: str, exc: BaseException | str) -> None:
        with self._lock:
            self.error_count += 1
            if _is_corrupt(exc):
                self.corrupt_count += 1
            if len(self.errors) < ERRORS_KEPT:
                self.errors.append(f"{who}: {exc!r}" if isinstance(exc, BaseException)
                                   else f"{who}: {exc}")

    def add_consumer(self) -> str:
        """A consumer joins the group (a rebalance); its name."""
        if len(self._consumers) >= CONSUMERS_MAX:
            raise RuntimeError(f"{CONSUMERS_MAX} consumers already (CONSUMERS_MAX)")
        name = self.history.new_name(f"{self.client}-consumer")
        stop = threading.Event()
        self._spawn(self._consumer, name, stop)
        self._consumers.append((name, stop))
        return name

    def remove_consumer(self) -> str | None:
        """The newest consumer leaves the group (a rebalance); its name (as its ops in the
        history carry it, not its thread's), or None if only one is left (the group keeps a
        member)."""
        if len(self._consumers) <= 1:
            return None
        name, stop = self._consumers.pop()
        stop.set()
        return name

    def stop_producing(self) -> None:
        self.producing.clear()
        for t in self._threads:
            if "producer" in t.name:
                t.join(FLUSH_S + JOIN_S)

    def drain(self, wanted: set[bytes], timeout_s: float) -> bool:
        """Let the consumers poll until they have seen every value in wanted; whether they did."""
        with self._lock:
            self._wanted = wanted
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if wanted <= self._seen:
                    return True
            time.sleep(0.2)
        return False

    def close(self) -> None:
        for _, stop in self._consumers:
            stop.set()
        for t in self._threads:
            t.join(JOIN_S)
        alive = [t.name for t in self._threads if t.is_alive()]
        if alive:
            self.error("workload", f"threads still running after {JOIN_S}s: {alive}")

    def seen(self, values: list[bytes | None]) -> None:
        with self._lock:
            self._seen.update(v for v in values if v is not None)

    def reading(self, stop: threading.Event) -> bool:
        return not stop.is_set()

    def value(self, producer: str, n: int) -> tuple[bytes, bytes]:
        return f"{producer}-{n}".encode(), str(n % 16).encode()

    # ---- the clients
    def _producer(self, name: str) -> None:
        {"ours": _run_async(_produce_ours), "aiokafka": _run_async(_produce_aiokafka),
         "confluent": _produce_confluent, "kafka-python": _produce_kafka_python,
         }[self.client](self, name)

    def _consumer(self, name: str, stop: threading.Event) -> None:
        {"ours": _run_async(_consume_ours), "aiokafka": _run_async(_consume_aiokafka),
         "confluent": _consume_confluent, "kafka-python": _consume_kafka_python,
         }[self.client](self, name, stop)


def _is_corrupt(exc: BaseException | str) -> bool:
    """An error that says a fetched batch was corrupt (ours: CorruptMessageError; the other
    clients name it CORRUPT_MESSAGE or say its CRC failed)."""
    text = f"{type(exc).__name__} {exc}" if isinstance(exc, BaseException) else exc
    return "CorruptMessage" in text or "CORRUPT_MESSAGE" in text or "CRC" in text


def _run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    def run(*args: Any) -> None:
        asyncio.run(fn(*args))
    return run


# ------------------------------------------------------------------------------ epochlog's
async def _produce_ours(w: Workload, name: str) -> None:
    async with adapter_ours.Producer(
            w.bootstrap, acks=w.acks, enable_idempotence=w.idempotent, history=w.history,
            name=name, delivery_timeout_ms=int(FLUSH_S * 1000),
            max_block_ms=10_000, max_in_flight_requests_per_connection=w.in_flight_max
            ) as producer:
        n = 0
        while w.producing.is_set():
            value, key = w.value(name, n)
            try:
                await producer.send(w.topic, value, key=key)
            except KafkaError as exc:
                w.error(name, exc)
            n += 1
            await asyncio.sleep(w.interval_s)
        await producer.flush(int(FLUSH_S * 1000))


async def _consume_ours(w: Workload, name: str, stop: threading.Event) -> None:
    async with adapter_ours.Consumer(
            w.bootstrap, group_id=w.group, auto_offset_reset="earliest",
            enable_auto_commit=False, session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS, history=w.history,
            name=name) as consumer:
        consumer.subscribe([w.topic])
        while w.reading(stop):
            try:
                records = await consumer.poll(timeout_ms=int(POLL_S * 1000))
                w.seen([r.value for r in records])
                if records:
                    await consumer.commit()
            except LogTruncationError as exc:  # recorded by the adapter; go on where logs agree
                for tp, (offset, epoch) in exc.divergent_offsets.items():
                    consumer.seek(tp, offset, epoch)
            except KafkaError as exc:
                w.error(name, exc)
                await asyncio.sleep(POLL_S)


# ------------------------------------------------------------------------------ aiokafka
async def _produce_aiokafka(w: Workload, name: str) -> None:
    from .. import adapter_aiokafka

    producer = adapter_aiokafka.AIOKafkaProducer(
        bootstrap_servers=w.bootstrap, acks="all" if w.acks == "all" else int(w.acks),
        enable_idempotence=w.idempotent, request_timeout_ms=10_000, history=w.history,
        name=name)
    await producer.start()
    try:
        n = 0
        while w.producing.is_set():
            value, key = w.value(name, n)
            try:
                await producer.send(w.topic, value, key=key)
            except Exception as exc:  # noqa: BLE001 - aiokafka's errors have no common base
                w.error(name, exc)
            n += 1
            await asyncio.sleep(w.interval_s)
        async with asyncio.timeout(FLUSH_S):
            await producer.flush()
    finally:
        await producer.stop()


async def _consume_aiokafka(w: Workload, name: str, stop: threading.Event) -> None:
    from .. import adapter_aiokafka

    consumer = adapter_aiokafka.AIOKafkaConsumer(
        w.topic, bootstrap_servers=w.bootstrap, group_id=w.group, auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS, history=w.history, name=name)
    await consumer.start()
    try:
        while w.reading(stop):
            try:
                batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
                for records in batches.values():
                    w.seen([r.value for r in records])
                if batches:
                    await consumer.commit()
            except Exception as exc:  # noqa: BLE001 - aiokafka's errors have no common base
                w.error(name, exc)
                await asyncio.sleep(POLL_S)
    finally:
        await consumer.stop()


# ------------------------------------------------------------------------------ confluent-kafka
def _produce_confluent(w: Workload, name: str) -> None:
    from .. import adapter_confluent

    producer = adapter_confluent.Producer(
        {"bootstrap.servers": w.bootstrap, "acks": w.acks, "enable.idempotence": w.idempotent,
         "linger.ms": 5, "message.timeout.ms": int(FLUSH_S * 1000),
         "max.in.flight.requests.per.connection": w.in_flight_max}, history=w.history,
        name=name)
    n = 0
    while w.producing.is_set():
        value, key = w.value(name, n)
        try:
            producer.produce(w.topic, value, key)
            n += 1
        except BufferError as exc:
            w.error(name, exc)
        producer.poll(0)  # serves delivery reports; poll(t) returns early on one, so no pacing
        time.sleep(w.interval_s)
    left = producer.flush(FLUSH_S)
    if left:
        w.error(name, f"{left} records unacknowledged after a flush of {FLUSH_S}s")


def _consume_confluent(w: Workload, name: str, stop: threading.Event) -> None:
    import confluent_kafka

    from .. import adapter_confluent

    consumer = adapter_confluent.Consumer(
        {"bootstrap.servers": w.bootstrap, "group.id": w.group, "auto.offset.reset": "earliest",
         "enable.auto.commit": False, "session.timeout.ms": SESSION_MS,
         "heartbeat.interval.ms": HEARTBEAT_MS}, history=w.history, name=name)
    consumer.subscribe([w.topic])
    try:
        while w.reading(stop):
            msgs = consumer.consume(num_messages=200, timeout=POLL_S)
            good = [m for m in msgs if m.error() is None]
            w.seen([m.value() for m in good])
            for m in msgs:
                if m.error() is not None:
                    w.error(name, str(m.error()))
            if good:
                try:
                    consumer.commit(asynchronous=False)
                except confluent_kafka.KafkaException as exc:
                    w.error(name, exc)
    finally:
        consumer.close()


# ------------------------------------------------------------------------------ kafka-python
def _produce_kafka_python(w: Workload, name: str) -> None:
    from .. import adapter_kafka_python

    producer = adapter_kafka_python.KafkaProducer(
        bootstrap_servers=w.bootstrap, acks="all" if w.acks == "all" else int(w.acks),
        enable_idempotence=w.idempotent, request_timeout_ms=10_000,
        max_in_flight_requests_per_connection=w.in_flight_max, history=w.history, name=name)
    try:
        n = 0
        while w.producing.is_set():
            value, key = w.value(name, n)
            try:
                producer.send(w.topic, value, key)
            except Exception as exc:  # noqa: BLE001 - kafka-python's errors, kept going
                w.error(name, exc)
            n += 1
            time.sleep(w.interval_s)
        producer.flush(FLUSH_S)
    finally:
        producer.close(FLUSH_S)


def _consume_kafka_python(w: Workload, name: str, stop: threading.Event) -> None:
    from .. import adapter_kafka_python

    consumer = adapter_kafka_python.KafkaConsumer(
        w.topic, bootstrap_servers=w.bootstrap, group_id=w.group, auto_offset_reset="earliest",
        enable_auto_commit=False, session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS, history=w.history, name=name)
    try:
        while w.reading(stop):
            try:
                batches = consumer.poll(timeout_ms=int(POLL_S * 1000))
                for records in batches.values():
                    w.seen([r.value for r in records])
                if batches:
                    consumer.commit()
            except Exception as exc:  # noqa: BLE001 - kafka-python's errors, retried by polling
                w.error(name, exc)
                time.sleep(POLL_S)
    finally:
        consumer.close()


# ------------------------------------------------------------------------------ the read-back
async def _end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[TopicPartition, int]:
    async with PlainConsumer(bootstrap, request_timeout_ms=10_000) as probe:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        probe.assign(tps)
        probe.seek_to_end(*tps)
        return {tp: await probe.position(tp, timeout_ms=20_000) for tp in tps}


async def _read_back(bootstrap: str, history: History, topic: str, partitions: int,
                     timeout_s: float) -> set[bytes]:
    ends = await _end_offsets(bootstrap, topic, partitions)
    values: set[bytes] = set()
    async with adapter_ours.Consumer(bootstrap, auto_offset_reset="earliest",
                                     request_timeout_ms=10_000, history=history,
                                     name="read-back") as consumer:
        consumer.assign(list(ends))
        next_offset = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + timeout_s
        while any(next_offset[tp] < end for tp, end in ends.items()):
            if time.monotonic() > deadline:
                short = {f"{tp.topic}-{tp.partition}": (next_offset[tp], end)
                         for tp, end in ends.items() if next_offset[tp] < end}
                raise TimeoutError(f"the read-back did not reach the end in {timeout_s}s: "
                                   f"(read to, end) {short}")
            for r in await consumer.poll(timeout_ms=500):
                next_offset[r.topic_partition] = r.offset + 1
                if r.value is not None:
                    values.add(r.value)
    return values


def read_back(bootstrap: str, history: History, topic: str, partitions: int,
              timeout_s: float = 90.0) -> set[bytes]:
    """Every value of every partition, from its start to its end now (recorded as polls of a
    consumer named "read-back"): the final log."""
    return asyncio.run(_read_back(bootstrap, history, topic, partitions, timeout_s))
