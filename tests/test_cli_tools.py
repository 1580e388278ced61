"""`epochlog topics|produce|consume` as a user runs them, against real processes."""

from __future__ import annotations

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from epochlog.client.partitioner import partition_for_key
from tests.broker.cluster import Cluster

WAIT_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(tmp_path_factory.mktemp("cli"), brokers=3) as c:
        yield c


def epochlog(cluster: Cluster, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "epochlog", *args,
                           "--bootstrap-server", cluster.bootstrap],
                          input=stdin, capture_output=True, timeout=WAIT_S)


def test_topic_lifecycle_produce_and_consume(cluster: Cluster) -> None:
    made = epochlog(cluster, "topics", "create", "cli-orders", "--partitions", "3",
                    "--replication-factor", "1", "--config", "retention.ms=600000")
    assert made.returncode == 0, made.stderr
    assert b"cli-orders" in epochlog(cluster, "topics", "list").stdout
    described = epochlog(cluster, "topics", "describe", "cli-orders").stdout.decode().splitlines()
    assert [line.split("\t")[1] for line in described] == [f"partition {p}" for p in range(3)]

    lines = [f"key{i % 7}:value {i}" for i in range(300)]
    sent = epochlog(cluster, "produce", "cli-orders", "--key-delimiter", ":", "--compression",
                    "lz4", stdin="\n".join(lines).encode() + b"\n")
    assert sent.returncode == 0 and b"produced 300 records" in sent.stderr, sent.stderr
    got = epochlog(cluster, "consume", "cli-orders", "--from-beginning", "--print-key")
    assert sorted(got.stdout.decode().splitlines()) == sorted(lines)
    # Keys went where Java's partitioner sends them, in the order written.
    p = partition_for_key(b"key3", 3)
    one = epochlog(cluster, "consume", "cli-orders", "--partition", str(p), "--offset", "0",
                   "--print-key").stdout.decode().splitlines()
    assert [x for x in one if x.startswith("key3:")] == [x for x in lines if x.startswith("key3:")]
    limited = epochlog(cluster, "consume", "cli-orders", "--from-beginning", "--max-messages", "5")
    assert len(limited.stdout.splitlines()) == 5

    assert epochlog(cluster, "topics", "delete", "cli-orders").returncode == 0


def test_errors_are_named_and_exit_1(cluster: Cluster) -> None:
    bad = epochlog(cluster, "topics", "create", "bad name!")
    assert bad.returncode == 1 and b"INVALID_TOPIC_EXCEPTION (17)" in bad.stderr
    assert epochlog(cluster, "topics", "create", "twice",
                    "--replication-factor", "1").returncode == 0
    again = epochlog(cluster, "topics", "create", "twice")
    assert again.returncode == 1 and b"TOPIC_ALREADY_EXISTS (36)" in again.stderr
    setting = epochlog(cluster, "topics", "create", "cfg", "--config", "retention.ms")
    assert setting.returncode == 1 and b"is not NAME=VALUE" in setting.stderr


def test_dump_log_of_a_big_segment_shows_progress_on_a_terminal_and_keeps_stdout_json(
        tmp_path: Path) -> None:
    """A segment past PROGRESS_BYTES_MIN, stderr a terminal (a pty): a rich progress bar is drawn
    there, while stdout stays one JSON line per batch."""
    from epochlog.broker.tools import PROGRESS_BYTES_MIN
    from epochlog.protocol.records import build_batch

    batch = build_batch([(None, b"x" * (1 << 20), None, None)])
    count = PROGRESS_BYTES_MIN // len(batch) + 2
    segment = tmp_path / "00000000000000000000.log"
    with open(segment, "wb") as f:
        for offset in range(count):  # base offsets 0, 1, 2...: a real segment's layout
            f.write(offset.to_bytes(8, "big") + batch[8:])
    controller, terminal = os.openpty()
    try:
        child = subprocess.Popen([sys.executable, "-m", "epochlog", "dump-log", str(segment)],
                                 stdout=subprocess.PIPE, stderr=terminal,
                                 env={**os.environ, "COLUMNS": "100"})
        os.close(terminal)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            stdout = pool.submit(child.stdout.read)  # type: ignore[union-attr]
            drawn = b""
            while True:  # the terminal's side, read as it is drawn (a full pty would block it)
                try:
                    chunk = os.read(controller, 65536)
                except OSError:  # EIO: the child closed its end
                    break
                if not chunk:
                    break
                drawn += chunk
            out = subprocess.CompletedProcess(child.args, child.wait(300), stdout.result(300))
    finally:
        os.close(controller)
        if child.poll() is None:
            child.kill()
            child.wait()
    assert out.returncode == 0
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert [line["base_offset"] for line in lines] == list(range(count))
    assert all(line["crc_valid"] for line in lines)
    assert b"dump-log" in drawn and b"MB" in drawn, drawn[-300:]


def test_version() -> None:
    done = subprocess.run([sys.executable, "-m", "epochlog", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("epochlog "), done


@pytest.mark.parametrize("command", [["apis"], ["topics", "list"]])
def test_a_closed_pipe_ends_quietly(cluster: Cluster, command: list[str]) -> None:
    """`epochlog ... | head -0`: the reader is gone before the first write; exit 0, and not a
    word on stderr (no 'Broken pipe', no traceback)."""
    args = command + (["--bootstrap-server", cluster.bootstrap] if command[0] == "topics" else [])
    child = subprocess.Popen([sys.executable, "-m", "epochlog", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()
    try:
        err = child.stderr.read()
        assert child.wait(60) == 0 and err == b"", err
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(60)
        child.stderr.close()
