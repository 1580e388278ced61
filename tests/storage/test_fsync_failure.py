"""A broker whose disk stops making writes durable (issue 19), on a real filesystem whose fsync
fails (tests/storage/faulty_fs.py, FUSE) under broker 1's data dir.

3 brokers, min.insync.replicas 2, acks=all. Checked:
- broker 1's next log flush fails: it says why in one line and exits (Kafka halts on its only log
  dir failing); the two others go on taking acks=all writes;
- started again on the still failing disk, as `restart: unless-stopped` or systemd would, it does
  not exit (which would make the supervisor loop): it says it waits for the disk, opens no log
  and does not register, and stays up through several retries;
- once fsync works again it starts, recovers, catches up and is back in the ISR; every
  acknowledged record is read back once, at its offset.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochlog.testing import Cluster, until

from .faulty_fs import mounted
from .test_corrupt_read import consume
from .test_unclean_recovery import produce

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounts a FUSE filesystem: needs root")

WAITING_S = 4.0  # the restarted broker must still be up, waiting, this long after saying so


@pytest.fixture
def failing_disk(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(the cluster's folder, where broker-1 is a FUSE passthrough; the file that, while it
    exists, makes that filesystem's fsync fail)."""
    base, control = tmp_path / "cluster", tmp_path / "fail-fsync"
    with mounted(tmp_path / "backing", base / "broker-1", control):
        yield base, control


def test_a_failed_fsync_stops_the_broker_and_its_restart_waits_for_the_disk(
        failing_disk: tuple[Path, Path]) -> None:
    base, control = failing_disk
    settings = {"min.insync.replicas": 2, "log.flush.interval.ms": 200}
    with Cluster(3, base_dir=base, settings=settings) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        asyncio.run(produce(cluster.bootstrap_servers, 0, 100))
        broker = cluster.node(1)

        control.touch()  # from now on broker 1's fsyncs fail
        # new records for broker 1 to flush (a log with nothing new is not fsynced); it leads or
        # follows t-0, and min.insync.replicas 2 is met by the two others once it is gone
        asyncio.run(produce(cluster.bootstrap_servers, 100, 100))
        until(lambda: not broker.alive or None, "broker 1 to stop on the failed fsync", 60)
        log_text = (base / "logs" / "broker-1.log").read_text()
        assert "fsync in" in log_text and "failed" in log_text, log_text[-3000:]
        assert broker.returncode != 0

        registrations = controller_lines(base, "broker 1 registered")
        cluster.restart(1, wait=False)  # what a restarting supervisor does
        until(lambda: "waiting for the disk" in broker_log(base) or None,
              "the restarted broker to say it waits for the disk", 60)
        waiting_since = time.monotonic()
        while time.monotonic() - waiting_since < WAITING_S:
            assert broker.alive, f"the restarted broker exited:\n{broker.tail(30)}"
            time.sleep(0.2)
        assert controller_lines(base, "broker 1 registered") == registrations, \
            "a broker waiting for its disk must not register"

        control.unlink()  # the disk works again
        until(lambda: "makes writes durable again" in broker_log(base) or None,
              "broker 1 to start once fsync works", 60)
        cluster.wait_fully_replicated("t", timeout_s=90)
        got = asyncio.run(consume(cluster.bootstrap_servers, 60.0, enough=200))
        assert got == [(n, str(n).encode()) for n in range(200)], \
            f"{200 - len(got)} acknowledged records lost or out of place"


def broker_log(base: Path) -> str:
    return (base / "logs" / "broker-1.log").read_text(errors="replace")


def controller_lines(base: Path, text: str) -> int:
    return (base / "logs" / "controller.log").read_text(errors="replace").count(text)
