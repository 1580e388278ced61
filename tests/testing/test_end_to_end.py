"""History and check on real processes: four clients nobody changed but for their class,
recorded through their adapters, across a broker SIGKILLed mid-run; the history checks clean.

Three brokers, a topic with replication factor 3 and min.insync.replicas 2. One idempotent
acks=all producer per client (epochlog's, confluent-kafka, kafka-python, aiokafka) writes
values unique to it, paced; one consumer per client, each in a group of its own, subscribes and
commits by hand after each poll. Once every producer has been acknowledged a few times, the
leader of partition 0 is SIGKILLed (a fault recorded in the history), started again a moment
later, and the producers go on until each has been acknowledged again. Then they flush and
stop, the consumers read until each has seen every acknowledged value, a fresh consumer reads
every partition from the start, and `check` must find nothing at all: no anomaly, expected or
not, and every send acknowledged.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from epochlog.client import KafkaError, TopicPartition
from epochlog.testing import (
    History,
    adapter_aiokafka,
    adapter_confluent,
    adapter_kafka_python,
    adapter_ours,
    check,
)
from epochlog.testing.history import Poll, Send
from tests.broker.cluster import Cluster

TOPIC = "recorded"
PARTITIONS = 3
SEND_INTERVAL_S = 0.01  # each producer offers about 100 records a second
ACKS_BEFORE_KILL = 50  # per producer, before the kill; as many again after the restart
DOWN_S = 2.0
CATCH_UP_S = 90.0  # consumers and the read-back must have read everything by then
FLUSH_S = 60.0
SESSION_MS = 3000

CONTROLLER_ARGS = ["--set", f"broker_session_timeout_ms={SESSION_MS}"]
BROKER_ARGS = ["--set", f"broker_heartbeat_interval_ms={SESSION_MS // 4}",
               "--set", "replica_lag_time_max_ms=3000",
               "--set", "offsets_topic_num_partitions=3",
               "--set", "offsets_topic_replication_factor=3",
               "--set", "group_initial_rebalance_delay_ms=0",
               "--set", "group_min_session_timeout_ms=1000"]
CLIENTS = ("ours", "confluent", "kafka-python", "aiokafka")


class Run:
    """What the workload's tasks and threads share."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.history = History()
        self.stop_producing = threading.Event()
        self.producers_done = threading.Event()
        self.deadline = 0.0  # monotonic; set once producing stopped
        self.read: dict[str, set[bytes]] = {name: set() for name in CLIENTS}
        self.errors: list[str] = []

    def acked(self, client: str | None = None) -> set[bytes]:
        return {op.value for op in self.history.ops if isinstance(op, Send) and op.acked
                and op.value is not None and (client is None or op.client == client)}

    def caught_up(self, name: str) -> bool:
        return self.producers_done.is_set() and self.acked() <= self.read[name]

    def reading(self, name: str) -> bool:
        """Whether a consumer should poll again."""
        if self.caught_up(name):
            return False
        return not self.producers_done.is_set() or time.monotonic() < self.deadline

    def value(self, client: str, n: int) -> bytes:
        return f"{client}-{n}".encode()


# ------------------------------------------------------------------------------- producers
async def produce_ours(run: Run) -> None:
    async with adapter_ours.Producer(run.bootstrap, acks="all", enable_idempotence=True,
                                     history=run.history, name="ours") as producer:
        n = 0
        while not run.stop_producing.is_set():
            await producer.send(TOPIC, run.value("ours", n), key=str(n % 7).encode())
            n += 1
            await asyncio.sleep(SEND_INTERVAL_S)
        await producer.flush(int(FLUSH_S * 1000))


async def produce_aiokafka(run: Run) -> None:
    producer = adapter_aiokafka.AIOKafkaProducer(
        bootstrap_servers=run.bootstrap, acks="all", enable_idempotence=True,
        history=run.history, name="aiokafka")
    await producer.start()
    try:
        n = 0
        while not run.stop_producing.is_set():
            await producer.send(TOPIC, run.value("aiokafka", n), key=str(n % 7).encode())
            n += 1
            await asyncio.sleep(SEND_INTERVAL_S)
        async with asyncio.timeout(FLUSH_S):
            await producer.flush()
    finally:
        await producer.stop()


def produce_confluent(run: Run) -> None:
    producer = adapter_confluent.Producer(
        {"bootstrap.servers": run.bootstrap, "acks": "all", "enable.idempotence": True,
         "linger.ms": 5, "message.timeout.ms": 60000}, history=run.history, name="confluent")
    n = 0
    while not run.stop_producing.is_set():
        producer.produce(TOPIC, run.value("confluent", n), str(n % 7).encode())
        n += 1
        producer.poll(SEND_INTERVAL_S)
    assert producer.flush(FLUSH_S) == 0, "confluent: records unacknowledged after the flush"


def produce_kafka_python(run: Run) -> None:
    producer = adapter_kafka_python.KafkaProducer(
        bootstrap_servers=run.bootstrap, acks="all", enable_idempotence=True,
        history=run.history, name="kafka-python")
    try:
        n = 0
        while not run.stop_producing.is_set():
            producer.send(TOPIC, run.value("kafka-python", n), str(n % 7).encode())
            n += 1
            time.sleep(SEND_INTERVAL_S)
        producer.flush(FLUSH_S)
    finally:
        producer.close(FLUSH_S)


# ------------------------------------------------------------------------------- consumers
async def consume_ours(run: Run) -> None:
    async with adapter_ours.Consumer(run.bootstrap, group_id="g-ours",
                                     auto_offset_reset="earliest", enable_auto_commit=False,
                                     session_timeout_ms=SESSION_MS, heartbeat_interval_ms=500,
                                     history=run.history, name="ours-consumer") as consumer:
        consumer.subscribe([TOPIC])
        while run.reading("ours"):
            try:
                records = await consumer.poll(timeout_ms=500)
                run.read["ours"].update(r.value for r in records if r.value is not None)
                if records:
                    await consumer.commit()
            except KafkaError as exc:  # a commit across the failover: retried by the next
                run.errors.append(f"ours: {exc!r}")


async def consume_aiokafka(run: Run) -> None:
    consumer = adapter_aiokafka.AIOKafkaConsumer(
        TOPIC, bootstrap_servers=run.bootstrap, group_id="g-aiokafka",
        auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500, history=run.history, name="aiokafka-consumer")
    await consumer.start()
    try:
        while run.reading("aiokafka"):
            try:
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    run.read["aiokafka"].update(r.value for r in records)
                if batches:
                    await consumer.commit()
            except Exception as exc:  # noqa: BLE001 - aiokafka's errors have no common base
                run.errors.append(f"aiokafka: {exc!r}")
                await asyncio.sleep(0.2)
    finally:
        await consumer.stop()


def consume_confluent(run: Run) -> None:
    import confluent_kafka

    consumer = adapter_confluent.Consumer(
        {"bootstrap.servers": run.bootstrap, "group.id": "g-confluent",
         "auto.offset.reset": "earliest", "enable.auto.commit": False,
         "session.timeout.ms": SESSION_MS}, history=run.history, name="confluent-consumer")
    consumer.subscribe([TOPIC])
    try:
        while run.reading("confluent"):
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            run.read["confluent"].add(msg.value())
            try:
                consumer.commit(asynchronous=False)
            except confluent_kafka.KafkaException as exc:
                run.errors.append(f"confluent: {exc!r}")
    finally:
        consumer.close()


def consume_kafka_python(run: Run) -> None:
    consumer = adapter_kafka_python.KafkaConsumer(
        TOPIC, bootstrap_servers=run.bootstrap, group_id="g-kafka-python",
        auto_offset_reset="earliest", enable_auto_commit=False, session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500, history=run.history, name="kafka-python-consumer")
    try:
        while run.reading("kafka-python"):
            try:
                batches = consumer.poll(timeout_ms=500)
                for records in batches.values():
                    run.read["kafka-python"].update(r.value for r in records)
                if batches:
                    consumer.commit()
            except Exception as exc:  # noqa: BLE001 - kafka-python's errors, retried by polling
                run.errors.append(f"kafka-python: {exc!r}")
                time.sleep(0.2)
    finally:
        consumer.close()


async def read_back(run: Run) -> None:
    """A fresh consumer of every partition from the start, until it has read every
    acknowledged value: the final log, as the checker takes it."""
    async with adapter_ours.Consumer(run.bootstrap, auto_offset_reset="earliest",
                                     history=run.history, name="read-back") as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        seen: set[bytes] = set()
        wanted = run.acked()
        deadline = time.monotonic() + CATCH_UP_S
        while not wanted <= seen and time.monotonic() < deadline:
            seen.update(r.value for r in await consumer.poll(timeout_ms=500)
                        if r.value is not None)
        assert wanted <= seen, f"the read-back missed {len(wanted - seen)} values"


# ------------------------------------------------------------------------------- the fault
def until(what: str, done: Callable[[], bool], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def each_producer_acked(run: Run, count: int, before: dict[str, int] | None = None) -> bool:
    return all(len(run.acked(c)) >= count + (before or {}).get(c, 0) for c in CLIENTS)


def kill_and_restart(cluster: Cluster, run: Run) -> None:
    until("each producer's first acknowledgements",
          lambda: each_producer_acked(run, ACKS_BEFORE_KILL), 60)
    victim = cluster.leaders(TOPIC)[0][0]
    run.history.record_fault("kill", (victim,), f"SIGKILL broker {victim}, leader of "
                             f"{TOPIC}-0")
    cluster.broker(victim).stop(signal.SIGKILL)
    time.sleep(DOWN_S)
    cluster.broker(victim).start()
    generation = cluster.broker(victim).wait_started()
    run.history.record_fault("restart", (victim,), f"broker {victim} back, generation "
                             f"{generation}")
    before = {c: len(run.acked(c)) for c in CLIENTS}
    until("each producer's acknowledgements after the restart",
          lambda: each_producer_acked(run, ACKS_BEFORE_KILL, before), 90)


async def workload(cluster: Cluster, run: Run) -> None:
    loop_tasks = [produce_ours(run), produce_aiokafka(run)]
    thread_producers = [produce_confluent, produce_kafka_python]
    consumers = [asyncio.ensure_future(consume_ours(run)),
                 asyncio.ensure_future(consume_aiokafka(run)),
                 asyncio.ensure_future(asyncio.to_thread(consume_confluent, run)),
                 asyncio.ensure_future(asyncio.to_thread(consume_kafka_python, run))]
    producers = [asyncio.ensure_future(t) for t in loop_tasks] + \
        [asyncio.ensure_future(asyncio.to_thread(p, run)) for p in thread_producers]
    try:
        await asyncio.to_thread(kill_and_restart, cluster, run)
    finally:
        run.stop_producing.set()
        await asyncio.gather(*producers)
        run.deadline = time.monotonic() + CATCH_UP_S
        run.producers_done.set()
        await asyncio.gather(*consumers)
    await read_back(run)


def test_four_clients_recorded_across_a_broker_kill_check_clean(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=3, controller_args=CONTROLLER_ARGS,
                 broker_args=BROKER_ARGS) as cluster:
        cluster.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                             **{"min.insync.replicas": "2"})
        run = Run(cluster.bootstrap)
        asyncio.run(workload(cluster, run))
    run.history.save(tmp_path / "history.jsonl")
    verdict = check(run.history)
    sends = [op for op in run.history.ops if isinstance(op, Send)]
    story = f"{verdict}\nerrors seen by the workload: {run.errors[:10]}"
    assert verdict.ok and not verdict.anomalies, story
    assert all(op.acked for op in sends), \
        f"unacknowledged sends: {[(op.client, op.error) for op in sends if not op.acked][:5]}"
    for name in CLIENTS:
        assert run.caught_up(name), f"{name}'s consumer did not read everything\n{story}"
    by_kind: dict[str, Any] = {}
    for op in run.history.ops:
        by_kind[type(op).__name__] = by_kind.get(type(op).__name__, 0) + 1
    assert by_kind["Fault"] == 2 and by_kind["Rebalance"] >= 4 and by_kind["Commit"] >= 4, \
        by_kind
    clients = {getattr(op, "client", None) for op in run.history.ops}
    assert {*CLIENTS, "ours-consumer", "confluent-consumer", "kafka-python-consumer",
            "aiokafka-consumer", "read-back"} <= clients
    assert check(History.load(tmp_path / "history.jsonl")) == verdict
    # The same history with one acknowledged value taken out of every poll: check sees it.
    lost = next(op.value for op in sends if op.client == "kafka-python")
    for op in run.history.ops:
        if isinstance(op, Poll):
            op.records = [r for r in op.records if r.value != lost]
    assert not check(run.history).ok
