"""`epochlog consume TOPIC` without a group, as a user runs it: through the library's Consumer,
so `--follow` goes on across a leader failover (it once ended with "closed by the server"),
stops at the end offsets it started with otherwise, and says why when the cluster is gone.
Bad --consumer-property values are one line and exit 1."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from typing import Any

from kafka import KafkaProducer

from epochlog.testing import until

WAIT_S = 60.0


def send(bootstrap: str, topic: str, values: list[bytes]) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=10)
    for value in values:
        producer.send(topic, value=value, partition=0)
    producer.flush(30)
    producer.close()


def consume(bootstrap: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "epochlog", "consume", *args,
                             "--bootstrap-server", bootstrap], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)


def read_lines(child: subprocess.Popen[bytes], count: int, into: list[bytes]) -> list[bytes]:
    """Lines of the child's stdout until there are count of them (bounded). Reads the pipe
    itself (os.read), so no line sits in a buffer the selector cannot see."""
    assert child.stdout is not None
    fd = child.stdout.fileno()
    sel = selectors.DefaultSelector()
    sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + WAIT_S
    pending = getattr(child, "pending", b"")
    while len(into) < count:
        assert time.monotonic() < deadline, f"read {len(into)} of {count} lines: {into[-3:]}"
        if sel.select(timeout=1.0):
            chunk = os.read(fd, 65536)
            assert chunk, f"the consumer ended: {child.stderr.read() if child.stderr else ''}"
            pending += chunk
            *lines, pending = pending.split(b"\n")
            into += lines
    sel.close()
    child.pending = pending  # type: ignore[attr-defined]
    return into


def reap(child: subprocess.Popen[bytes]) -> None:
    if child.poll() is None:
        os.killpg(child.pid, signal.SIGKILL)
    child.wait(WAIT_S)
    for stream in (child.stdout, child.stderr):
        if stream is not None:
            stream.close()


def test_follow_goes_on_across_a_leader_failover(epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=3, settings={"min.insync.replicas": 2})
    c.create_topic("moving", partitions=1, replication_factor=3)
    send(c.bootstrap_servers, "moving", [b"before-%d" % i for i in range(5)])
    child = consume(c.bootstrap_servers, "moving", "--partition", "0", "--from-beginning",
                    "--follow")
    try:
        lines = read_lines(child, 5, [])
        old = c.leader_of("moving", 0)
        c.kill(old)
        until(lambda: c.leader_of("moving", 0) != old, "a new leader", WAIT_S)
        send(c.bootstrap_servers, "moving", [b"after-%d" % i for i in range(5)])
        read_lines(child, 10, lines)
        assert lines == [b"before-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(5)]
        assert child.poll() is None, "--follow ended by itself"
        child.send_signal(signal.SIGINT)
        assert child.wait(WAIT_S) == 130
    finally:
        reap(child)


def test_without_follow_it_stops_at_the_end_it_started_with(epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=1)
    c.create_topic("fixed", partitions=2, replication_factor=1)
    send(c.bootstrap_servers, "fixed", [b"v%d" % i for i in range(7)])
    done = subprocess.run([sys.executable, "-m", "epochlog", "consume", "fixed",
                           "--from-beginning", "--bootstrap-server", c.bootstrap_servers],
                          capture_output=True, timeout=WAIT_S)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [b"v%d" % i for i in range(7)]
    bad = subprocess.run([sys.executable, "-m", "epochlog", "consume", "fixed", "--group", "g",
                          "--consumer-property", "session_timeout_ms=abc",
                          "--bootstrap-server", c.bootstrap_servers],
                         capture_output=True, text=True, timeout=WAIT_S)
    assert bad.returncode == 1 and bad.stderr == (
        "epochlog: --consumer-property session_timeout_ms='abc': expected an integer\n"), bad
    missing = subprocess.run([sys.executable, "-m", "epochlog", "consume", "fixed",
                              "--partition", "5", "--bootstrap-server", c.bootstrap_servers],
                             capture_output=True, text=True, timeout=WAIT_S)
    assert missing.returncode == 1 and "fixed has no partition 5" in missing.stderr, missing
