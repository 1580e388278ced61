"""`epochlog cluster up`: a controller and N brokers on 127.0.0.1 as real child processes.

The embedded default for developers and CI: brokers in racks a, b, c, ... listen on ports
P, P+1, ... (P = --port-base, default 9092), the controller on P+100, data under ./.epochlog/
unless told otherwise. Each child runs the same `epochlog controller` / `epochlog broker` command
a user or docker-compose would run. Once every broker has registered with the controller, the
bootstrap servers are printed. Ctrl-C or SIGTERM stops the brokers first (each does a controlled
shutdown), then the controller; a child that does not stop within `stop_seconds_max` is killed.
If any child dies on its own, the whole cluster is stopped and the command exits non-zero.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

START_SECONDS_MAX = 60.0
STOP_SECONDS_MAX = 30.0
RACKS = "abcdefghijklmnopqrstuvwxyz"


@dataclass
class Child:
    name: str
    args: list[str]
    process: subprocess.Popen[bytes] | None = None


def add_parser(subparsers: Any) -> None:
    cluster = subparsers.add_parser("cluster", help="run a local cluster of real processes")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    up = actions.add_parser("up", help="start a controller and brokers on 127.0.0.1")
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument("--data-dir", default=".epochlog", help="where data goes (default ./.epochlog)")
    up.add_argument("--port-base", type=int, default=9092,
                    help="first broker port; brokers use P, P+1, ...; the controller P+100")
    up.set_defaults(func=run_up)


def plan(brokers: int, data_dir: Path, port_base: int) -> list[Child]:
    """The commands that make the cluster: the controller first, then the brokers."""
    exe = [sys.executable, "-m", "epochlog"]
    controller = f"127.0.0.1:{port_base + 100}"
    children = [Child("controller", [*exe, "controller", "--data-dir", str(data_dir / "controller"),
                                     "--listen", controller])]
    for i in range(brokers):
        broker_id = i + 1
        children.append(Child(f"broker {broker_id}", [
            *exe, "broker", "--id", str(broker_id), "--rack", RACKS[i % len(RACKS)],
            "--listen", f"127.0.0.1:{port_base + i}", "--controller", controller,
            "--data-dir", str(data_dir / f"broker-{broker_id}")]))
    return children


def bootstrap_servers(brokers: int, port_base: int) -> str:
    return ",".join(f"127.0.0.1:{port_base + i}" for i in range(brokers))


def run_up(args: argparse.Namespace) -> int:
    if not 1 <= args.brokers <= len(RACKS):
        print(f"epochlog cluster up: --brokers must be 1-{len(RACKS)}", file=sys.stderr)
        return 2
    if not 1 <= args.port_base <= 65535 - 100:
        print("epochlog cluster up: --port-base must leave room for the controller (P+100)",
              file=sys.stderr)
        return 2
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    children = plan(args.brokers, data_dir, args.port_base)
    stopping = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    started = time.monotonic()
    try:
        for child in children:
            # Children ignore the terminal's Ctrl-C (own session): we stop them in order.
            child.process = subprocess.Popen(child.args, start_new_session=True)
            print(f"started {child.name} (pid {child.process.pid})", flush=True)
        ready = _wait_ready(children, args.brokers, args.port_base, lambda: stopping)
        if ready:
            print(f"cluster up in {time.monotonic() - started:.1f}s: controller "
                  f"127.0.0.1:{args.port_base + 100}, data in {data_dir}", flush=True)
            print(f"bootstrap servers: {bootstrap_servers(args.brokers, args.port_base)}",
                  flush=True)
            print("press Ctrl-C to stop", flush=True)
        failed = None if ready else _first_dead(children)
        while ready and not stopping:
            failed = _first_dead(children)
            if failed is not None:
                break
            time.sleep(0.2)
        if failed is not None:
            print(f"{failed.name} exited with code {failed.process.returncode if failed.process else '?'}; "
                  "stopping the cluster", file=sys.stderr, flush=True)
        elif not ready and not stopping:
            print("the cluster did not come up in time; stopping it", file=sys.stderr, flush=True)
        return 0 if ready and failed is None else 1
    finally:
        _stop_all(children)


def _first_dead(children: list[Child]) -> Child | None:
    for child in children:
        if child.process is not None and child.process.poll() is not None:
            return child
    return None


def _wait_ready(children: list[Child], brokers: int, port_base: int, stopping: Any) -> bool:
    deadline = time.monotonic() + START_SECONDS_MAX
    while time.monotonic() < deadline and not stopping():
        if _first_dead(children) is not None:
            return False
        try:
            if asyncio.run(_cluster_ready(brokers, port_base)):
                return True
        except (OSError, asyncio.TimeoutError, ConnectionError):
            pass
        time.sleep(0.1)
    return False


async def _cluster_ready(brokers: int, port_base: int) -> bool:
    """Every broker registered with the controller, and every broker answering on its port."""
    from client.connection import Connection
    from protocol.apis.metadata import MetadataRequest
    from protocol.registry import APIS

    async def connect(port: int) -> Connection:
        return await Connection("127.0.0.1", port, connect_timeout_ms=1000,
                                request_timeout_ms=2000).connect()

    conn = await connect(port_base + 100)
    try:
        api = APIS[3]
        answer = await conn.request(api, conn.version_for(api), MetadataRequest(topics=[]))
        if len(answer.brokers) < brokers:
            return False
    finally:
        await conn.close()
    for i in range(brokers):
        await (await connect(port_base + i)).close()
    return True


def _stop_all(children: list[Child]) -> None:
    """Brokers first (controlled shutdown needs the controller), then the controller."""
    brokers = [c for c in children if c.name != "controller"]
    controller = [c for c in children if c.name == "controller"]
    for group in (brokers, controller):
        for child in group:
            if child.process is not None and child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS_MAX
        for child in group:
            if child.process is None:
                continue
            try:
                child.process.wait(max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                print(f"{child.name} did not stop in {STOP_SECONDS_MAX:.0f}s; killing it",
                      file=sys.stderr, flush=True)
                os.kill(child.process.pid, signal.SIGKILL)
                child.process.wait()
            print(f"stopped {child.name}", flush=True)
