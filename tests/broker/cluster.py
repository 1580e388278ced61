"""A controller and N brokers as real child processes on 127.0.0.1, for tests.

`Cluster` starts `epochlog controller` and `epochlog broker` children (the same commands a user
runs) on free ports, each with its own data dir under a base folder, and stops them: brokers first
(controlled shutdown needs the controller), then the controller. Every wait is bounded
(`WAIT_S`) and waits on an event: a log line the child prints (read by a thread per child, so
waiting needs no event loop) or an answer to a request. Synchronous on purpose, so that sync tests
(kafka-python, confluent-kafka, kcat), async tests and the `epochlog cluster up` tests can all use
it; `call()` sends one Kafka request from a worker thread with its own event loop.

    with Cluster(tmp_path, brokers=3) as cluster:
        cluster.bootstrap                      # "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
        cluster.create_topic("t", partitions=3, replication_factor=1)
        cluster.restart_broker(1)              # SIGTERM and start again: a higher generation
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from client.connection import Connection
from protocol.apis.create_topics import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from protocol.apis.metadata import MetadataRequest
from protocol.registry import APIS
from protocol.schema import Message

WAIT_S = 20.0
POLL_S = 0.05  # between readiness checks of a child that has no event to wait on
_BROKER_LISTENING = re.compile(r"broker (\d+) \(rack .*\) listening on .* \(advertised "
                               r"([\d.]+):(\d+)\), generation (\d+)")
_CONTROLLER_LISTENING = re.compile(r"listening on ([\d.]+):(\d+) with controller epoch (\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(host: str, port: int, key: int, message: Message, version: int | None = None,
         timeout_s: float = WAIT_S) -> Any:
    """One request on a fresh connection, from a worker thread with its own event loop (so it
    works from sync tests and from inside a running loop alike). version None: the highest
    both sides speak."""
    async def go() -> Any:
        conn = await Connection(host, port, request_timeout_ms=int(timeout_s * 1000)).connect()
        try:
            api = APIS[key]
            return await conn.request(api, conn.version_for(api) if version is None else version,
                                      message)
        finally:
            await conn.close()

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, go()).result(timeout_s + 5)


class Child:
    """One child process; a thread collects its stderr lines for waits and assertions."""

    def __init__(self, name: str, args: Sequence[str]) -> None:
        self.name = name
        self.args = list(args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None
        self._signalled = False

    def start(self) -> None:
        self.lines = []
        self._signalled = False
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "epochlog", *self.args], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self._reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self._reader.start()

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        for raw in proc.stderr:
            with self._changed:
                self.lines.append(raw.decode(errors="replace").rstrip())
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_line(self, pattern: str | re.Pattern[str], start: int = 0,
                  timeout_s: float = WAIT_S) -> re.Match[str]:
        """The first line from index `start` on matching pattern, waiting for it (bounded)."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for line in self.lines[start:]:
                    found = regex.search(line)
                    if found:
                        return found
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self.alive and self._reader_done():
                    raise AssertionError(f"{self.name}: no line matching {regex.pattern!r}; "
                                         "log:\n" + "\n".join(self.lines[-40:]))
                self._changed.wait(min(remaining, 1.0))

    def _reader_done(self) -> bool:
        return self._reader is None or not self._reader.is_alive()

    def has_line(self, text: str, start: int = 0) -> bool:
        """Whether a line containing text was read already. Only for lines the child printed
        before one already waited for (its lines arrive in order); otherwise use wait_line."""
        with self._changed:
            return any(text in line for line in self.lines[start:])

    def send_signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        """Send sig once per start: a second SIGTERM could land after the child removed its
        handler on the way out and kill it."""
        if self.proc is not None and self.proc.poll() is None and not self._signalled:
            self._signalled = True
            self.proc.send_signal(signal.SIGCONT)  # a paused child cannot handle SIGTERM
            self.proc.send_signal(sig)

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = WAIT_S) -> int:
        """terminate(sig), then wait for the exit; the exit code."""
        if self.proc is None:
            return 0
        self.terminate(sig)
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGUSR1)  # a broker logs its tasks' stacks
            time.sleep(1.0)
            self.proc.kill()
            self.proc.wait()
            if self._reader is not None:
                self._reader.join(1.0)
            raise AssertionError(f"{self.name} did not stop within {timeout_s}s; its log ends:\n"
                                 + "\n".join(self.lines[-120:])) from None
        if self._reader is not None:
            self._reader.join(timeout_s)
        return rc


class ControllerChild(Child):
    def __init__(self, data_dir: Path, port: int, args: Sequence[str] = ()) -> None:
        self.port = port
        self.data_dir = data_dir
        self.extra = list(args)
        self.epoch = -1
        super().__init__("controller", [])

    def start(self) -> None:
        self.args = ["controller", "--data-dir", str(self.data_dir), "--listen",
                     f"127.0.0.1:{self.port}", *self.extra]
        super().start()
        self.epoch = int(self.wait_line(_CONTROLLER_LISTENING).group(3))


class BrokerChild(Child):
    def __init__(self, broker_id: int, rack: str, data_dir: Path, port: int, controller: str,
                 args: Sequence[str] = ()) -> None:
        self.broker_id = broker_id
        self.rack = rack
        self.data_dir = data_dir
        self.port = port
        self.controller = controller
        self.extra = list(args)
        self.generation = -1
        super().__init__(f"broker {broker_id}", [])

    def start(self) -> None:
        self.args = ["broker", "--id", str(self.broker_id), "--rack", self.rack, "--listen",
                     f"127.0.0.1:{self.port}", "--controller", self.controller, "--data-dir",
                     str(self.data_dir), *self.extra]
        super().start()

    def wait_started(self) -> int:
        """Registered and through the first LeaderAndIsr of its generation; the generation."""
        self.generation = int(self.wait_line(_BROKER_LISTENING).group(4))
        self.wait_line(rf"generation {self.generation}: first LeaderAndIsr")
        return self.generation

    def call(self, key: int, message: Message, version: int | None = None) -> Any:
        return call("127.0.0.1", self.port, key, message, version)


class Cluster:
    def __init__(self, base_dir: Path | str, brokers: int = 3, *,
                 controller_args: Sequence[str] = (), broker_args: Sequence[str] = ()) -> None:
        self.base_dir = Path(base_dir)
        port = free_port()
        self.controller = ControllerChild(self.base_dir / "controller", port, controller_args)
        address = f"127.0.0.1:{port}"
        self.brokers: dict[int, BrokerChild] = {
            i: BrokerChild(i, "abcdefghijklmnopqrstuvwxyz"[(i - 1) % 26],
                           self.base_dir / f"broker-{i}", free_port(), address, broker_args)
            for i in range(1, brokers + 1)}

    # --------------------------------------------------------------------------- lifecycle
    def start(self) -> Cluster:
        self.controller.start()
        for b in self.brokers.values():
            b.start()
        for b in self.brokers.values():
            b.wait_started()
        self.wait_brokers_known()
        return self

    def stop(self) -> None:
        errors = []
        children = [*self.brokers.values(), self.controller]
        running = [child.alive for child in children]
        for b in self.brokers.values():
            b.terminate()  # all at once; then wait for each
        for child, was_running in zip(children, running):
            try:
                rc = child.stop()
            except AssertionError as exc:
                errors.append(str(exc))
                continue
            if was_running and rc != 0:
                errors.append(f"{child.name} exited with {rc} on SIGTERM:\n" +
                              "\n".join(child.lines[-20:]))
        if errors:
            raise AssertionError("; ".join(errors))

    def __enter__(self) -> Cluster:
        try:
            return self.start()
        except BaseException:
            self._kill_all()
            raise

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self._kill_all()

    def _kill_all(self) -> None:
        for child in [*self.brokers.values(), self.controller]:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.kill()
                child.proc.wait()

    def restart_broker(self, broker_id: int, sig: int = signal.SIGTERM) -> int:
        """Stop (SIGTERM: controlled; SIGKILL: a crash) and start again; the new generation."""
        b = self.brokers[broker_id]
        rc = b.stop(sig)
        if sig == signal.SIGTERM:
            assert rc == 0 and b.has_line("closed data dir"), "\n".join(b.lines[-20:])
        b.start()
        return b.wait_started()

    def restart_controller(self, sig: int = signal.SIGTERM) -> int:
        self.controller.stop(sig)
        self.controller.start()
        return self.controller.epoch

    # ------------------------------------------------------------------------------- helpers
    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{b.port}" for b in self.brokers.values())

    def broker(self, broker_id: int) -> BrokerChild:
        return self.brokers[broker_id]

    def any_broker(self) -> BrokerChild:
        return next(b for b in self.brokers.values() if b.alive)

    def metadata(self, broker_id: int | None = None, topics: list[str] | None = None) -> Any:
        b = self.brokers[broker_id] if broker_id is not None else self.any_broker()
        from protocol.apis.metadata import MetadataRequestTopic
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False)
        return b.call(3, request)

    def wait_brokers_known(self) -> None:
        """Every live broker's metadata lists every live broker (bounded)."""
        live = {i for i, b in self.brokers.items() if b.alive}
        for i in live:
            self._poll(lambda i=i: {b.node_id for b in self.metadata(i, []).brokers} == live,
                       f"broker {i} to know brokers {sorted(live)}")

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1,
                     broker_id: int | None = None, **configs: str) -> Any:
        """CreateTopics through a broker (forwarded to the controller), then wait until every
        partition has a leader that says so in its own metadata (it got the LeaderAndIsr)."""
        b = self.brokers[broker_id] if broker_id is not None else self.any_broker()
        answer = b.call(19, CreateTopicsRequest(topics=[CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=replication_factor,
            configs=[CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])]))
        result = answer.topics[0]
        assert result.error_code == 0, result
        self.wait_leaders(name, partitions)
        return result

    def leaders(self, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (leader id, leader epoch), from any broker's metadata."""
        md = self.metadata(topics=[topic])
        return {p.partition_index: (p.leader_id, p.leader_epoch)
                for t in md.topics for p in t.partitions}

    def wait_leaders(self, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
        """Until each partition's leader has processed its LeaderAndIsr (its log says so)."""
        def ready() -> bool:
            leaders = self.leaders(topic)
            if len(leaders) != partitions or any(lid < 0 for lid, _ in leaders.values()):
                return False
            return all(self.brokers[lid].has_line(
                f"{topic}-{index}: became LEADER at leader epoch {epoch}")
                for index, (lid, epoch) in leaders.items())
        self._poll(ready, f"leaders of {topic}")
        return self.leaders(topic)

    @staticmethod
    def _poll(check: Any, what: str, timeout_s: float = WAIT_S) -> None:
        """Repeat a check of another process's state until it holds (bounded). Used only
        where no event exists to wait on; each try is one request."""
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(POLL_S)
