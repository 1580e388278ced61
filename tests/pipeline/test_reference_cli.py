"""The reference pipeline as its users run it: `python -m epochlog.pipeline.reference run`, in a
process of its own (and its Spark JVM), against a real broker.

What is checked, and why: Ctrl-C ends it with one line on stderr and exit code 130 (the CLI's
convention). A terminal's Ctrl-C sends SIGINT to the whole foreground process group (the JVM
and Spark's Python workers too), so the test does the same: the pipeline starts in a session of
its own and the signal goes to its group. Before, PySpark's own SIGINT handler called into the
JVM from inside the handler and py4j logged a traceback for each call that failed, Spark logged
the micro-batch the stop interrupted, and the run exited 0.

The child and its JVM are killed and reaped even when the test fails."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochlog.client import Admin, TopicPartition
from tests.broker.cluster import Cluster
from tests.pipeline.conftest import produce

ROOT = Path(__file__).resolve().parent.parent.parent
STARTED_S = 240.0  # a JVM start and a first micro-batch, on two busy cores
STOPPED_S = 120.0


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(tmp_path / "cluster", brokers=1) as c:
        yield c


class Pipeline:
    """The `run` command as a child in a new session (its own process group, as a terminal's
    foreground job); stdout lines arrive on a queue, stderr goes to a file."""

    def __init__(self, bootstrap: str, topic: str, out: Path, stderr: Path) -> None:
        self.stderr = stderr
        self.lines: queue.Queue[str] = queue.Queue()
        with open(stderr, "wb") as sink:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "epochlog.pipeline.reference", "run", "--bootstrap",
                 bootstrap, "--topic", topic, "--out", str(out), "--trigger-seconds", "1"],
                cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=sink,
                text=True, start_new_session=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put("")  # end of output

    def wait_line(self, prefix: str) -> str:
        """The first stdout line starting with prefix; fails if the pipeline exits first."""
        while True:
            try:
                line = self.lines.get(timeout=STARTED_S)
            except queue.Empty:
                raise AssertionError(f"no {prefix!r} line in {STARTED_S} s") from None
            if line.startswith(prefix):
                return line
            assert line or self.proc.poll() is None, \
                f"the pipeline exited ({self.proc.poll()}):\n{self.stderr.read_text()[-5000:]}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the JVM is in the group too
        self.proc.wait(STOPPED_S)


def test_ctrl_c_ends_the_reference_pipeline_with_one_line(broker: Cluster,
                                                          tmp_path: Path) -> None:
    topic = "clicks"
    broker.create_topic(topic, partitions=1, replication_factor=1)
    produce(broker.bootstrap, topic, [(b"user%d" % (i % 3), b"{}", []) for i in range(50)])
    pipeline = Pipeline(broker.bootstrap, topic, tmp_path / "out", tmp_path / "stderr")
    try:
        pipeline.wait_line("batch ")  # the query runs and has done a micro-batch
        before = pipeline.stderr.stat().st_size  # Spark's start-up lines are not Ctrl-C's
        os.killpg(pipeline.proc.pid, signal.SIGINT)
        code = pipeline.proc.wait(STOPPED_S)
        after = pipeline.stderr.read_bytes()[before:].decode(errors="replace")
    finally:
        pipeline.kill()
    assert after.splitlines() == [
        f"interrupted: the query stopped; run again to go on from its checkpoint "
        f"({tmp_path / 'out'}/_checkpoint)"], after
    assert code == 130


def test_generate_finds_the_cluster_as_every_epochlog_tool_does(broker: Cluster,
                                                                tmp_path: Path) -> None:
    """No --bootstrap: EPOCHLOG_BOOTSTRAP_SERVERS names the cluster (epochlog/bootstrap.py's
    order), and the tool says on stderr which servers it took. Before, it dialled its own default
    of 127.0.0.1:9092-9094 whatever the environment said."""
    env = {**os.environ, "EPOCHLOG_BOOTSTRAP_SERVERS": broker.bootstrap}
    done = subprocess.run(
        [sys.executable, "-m", "epochlog.pipeline.reference", "generate", "--topic", "found",
         "--count", "20", "--partitions", "1", "--replication-factor", "1"],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=STARTED_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"bootstrap servers {broker.bootstrap} (from EPOCHLOG_BOOTSTRAP_SERVERS)" in \
        done.stderr, done.stderr
    assert asyncio.run(end_offset(broker.bootstrap, "found")) == 20


async def end_offset(bootstrap: str, topic: str) -> int:
    async with Admin(bootstrap) as admin:
        tp = TopicPartition(topic, 0)
        return (await admin.list_offsets({tp: "latest"}))[tp].offset
