"""`epochlog consume`: every wait bounded, on real processes.

- With --group, a cluster gone away (SIGKILLed) ends the tool by itself within its --timeout-ms
  (plus the bounded close): exit 1 and one line saying what it waited for, no traceback.
- Ctrl-C with the cluster gone: the first one ends the tool within the close bound (exit 130)
  without retrying its commit more than a handful of times; a second one ends it at once.
- --max-messages with stderr a terminal (a pty) draws a rich progress bar there, stdout
  unchanged.
Bounds are generous (EXIT_S_MAX): the tests wait for events, not for wall-clock figures.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafka import KafkaProducer

from tests.broker.cluster import Cluster

EXIT_S_MAX = 60.0  # generous: a child asked to stop, or whose cluster is gone, ends within this
ROOT = Path(__file__).resolve().parents[2]
BROKER_ARGS = ("--set", "group_initial_rebalance_delay_ms=0",
               "--set", "group_min_session_timeout_ms=1000")
ATTEMPTS = re.compile(rb"(\d+) attempts")


@contextmanager
def consume(bootstrap: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(
        [sys.executable, "-m", "epochlog", "consume", *args, "--bootstrap-server", bootstrap],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        yield child
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(EXIT_S_MAX)
        for stream in (child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        for i in range(count):
            producer.send(topic, b"v%d" % i)
        producer.flush(EXIT_S_MAX)
    finally:
        producer.close()


def read_until(stream: object, text: bytes, seen: bytearray) -> None:
    """Read a child's stream (non-blocking) until text appears, bounded by EXIT_S_MAX."""
    fd = stream.fileno()  # type: ignore[attr-defined]
    os.set_blocking(fd, False)
    deadline = time.monotonic() + EXIT_S_MAX
    try:
        while text not in seen:
            assert time.monotonic() < deadline, f"no {text!r}: {bytes(seen[-2000:])!r}"
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                chunk = b""
            if chunk:
                seen += chunk
            else:
                time.sleep(0.05)
    finally:
        os.set_blocking(fd, True)


def finish(child: subprocess.Popen[bytes], err: bytearray) -> tuple[int, bytes]:
    """The child's exit code (bounded wait) and all it wrote on stderr."""
    _, rest = child.communicate(timeout=EXIT_S_MAX)
    return child.returncode, bytes(err) + rest


def member(cluster: Cluster, topic: str, *args: str) -> tuple[list[str], bytearray]:
    produce(cluster.bootstrap, topic, 5)
    return [topic, "--group", f"g-{topic}", "--from-beginning", "--log-level", "INFO",
            "--consumer-property", "session_timeout_ms=2000",
            "--consumer-property", "heartbeat_interval_ms=200", *args], bytearray()


def test_a_cluster_gone_away_ends_group_consume_within_its_timeout(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1, broker_args=BROKER_ARGS) as cluster:
        cluster.create_topic("gone")
        args, out = member(cluster, "gone", "--timeout-ms", "3000")
        with consume(cluster.bootstrap, *args) as child:
            read_until(child.stdout, b"v4\n", out)  # a member with partitions, reading
            cluster._kill_all()  # SIGKILL: the cluster is gone without a word
            code, err = finish(child, bytearray())
    assert code == 1, err.decode(errors="replace")[-3000:]
    assert b"no answer from the cluster" in err and b"Traceback" not in err, err[-3000:]


def test_ctrl_c_with_the_cluster_gone_ends_in_bounds_and_a_second_at_once(
        tmp_path: Path) -> None:
    """Two members, each of its own group and owning its partition, so that each has a commit
    to make on the way out, to a cluster that is gone."""
    with Cluster(tmp_path, brokers=1, broker_args=BROKER_ARGS) as cluster:
        cluster.create_topic("stop-a")
        cluster.create_topic("stop-b")
        args_a, out_a = member(cluster, "stop-a")
        args_b, out_b = member(cluster, "stop-b")
        with consume(cluster.bootstrap, *args_a) as first, \
                consume(cluster.bootstrap, *args_b) as second:
            err_first, err_second = bytearray(), bytearray()
            read_until(first.stdout, b"v4\n", out_a)  # positions to commit on the way out
            read_until(second.stdout, b"v4\n", out_b)
            cluster._kill_all()
            first.send_signal(signal.SIGINT)
            second.send_signal(signal.SIGINT)
            read_until(second.stderr, b"again to quit at once", err_second)
            second.send_signal(signal.SIGINT)
            code_second, text_second = finish(second, err_second)
            code_first, text_first = finish(first, err_first)
    assert code_second == 130 and b"quitting at once" in text_second, text_second[-3000:]
    # The first one tried its commit and left within its bounds: a handful of attempts at
    # most, not hundreds, and said what it waited for
    assert code_first == 130, text_first[-3000:]
    assert b"Traceback" not in text_first, text_first[-3000:]
    assert b"waiting for the coordinator" in text_first, text_first[-3000:]
    attempts = [int(n) for n in ATTEMPTS.findall(text_first)]
    assert all(n <= 20 for n in attempts), text_first[-3000:]


def test_consume_max_messages_draws_progress_on_a_terminal(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1, broker_args=BROKER_ARGS) as cluster:
        cluster.create_topic("bar")
        produce(cluster.bootstrap, "bar", 200)
        controller, terminal = os.openpty()
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", "epochlog", "consume", "bar", "--from-beginning",
                 "--max-messages", "200", "--bootstrap-server", cluster.bootstrap],
                stdout=subprocess.PIPE, stderr=terminal, cwd=ROOT,
                env={**os.environ, "COLUMNS": "100"})
            os.close(terminal)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                stdout = pool.submit(child.stdout.read)  # type: ignore[union-attr]
                drawn = b""
                while True:  # the terminal's side, read as it is drawn
                    try:
                        chunk = os.read(controller, 65536)
                    except OSError:  # EIO: the child closed its end
                        break
                    if not chunk:
                        break
                    drawn += chunk
                code, printed = child.wait(EXIT_S_MAX), stdout.result(EXIT_S_MAX)
        finally:
            os.close(controller)
            if child.poll() is None:
                child.kill()
                child.wait()
    assert code == 0
    assert printed.splitlines() == [b"v%d" % i for i in range(200)]
    assert b"consuming bar" in drawn, drawn[-500:]
