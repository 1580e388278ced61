"""`restart: unless-stopped` does not loop on a disk that cannot fsync (issue 19), on the real
engine: broker1's /data is bound to a FUSE filesystem whose fsync fails on demand
(tests/storage/faulty_fs.py).

broker1's next log flush fails and the broker exits (Kafka halts on its only failed log dir); the
engine restarts it once, and the new process waits for the disk instead of exiting again: the
restart count stays at 1 while the disk fails, the container keeps running. Once fsync works the
broker starts, catches up, and every acknowledged record is on all three replicas.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from epochlog.testing import until

from ..storage.faulty_fs import mounted
from ..storage.test_corrupt_read import consume
from ..storage.test_unclean_recovery import produce
from .compose import compose_cluster, wait_quiet

WATCH_S = 20.0  # long enough for the engine's restart backoff (from 100 ms) to loop many times


def test_a_failed_fsync_restarts_the_broker_once_and_it_waits_for_the_disk(
        images: dict[str, str], tmp_path: Path) -> None:
    control, data = tmp_path / "fail-fsync", tmp_path / "broker1-data"
    override = tmp_path / "broker1-on-fuse.json"
    override.write_text(json.dumps({"services": {"broker1": {"volumes": [
        {"type": "bind", "source": str(data), "target": "/data"}]}}}))
    with mounted(tmp_path / "backing", data, control), \
            compose_cluster(images, "fsync", override_files=[override],
                            settings={"log.flush.interval.ms": 200}) as cluster:
        cluster.create_topic("t", 1, 3, {"min.insync.replicas": 2})
        asyncio.run(produce(cluster.bootstrap_servers, 0, 100))

        def restarts() -> int:
            return int(cluster.project.inspect("broker1")["RestartCount"])

        assert restarts() == 0
        control.touch()  # broker1's fsyncs fail from now on
        # new records for broker1 to flush (a log with nothing new is not fsynced); the two
        # others meet min.insync.replicas once it is gone
        asyncio.run(produce(cluster.bootstrap_servers, 100, 100))
        until(lambda: restarts() >= 1 or None, "the engine to restart broker1", 90)
        until(lambda: "waiting for the disk" in cluster.logs(1) or None,
              "the restarted broker1 to wait for its disk", 90)
        watched = time.monotonic()
        while time.monotonic() - watched < WATCH_S:
            state = cluster.project.inspect("broker1")["State"]
            assert state["Running"] and restarts() == 1, \
                f"broker1 restarted {restarts()} times; state {state}\n{cluster.logs(1)[-3000:]}"
            time.sleep(1.0)

        control.unlink()  # the disk works again
        until(lambda: "makes writes durable again" in cluster.logs(1) or None,
              "broker1 to start once fsync works", 90)
        wait_quiet(cluster, "t", 1)  # led, all three in the ISR, the replicas identical
        got = asyncio.run(consume(cluster.bootstrap_servers, 60.0, enough=200))
        assert got == [(n, str(n).encode()) for n in range(200)]
        assert restarts() == 1
