"""What the real-engine compose tests add to epochlog.testing's ComposeCluster: the repository's
compose file and images, the logs shown when a test fails, replicas compared byte for byte, and
a client container on the project's network.

    with compose_cluster(images, "kill") as cluster:    # a started ComposeCluster, closed after
        cluster.kill(cluster.leader_of("t", 0))
        wait_quiet(cluster, "t", 3)                      # led, ISRs full, replicas identical

The engine, the Compose tool, the commands and the project's removal are the library's
(testing/compose_project.py); a missing engine fails (ComposeError), never skips.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from epochlog.testing.compose_cluster import INTERNAL_PORT, ComposeCluster, service_of
from epochlog.testing.compose_project import run
from epochlog.testing.requests import until

__all__ = ["BROKER_IDS", "INTERNAL_PORT", "ROOT", "client_container", "compose_cluster",
           "dump_batches", "run", "wait_log", "wait_quiet"]

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
BROKER_IDS = (1, 2, 3)
QUIET_S_MAX = 90.0  # leaders, full ISRs and identical replicas after chaos
LOG_WAIT_S_MAX = 90.0
BATCH_FIELDS = ("base_offset", "last_offset", "leader_epoch", "producer_id", "producer_epoch",
                "base_sequence", "record_count", "crc_valid", "size")


@contextmanager
def compose_cluster(images: Mapping[str, str], name: str, *, start: bool = True,
                    **kwargs: Any) -> Iterator[ComposeCluster]:
    """A ComposeCluster of the repository's compose file under a unique project name, started
    (unless start=False), always closed; a failing test prints the services' last log lines."""
    cluster = ComposeCluster(compose_file=COMPOSE_FILE, project=f"epochlog-test-{name}",
                             images=images, **kwargs)
    failed = False
    try:
        if start:
            cluster.start()
        yield cluster
    except BaseException:
        failed = True
        if cluster._project is not None:
            print(cluster.logs_tail())  # shown with the failure
        raise
    finally:
        try:
            cluster.close()
        except Exception as exc:
            if not failed:
                raise
            print(f"closing {cluster.name} after the failure: {exc}")


def wait_log(cluster: ComposeCluster, node: int | str, pattern: str, start: int = 0) -> str:
    """The first line (after line `start`) of the node's log with pattern in it (bounded)."""
    def found() -> str | None:
        return next((line for line in cluster.logs(node).splitlines()[start:]
                     if re.search(pattern, line)), None)
    return until(found, f"{service_of(node)} to log {pattern!r}", LOG_WAIT_S_MAX,
                 interval_s=0.5)


def dump_batches(cluster: ComposeCluster, broker: int, topic: str, index: int
                 ) -> list[tuple[Any, ...]]:
    """One replica's batches, as `epochlog dump-log` prints them inside its container."""
    folder = f"/data/{topic}-{index}"
    cid = cluster.container(broker)
    if run(["docker", "exec", cid, "test", "-d", folder], check=False).returncode != 0:
        return []
    out = run(["docker", "exec", cid, "epochlog", "dump-log", folder]).stdout
    rows = [json.loads(line) for line in out.splitlines()]
    return [tuple(row.get(f) for f in BATCH_FIELDS) for row in rows]


def wait_quiet(cluster: ComposeCluster, topic: str, partitions: int) -> None:
    """Every partition led, every ISR full (all three brokers), every replica identical."""
    deadline = time.monotonic() + QUIET_S_MAX
    while True:
        state = cluster.wait_fully_replicated(topic, timeout_s=max(1.0, deadline
                                                                   - time.monotonic()))
        assert len(state) == partitions and all(len(p.isr_nodes) == 3 for p in state.values()), \
            state
        differ = [i for i in range(partitions)
                  if len({tuple(dump_batches(cluster, b, topic, i)) for b in BROKER_IDS}) != 1]
        if not differ:
            return
        assert time.monotonic() < deadline, f"replicas of {topic} differ: {differ}"
        time.sleep(0.5)


@contextmanager
def client_container(cluster: ComposeCluster, image: str, mounts: dict[Path, str],
                     environment: dict[str, str]) -> Iterator[str]:
    """A container on the project's network from `image` (a client of the cluster, not part
    of it), idle until removed; yields its name for `docker exec`."""
    name = f"{cluster.name}-client"
    argv = ["docker", "run", "--detach", "--rm", "--name", name, "--network",
            cluster.network_name]
    for source, target in mounts.items():
        argv += ["--volume", f"{source}:{target}:ro"]
    for key, value in environment.items():
        argv += ["--env", f"{key}={value}"]
    run([*argv, "--entrypoint", "sleep", image, "900"])
    try:
        yield name
    finally:
        run(["docker", "rm", "--force", name], check=False)
