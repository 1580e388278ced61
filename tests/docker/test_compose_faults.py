"""The rest of ComposeCluster's fault API on the real engine, each fault seen to take effect the
way the engine and the brokers show it, and recorded in the History with its time:

- `isolate(n)`: the host's requests to n go unanswered and the controller fences it (its
  session expires); `heal()` and it answers again;
- `pause(n)` / `resume(n)`: the engine shows it paused and it answers nothing, then it answers;
- `stop(n)`: a controlled shutdown, exit code 0; `restart(n)`: a new generation, back in the ISR;
- `kill(controller)` leaves it down; `restart(controller)` gives its epoch, and it makes topics;
- `slow(n)`: where the kernel has netem, a request to n takes at least the delay; where it has
  none (this machine's), NetworkFaultUnsupported naming netem, and no fault recorded.
- `status()`: the engine's states, as the faults left them.
"""

from __future__ import annotations

import subprocess
import time
import uuid

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.api_versions import ApiVersionsRequest
from epochlog.testing import History, NetworkFaultUnsupported
from epochlog.testing.compose_cluster import ComposeCluster
from epochlog.testing.history import Fault

from .compose import compose_cluster, wait_log

TOPIC = "faults"
ANSWER_S = 3.0  # a request to a cut-off or frozen broker is given this long
DELAY_MS = 300


def answers(cluster: ComposeCluster, broker: int) -> bool:
    try:
        cluster.call_node(broker, ApiKey.API_VERSIONS, ApiVersionsRequest(), timeout_s=ANSWER_S)
    except (OSError, TimeoutError, ConnectionError):
        return False
    return True


def kernel_has_netem() -> bool:
    """Asked apart from the code under test: a netem queue in a throwaway namespace."""
    name = f"el-netem-{uuid.uuid4().hex[:6]}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        return subprocess.run(["ip", "netns", "exec", name, "tc", "qdisc", "add", "dev", "lo",
                               "root", "netem", "delay", "1ms"],
                              capture_output=True).returncode == 0
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_isolate_pause_stop_restart_and_slow_take_effect(images: dict[str, str]) -> None:
    history = History()
    with compose_cluster(images, "faults", on_fault=history.record_fault) as cluster:
        cluster.create_topic(TOPIC, 3, 3)
        mark = len(cluster.logs("controller").splitlines())

        cluster.isolate(1)
        assert not answers(cluster, 1)
        wait_log(cluster, "controller", r"broker 1 generation \d+: session expired", start=mark)
        cluster.heal()
        assert answers(cluster, 1)

        cluster.pause(2)
        assert cluster.engine_state(2) == "paused" and not answers(cluster, 2)
        cluster.resume(2)
        assert cluster.engine_state(2) == "running" and answers(cluster, 2)

        assert cluster.stop(3) == 0  # SIGTERM: a controlled shutdown
        states = {row.node: row.state for row in cluster.status()}
        assert states == {"controller": "running", 1: "running", 2: "running", 3: "stopped"}
        assert cluster.restart(3) >= 1  # its new generation
        cluster.wait_fully_replicated(TOPIC, timeout_s=90)

        cluster.kill(cluster.controller)  # docker kill: it stays down
        assert cluster.engine_state(cluster.controller) == "exited"
        assert cluster.restart(cluster.controller) >= 1  # its controller epoch
        cluster.create_topic(f"{TOPIC}-after", 1, 3)  # the controller decides again

        recorded = len(history)
        netem = kernel_has_netem()
        if netem:
            cluster.slow(1, delay_ms=DELAY_MS)
            started = time.monotonic()
            assert answers(cluster, 1)
            assert time.monotonic() - started >= DELAY_MS / 1000
            cluster.heal()
        else:
            with pytest.raises(NetworkFaultUnsupported, match="netem"):
                cluster.slow(1, delay_ms=DELAY_MS)
            assert len(history) == recorded  # a fault that did not happen is not recorded

    faults = [(op.kind, tuple(op.targets)) for op in history.ops if isinstance(op, Fault)]
    assert faults == [("isolate", (1,)), ("heal", ()), ("pause", (2,)), ("resume", (2,)),
                      ("stop", (3,)), ("restart", (3,)), ("kill", ("controller",)),
                      ("restart", ("controller",)),
                      *([("slow", (1,)), ("heal", ())] if netem else [])], faults
    times = [op.t_ms for op in history.ops if isinstance(op, Fault)]
    assert None not in times and times == sorted(times), times
