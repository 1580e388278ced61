"""`epochlog produce` as a user runs it: a real child process against a real cluster.

It streams (records are readable while stdin is still open), batches by bytes (2,100 lines of
500 B once failed with MESSAGE_TOO_LARGE and wrote nothing), and always ends by itself within
the bounds it was given: the end of stdin, a cluster that went away (exit 1 within the delivery
timeout, one line naming the error), Ctrl-C (what was read is delivered, exit 130) and a second
Ctrl-C (at once). Bad input is one line and exit 1, never a traceback. Every child is reaped in
a finally block; waits are bounded and generous (CI runs on two busy cores).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from kafka import KafkaConsumer, TopicPartition

from tests.broker.cluster import Cluster, free_port

EXIT_S_MAX = 30.0  # generous: a child asked to stop must be gone well within this
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def produce(bootstrap: str, topic: str, *args: str) -> Iterator[subprocess.Popen[bytes]]:
    child = subprocess.Popen(
        [sys.executable, "-m", "epochlog", "produce", topic, "--bootstrap-server", bootstrap,
         *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        cwd=ROOT, start_new_session=True)
    try:
        yield child
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        child.wait(EXIT_S_MAX)
        for stream in (child.stdin, child.stdout, child.stderr):
            if stream is not None:
                stream.close()


def finish(child: subprocess.Popen[bytes]) -> tuple[int, str]:
    """Wait for the child's exit (bounded); its code and stderr."""
    if child.stdin is not None and child.stdin.closed:
        child.stdin = None  # communicate() would flush it
    _, err = child.communicate(timeout=EXIT_S_MAX)
    return child.returncode, err.decode()


def read_values(bootstrap: str, topic: str, count: int, partitions: int = 1) -> list[bytes]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        values: list[bytes] = []
        deadline = time.monotonic() + EXIT_S_MAX
        while len(values) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values += [r.value for r in records]
        return values
    finally:
        consumer.close()


def test_lines_are_sent_while_stdin_is_still_open(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster, produce(cluster.bootstrap, "stream") as child:
        assert child.stdin is not None
        child.stdin.write(b"".join(b"early-%d\n" % i for i in range(10)))
        child.stdin.flush()
        assert read_values(cluster.bootstrap, "stream", 10) == [b"early-%d" % i
                                                                for i in range(10)]
        assert child.poll() is None, "it must not have waited for the end of stdin to send"
        child.stdin.write(b"late\n")
        child.stdin.close()
        code, err = finish(child)
        assert code == 0 and "produced 11 records to stream" in err, err


def test_batches_are_bounded_in_bytes_not_lines(tmp_path: Path) -> None:
    lines = [b"%04d" % i + b"x" * 496 for i in range(2100)]
    with Cluster(tmp_path, brokers=1) as cluster, produce(cluster.bootstrap, "wide") as child:
        assert child.stdin is not None
        child.stdin.write(b"\n".join(lines) + b"\n")
        child.stdin.close()
        code, err = finish(child)
        assert code == 0 and "produced 2100 records" in err, err
        assert read_values(cluster.bootstrap, "wide", 2100) == lines


def test_bad_input_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster:
        cluster.create_topic("three", partitions=3)
        for args, message in [
            (["--partition", "99"], "three has no partition 99 (it has 3: 0-2)"),
            (["--producer-property", "no_such_setting=1"], "--producer-property: "),
            (["--producer-property", "linger_ms"], "is not NAME=VALUE"),
            (["--delivery-timeout-ms", "0"], "--delivery-timeout-ms must be positive"),
        ]:
            with produce(cluster.bootstrap, "three", *args) as child:
                assert child.stdin is not None
                child.stdin.close()
                code, err = finish(child)
                assert code == 1 and message in err and "Traceback" not in err, (args, err)
    with produce(f"127.0.0.1:{free_port()}", "t") as child:  # no cluster at all
        assert child.stdin is not None
        child.stdin.close()
        code, err = finish(child)
        assert code == 1 and "Connection refused" in err and "Traceback" not in err, err


def test_a_cluster_gone_away_ends_it_within_the_delivery_timeout(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster, \
            produce(cluster.bootstrap, "gone", "--delivery-timeout-ms", "2000") as child:
        assert child.stdin is not None
        child.stdin.write(b"before\n")
        child.stdin.flush()
        assert read_values(cluster.bootstrap, "gone", 1) == [b"before"]
        cluster._kill_all()  # SIGKILL: the cluster is gone without a word
        for i in range(50):
            child.stdin.write(b"after-%d\n" % i)
        child.stdin.flush()  # stdin stays open: the tool must end by itself
        code, err = finish(child)
        assert code == 1, err
        assert "were not delivered to gone" in err and "Traceback" not in err, err


def test_ctrl_c_delivers_what_was_read_and_a_second_quits_at_once(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster:
        with produce(cluster.bootstrap, "stop") as child:
            assert child.stdin is not None
            child.stdin.write(b"".join(b"v%d\n" % i for i in range(100)))
            child.stdin.flush()
            assert len(read_values(cluster.bootstrap, "stop", 100)) == 100
            child.send_signal(signal.SIGINT)
            code, err = finish(child)
            assert code == 130 and "produced 100 records to stop" in err, err
        # With the cluster gone and a long delivery timeout, the first Ctrl-C would wait for
        # the records in hand; the second must not.
        with produce(cluster.bootstrap, "stop", "--delivery-timeout-ms", "600000",
                     "--log-level", "INFO") as child:
            assert child.stdin is not None
            child.stdin.write(b"x\n")
            child.stdin.flush()
            assert len(read_values(cluster.bootstrap, "stop", 101)) == 101
            cluster._kill_all()
            child.stdin.write(b"stuck\n")
            child.stdin.flush()
            _wait_for_line(child, b"unreachable")  # it tried to send "stuck": it is in hand
            child.send_signal(signal.SIGINT)
            _wait_for_line(child, b"again to quit at once")
            child.send_signal(signal.SIGINT)
            code, err = finish(child)
            assert code == 130 and "quitting at once" in err, err


def _wait_for_line(child: subprocess.Popen[bytes], text: bytes) -> None:
    """Read the child's stderr until text appears (bounded by EXIT_S_MAX)."""
    assert child.stderr is not None
    os.set_blocking(child.stderr.fileno(), False)
    seen = b""
    deadline = time.monotonic() + EXIT_S_MAX
    while text not in seen:
        assert time.monotonic() < deadline, f"no {text!r} on stderr: {seen!r}"
        chunk = child.stderr.read()
        if chunk:
            seen += chunk
        else:
            time.sleep(0.05)
    os.set_blocking(child.stderr.fileno(), True)
