"""`epochlog cluster up` as a user runs it: one command, a working cluster, a clean Ctrl-C."""

from __future__ import annotations

import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

WAIT_S = 30.0


def free_port_base() -> int:
    """A base P with P, P+1, P+2 and P+100 all free on 127.0.0.1."""
    for _ in range(50):
        base = random.randrange(20000, 40000)
        try:
            for port in (base, base + 1, base + 2, base + 100):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free port range")


class ClusterUp:
    def __init__(self, data_dir: Path, port_base: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "epochlog", "cluster", "up", "--brokers", "3",
             "--data-dir", str(data_dir), "--port-base", str(port_base)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self.changed:
                self.lines.append(raw.decode(errors="replace").rstrip())
                self.changed.notify_all()

    def wait_line(self, pattern: str) -> re.Match[str]:
        deadline = time.monotonic() + WAIT_S
        with self.changed:
            while True:
                for line in self.lines:
                    if m := re.search(pattern, line):
                        return m
                left = deadline - time.monotonic()
                quiet = not self.changed.wait(min(max(left, 0), 0.5))
                if left <= 0 or (quiet and self.proc.poll() is not None):
                    raise AssertionError(f"no line matching {pattern!r}:\n" + "\n".join(self.lines))

    def interrupt(self) -> int:
        self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(WAIT_S)


def produce_and_count(bootstrap: str, topic: str, n: int) -> int:
    confluent = pytest.importorskip("confluent_kafka")
    producer = confluent.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(WAIT_S) == 0
    consumer = confluent.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    low, high = consumer.get_watermark_offsets(confluent.TopicPartition(topic, 0), timeout=WAIT_S)
    consumer.close()
    return high - low


def test_cluster_up_serves_clients_and_stops_cleanly_keeping_data(tmp_path: Path) -> None:
    base = free_port_base()
    cluster = ClusterUp(tmp_path, base)
    try:
        bootstrap = cluster.wait_line(r"bootstrap servers: (\S+)").group(1)
        assert bootstrap == f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
        assert produce_and_count(bootstrap, "up", 100) == 100
        assert cluster.interrupt() == 0
    finally:
        if cluster.proc.poll() is None:
            cluster.proc.kill()
    for name in ("broker 1", "broker 2", "broker 3", "controller"):
        assert f"stopped {name}" in cluster.lines
    # Brokers stopped before the controller, each through a controlled shutdown.
    assert cluster.lines.index("stopped broker 3") < cluster.lines.index("stopped controller")
    assert sum("controlled shutdown" in line for line in cluster.lines) >= 3
    assert all((tmp_path / f"broker-{i}" / ".kafka_cleanshutdown").exists() for i in (1, 2, 3))

    again = ClusterUp(tmp_path, base)
    try:
        bootstrap = again.wait_line(r"bootstrap servers: (\S+)").group(1)
        assert produce_and_count(bootstrap, "up", 1) == 101, "data did not survive the restart"
        assert again.interrupt() == 0
    finally:
        if again.proc.poll() is None:
            again.proc.kill()


def test_cluster_up_refuses_bad_arguments(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "epochlog", "cluster", "up", "--brokers", "0",
                          "--data-dir", str(tmp_path)], capture_output=True, timeout=WAIT_S)
    assert out.returncode == 2 and b"--brokers must be" in out.stderr
