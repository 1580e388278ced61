"""The source on a Spark standalone cluster, where users go when one machine is not enough: a
master and a worker as separate processes, started with PySpark's own
`bin/spark-class org.apache.spark.deploy.master.Master` and `...deploy.worker.Worker`, and a
driver process of its own (tests/pipeline/standalone_job.py). The reads run in executor
processes the worker launched, so this shows the reader is picklable, holds no driver-only
state, and builds its client inside the executor's Python worker.

Every child is reaped, even when the test fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyspark
import pytest

from tests.broker.cluster import Cluster, free_port
from tests.pipeline.conftest import produce

SPARK_HOME = Path(pyspark.__file__).parent
START_S = 90.0
STOP_S = 30.0
ROOT = Path(__file__).resolve().parent.parent.parent


class SparkDaemon:
    """bin/spark-class CLASS ARGS as a child (spark-class execs the JVM, so the pid is the
    JVM's); its log (stderr) goes to a file that wait_line reads."""

    def __init__(self, log: Path, *args: str) -> None:
        self.log = log
        with open(log, "wb") as sink:
            self.proc = subprocess.Popen([str(SPARK_HOME / "bin" / "spark-class"), *args],
                                         stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)

    def wait_line(self, pattern: str) -> None:
        deadline = time.monotonic() + START_S
        while not re.search(pattern, self.log.read_text(errors="replace")):
            assert self.proc.poll() is None, f"{self.log.name} exited:\n{self.log.read_text()}"
            assert time.monotonic() < deadline, f"no {pattern!r} in {self.log.name}"
            time.sleep(0.2)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(STOP_S)


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    env = {"SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "PYSPARK_PYTHON": sys.executable}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    daemons: list[SparkDaemon] = []
    try:
        daemons.append(SparkDaemon(tmp_path / "master.log", "org.apache.spark.deploy.master.Master",
                                   "--host", "127.0.0.1", "--port", str(port), "--webui-port",
                                   str(free_port())))
        daemons[0].wait_line(r"I have been elected leader")
        daemons.append(SparkDaemon(tmp_path / "worker.log", "org.apache.spark.deploy.worker.Worker",
                                   f"spark://127.0.0.1:{port}", "--host", "127.0.0.1", "--cores",
                                   "2", "--memory", "2g", "--webui-port", str(free_port()),
                                   "--work-dir", str(tmp_path / "work")))
        daemons[1].wait_line(r"Successfully registered with master")
        yield f"spark://127.0.0.1:{port}"
    finally:
        for daemon in reversed(daemons):
            daemon.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.mark.slow  # about 90 s on two busy cores: three more JVMs and a driver process
def test_reads_on_a_standalone_master_and_worker(standalone: str, cluster: Cluster,
                                                 tmp_path: Path) -> None:
    topic = "standalone"
    cluster.create_topic(topic, partitions=3, replication_factor=3)
    produce(cluster.bootstrap, topic, [(None, b"s%d" % i, []) for i in range(3000)])
    run = subprocess.run([sys.executable, "-m", "tests.pipeline.standalone_job", standalone,
                          cluster.bootstrap, topic, str(tmp_path / "out")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-5000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["master"] == standalone
    assert (report["rows"], report["distinct"], report["values"]) == (3000, 3000, True)
    assert report["streamed"] == 3000 and report["batches"] >= 5
    assert any(host == "127.0.0.1" for host in report["executors"])
    # the Python workers' parent is the executor's JVM, which the worker launched
    work = list((tmp_path / "work").glob("app-*/*/stderr"))
    assert work, "no executor was launched by the worker"
    assert report["driver_pid"] not in report["worker_parents"]
