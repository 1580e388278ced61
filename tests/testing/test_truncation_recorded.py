"""Truncations as the adapters record them, on real processes, and the checker's verdict on a
real client that reads across one silently.

Two brokers; a topic with replication factor 2, min.insync.replicas 1 and unclean election
allowed. A leads; B takes the `early` records; B is killed; A alone acknowledges the acks=1
`tail`; five consumers, one per client (epochlog's with auto_offset_reset "earliest" and with
"none", confluent-kafka, kafka-python, aiokafka), each assigned the partition, read early and
tail. A is killed, B returns and is elected uncleanly, takes the `new` records (more than the
tail, so the consumers' positions exist again in the new log), and A returns and truncates.
The consumers read on. Those that validate their position against the leader epoch (KIP-320)
meet the truncation: asked to report it (epochlog's with "none", librdkafka with "error",
kafka-python with "none"), they do, each in its own way (a LogTruncationError, an
_AUTO_OFFSET_RESET error saying so), and the adapters record it; epochlog's with "earliest"
announces its reset in its counters, which its adapter records; librdkafka and kafka-python with
"earliest" move back to where the logs part and tell the application nothing. aiokafka does not
validate (it is paused while the leadership moves, see AioKafka), reads on at its old position,
and so skips new records without a word. A fresh consumer reads the final log.

With the loss declared expected, check passes every consumer but aiokafka, whose read across
the truncation is the one failing anomaly; the history without aiokafka's consumer passes.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiokafka.structs
import confluent_kafka
import kafka
import pytest
from kafka.errors import LogTruncationError as KPLogTruncationError

from epochlog.client import LogTruncationError, TopicPartition
from epochlog.testing import (
    History,
    adapter_aiokafka,
    adapter_confluent,
    adapter_kafka_python,
    adapter_ours,
    check,
)
from epochlog.testing.history import Truncation
from tests.broker.cluster import Cluster
from tests.chaos.replicas import state_from, wait_quiet

T = TypeVar("T")
TOPIC = "truncated"
TP = TopicPartition(TOPIC, 0)
AIO_TP = aiokafka.structs.TopicPartition(TOPIC, 0)
EARLY, TAIL, NEW = 10, 10, 15
WAIT_S = 45.0
SESSION_MS = 3000
CONTROLLER_ARGS = ["--set", f"broker_session_timeout_ms={SESSION_MS}"]
BROKER_ARGS = ["--set", f"broker_heartbeat_interval_ms={SESSION_MS // 4}",
               "--set", "replica_lag_time_max_ms=3000"]


class Loop:
    """An event loop on a thread of its own, for the asyncio clients that outlive one step."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = WAIT_S) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() for i in range(n)]


class Reader:
    """One recording consumer of TP; read_until polls it until it has seen every value."""

    name = ""

    def __init__(self) -> None:
        self.seen: set[bytes] = set()

    def poll_once(self) -> None:
        raise NotImplementedError

    def read_until(self, wanted: set[bytes]) -> None:
        deadline = time.monotonic() + WAIT_S
        while not wanted <= self.seen:
            assert time.monotonic() < deadline, f"{self.name} did not read " \
                f"{sorted(wanted - self.seen)[:5]}"
            self.poll_once()

    def close(self) -> None:
        pass


class Ours(Reader):
    def __init__(self, loop: Loop, bootstrap: str, history: History, reset: str) -> None:
        super().__init__()
        self.name, self.loop = f"ours-{reset}", loop
        self.consumer = adapter_ours.Consumer(bootstrap, auto_offset_reset=reset,
                                              history=history, name=self.name)
        loop.run(self.consumer.start())
        self.consumer.assign([TP])
        if reset == "none":
            self.consumer.seek(TP, 0)

    def poll_once(self) -> None:
        try:
            records = self.loop.run(self.consumer.poll(timeout_ms=300))
        except LogTruncationError as exc:  # recorded by the adapter; resume where logs agree
            for tp, (offset, epoch) in exc.divergent_offsets.items():
                self.consumer.seek(tp, offset, epoch)
            return
        self.seen.update(r.value for r in records if r.value is not None)

    def close(self) -> None:
        self.loop.run(self.consumer.close())


class Confluent(Reader):
    def __init__(self, bootstrap: str, history: History, reset: str) -> None:
        super().__init__()
        self.name = f"confluent-{reset}"
        self.consumer = adapter_confluent.Consumer(
            {"bootstrap.servers": bootstrap, "group.id": "unused", "auto.offset.reset": reset,
             "enable.auto.commit": False}, history=history, name=self.name)
        self.consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0,
                                                             confluent_kafka.OFFSET_BEGINNING)])

    def poll_once(self) -> None:
        msg = self.consumer.poll(0.3)
        if msg is None:
            return
        if msg.error() is None:
            self.seen.add(msg.value())
        elif adapter_confluent.is_truncation(msg.error()):
            # recorded by the adapter; resume where the logs agree (librdkafka leaves the
            # partition stopped in an error state, where only assign() can move it)
            offset = adapter_confluent.truncation_offset(msg)
            assert offset is not None, msg.error()
            self.consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, offset)])

    def close(self) -> None:
        self.consumer.close()


class KafkaPython(Reader):
    def __init__(self, bootstrap: str, history: History, reset: str) -> None:
        super().__init__()
        self.name = f"kafka-python-{reset}"
        self.consumer = adapter_kafka_python.KafkaConsumer(
            bootstrap_servers=bootstrap, auto_offset_reset=reset, enable_auto_commit=False,
            history=history, name=self.name)
        self.consumer.assign([kafka.TopicPartition(TOPIC, 0)])
        if reset == "none":
            self.consumer.seek(kafka.TopicPartition(TOPIC, 0), 0)

    def poll_once(self) -> None:
        try:
            batches = self.consumer.poll(timeout_ms=300)
        except KPLogTruncationError as exc:  # recorded by the adapter; resume where logs agree
            for tp, position in exc.divergent_offsets.items():
                self.consumer.seek(tp, position.offset)
            return
        self.seen.update(r.value for records in batches.values() for r in records)

    def close(self) -> None:
        self.consumer.close()


class AioKafka(Reader):
    name = "aiokafka"

    def __init__(self, loop: Loop, bootstrap: str, history: History) -> None:
        super().__init__()
        self.loop = loop

        async def start() -> adapter_aiokafka.AIOKafkaConsumer:
            consumer = adapter_aiokafka.AIOKafkaConsumer(  # aiokafka: made on its loop
                bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                enable_auto_commit=False, metadata_max_age_ms=500, history=history,
                name=self.name)
            await consumer.start()
            consumer.assign([AIO_TP])
            return consumer

        self.consumer = loop.run(start())

    def pause(self) -> None:
        """No fetching in the background while the new leader's log is shorter than our
        position: an out-of-range reset would hide what this test is about."""
        async def pause() -> None:  # on aiokafka's own loop
            self.consumer.pause(AIO_TP)

        self.loop.run(pause())

    def resume_once_it_knows(self, leader: int) -> None:
        """Resume once aiokafka's own metadata names the new leader. (It never asks again
        after a NotLeaderForPartition answer to a reset, so, fetching from the old leader
        first, it would reset to the start and loop on that answer; pausing until it knows
        keeps this test about what it does with a position the new log holds again.)"""
        async def leader_known() -> bool:
            return bool(self.consumer._client.cluster.leader_for_partition(AIO_TP) == leader)

        deadline = time.monotonic() + WAIT_S
        while not self.loop.run(leader_known()):
            assert time.monotonic() < deadline, "aiokafka never learnt the new leader"
            time.sleep(0.1)

        async def resume() -> None:
            self.consumer.resume(AIO_TP)

        self.loop.run(resume())

    def poll_once(self) -> None:
        batches = self.loop.run(self.consumer.getmany(timeout_ms=300))
        self.seen.update(r.value for records in batches.values() for r in records)

    def close(self) -> None:
        self.loop.run(self.consumer.stop())


def produce(loop: Loop, address: str, history: History, name: str, batch: list[bytes],
            acks: str) -> None:
    async def go() -> None:
        async with adapter_ours.Producer(address, acks=acks, enable_idempotence=False,
                                         history=history, name=name) as producer:
            for value in batch:
                await producer.send_and_wait(TOPIC, value)

    loop.run(go())


def wait_for(check_: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while True:
        try:
            if check_():
                return
        except (OSError, TimeoutError):  # a broker restarting: ask again
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def kill(cluster: Cluster, broker: int, history: History) -> None:
    mark = len(cluster.controller.lines)
    history.record_fault("kill", (broker,), f"SIGKILL broker {broker}")
    cluster.broker(broker).stop(signal.SIGKILL)
    cluster.controller.wait_line(rf"broker {broker} generation \d+ is dead", start=mark,
                                 timeout_s=WAIT_S)


def restart(cluster: Cluster, broker: int, history: History) -> None:
    cluster.broker(broker).start()
    cluster.broker(broker).wait_started()
    history.record_fault("restart", (broker,), f"broker {broker} back")


@pytest.fixture(scope="module")
def truncated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[History, Path]]:
    history = History()
    history.expect_loss("unclean election with acks=1")
    loop = Loop()
    readers: list[Reader] = []
    base = tmp_path_factory.mktemp("truncation-recorded")
    try:
        with Cluster(base, brokers=2, controller_args=CONTROLLER_ARGS,
                     broker_args=BROKER_ARGS) as cluster:
            cluster.create_topic(TOPIC, partitions=1, replication_factor=2,
                                 **{"min.insync.replicas": "1",
                                    "unclean.leader.election.enable": "true"})
            a = cluster.leaders(TOPIC)[0][0]
            b = 3 - a
            produce(loop, cluster.bootstrap, history, "early", values("early", EARLY), "all")
            kill(cluster, b, history)
            wait_for(lambda: list(state_from(cluster, a, TOPIC).isr_nodes) == [a], "ISR [A]")
            only_a = f"127.0.0.1:{cluster.broker(a).port}"
            produce(loop, only_a, history, "tail", values("tail", TAIL), "1")
            aiokafka = AioKafka(loop, only_a, history)
            readers += [Ours(loop, only_a, history, "earliest"),
                        Ours(loop, only_a, history, "none"),
                        Confluent(only_a, history, "earliest"),
                        Confluent(only_a, history, "error"),
                        KafkaPython(only_a, history, "earliest"),
                        KafkaPython(only_a, history, "none"), aiokafka]
            for reader in readers:
                reader.read_until(set(values("early", EARLY) + values("tail", TAIL)))
            aiokafka.pause()

            kill(cluster, a, history)
            restart(cluster, b, history)
            cluster.controller.wait_line(f"UNCLEAN leader election for {TOPIC}-0: broker {b} ")
            wait_for(lambda: state_from(cluster, b, TOPIC).leader_id == b, "B to lead")
            only_b = f"127.0.0.1:{cluster.broker(b).port}"
            produce(loop, only_b, history, "new", values("new", NEW), "all")
            restart(cluster, a, history)
            wait_quiet(cluster, TOPIC, 1, replicas=2)
            aiokafka.resume_once_it_knows(b)

            last = {values("new", NEW)[-1]}
            for reader in readers:
                reader.read_until(last)
            read_back = Ours(loop, cluster.bootstrap, history, "earliest")
            readers.append(read_back)
            read_back.read_until(set(values("early", EARLY) + values("new", NEW)))
            for reader in readers:
                reader.close()
            readers.clear()
    finally:
        for reader in readers:
            try:
                reader.close()
            except Exception:  # noqa: BLE001 - the first failure is the one reported
                pass
        loop.close()
    path = base / "history.jsonl"
    history.save(path)
    yield history, path


def reported(history: History) -> dict[str, set[str]]:
    """client -> how it reported truncations"""
    out: dict[str, set[str]] = {}
    for op in history.ops:
        if isinstance(op, Truncation) and op.how != "seek":
            out.setdefault(op.client, set()).add(op.how)
    return out


def test_validating_clients_report_the_truncation_and_the_adapters_record_it(
        truncated: tuple[History, Path]) -> None:
    history, _ = truncated
    assert reported(history) == {"ours-earliest": {"reset"}, "ours-none": {"error"},
                                 "confluent-error": {"error"}, "kafka-python-none": {"error"}}, \
        [op for op in history.ops if isinstance(op, Truncation)]
    divergent = {op.offset for op in history.ops if isinstance(op, Truncation)
                 and op.how != "seek"}
    assert divergent == {EARLY}  # where the old and the new leader's logs part


def test_check_fails_only_the_client_that_read_across_silently(
        truncated: tuple[History, Path]) -> None:
    history, path = truncated
    verdict = check(history)
    assert not verdict.ok
    assert verdict.failing == {"unreported-truncation": 1}, verdict
    (silent,) = [a for a in verdict.anomalies if a.kind == "unreported-truncation"]
    assert "aiokafka read offset 10" in silent.explanation, silent
    assert verdict.counts["inconsistent-offsets"] >= TAIL  # the tail's offsets, reused
    assert all(a.expected for a in verdict.anomalies if a.kind != "unreported-truncation")
    assert check(History.load(path)) == verdict

    without = History()
    for op in history.ops:  # the same history without aiokafka's consumer
        if getattr(op, "client", None) != "aiokafka":
            without._ops.append(op)
    assert check(without).ok, check(without)
