"""The control socket of a running `epochlog cluster up`, its server side: how another terminal
drives it (the client side, which loads nothing of the harness, is cluster_socket.py).

`cluster up` listens on a Unix socket in its data dir, `<data-dir>/cluster.sock` (the folder's
permissions guard it). A command (`epochlog cluster kill 2`) connects, sends one JSON line
(`{"op": "kill", "node": 2}`) and reads one JSON line back (`{"ok": true, "message": ...}` or
`{"ok": false, "error": ...}`); `status` answers the nodes' rows. Each request runs the same
`epochlog.testing.Cluster` method a test would call, one request at a time.

A socket file left by a `cluster up` that died is replaced by the next one; a live one (it
answers) makes a second `cluster up` on the same data dir refuse to start. `bootstrap` answers
only the bootstrap servers, without asking any node: what the other tools ask the folder's
cluster (epochlog/bootstrap.py); with them the plaintext ones, which differ in a cluster up with
--security ssl (its CONTROLLER listeners), as the tools have no TLS yet.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from epochlog.testing.cluster import CLIENTS, CONTROLLER, Cluster, NodeId

from .cluster_socket import (
    REQUEST_BYTES_MAX,
    ControlError,
    read_line,
    running,
    short_path,
    socket_path,
)


def parse_node(text: object, broker_ids: list[int], clients: bool = False) -> NodeId:
    """A node as a command names it: one of broker_ids, "controller" (or "c"), and where
    clients is true (partition's groups) "clients". ValueError saying what the nodes are."""
    word = str(text).strip().lower()
    if word in ("controller", "c"):
        return CONTROLLER
    if clients and word == CLIENTS:
        return CLIENTS
    ids = ", ".join(map(str, broker_ids))
    choices = (f"a broker id ({ids}), 'controller' or 'clients'" if clients
               else f"a broker id ({ids}) or 'controller'")
    if not word.isdigit():
        raise ValueError(f"{text!r} is not a node: {choices}")
    if int(word) not in broker_ids:
        raise ValueError(f"no node {int(word)}: the nodes are brokers {ids} and 'controller'")
    return int(word)


def _said(exc: Exception) -> str:
    """An exception as a user reads it: its message, without the exception's name."""
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])  # str() of a KeyError quotes its message
    return str(exc) or type(exc).__name__


class ControlServer:
    """Answers control requests for one cluster, on a thread of its own."""

    def __init__(self, cluster: Cluster, data_dir: Path,
                 extra_status: Callable[[], dict[str, Any]]) -> None:
        self.cluster = cluster
        self.path = socket_path(data_dir)
        self.extra_status = extra_status
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="epochlog-control",
                                        daemon=True)

    def start(self) -> None:
        if self.path.exists():
            if running(self.path.parent):
                raise ControlError(f"a cluster already runs in {self.path.parent}: stop it "
                                   "first (Ctrl-C in its terminal)")
            self.path.unlink()  # left by a cluster up that died
        with short_path(self.path) as address:
            self._sock.bind(address)
        os.chmod(self.path, 0o600)
        self._sock.listen(8)
        self._thread.start()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            with conn:
                try:
                    conn.settimeout(10.0)
                    raw = read_line(conn, REQUEST_BYTES_MAX)
                    conn.settimeout(None)
                    answer = self.handle(json.loads(raw))
                except Exception as exc:  # the answer says what went wrong; we serve on
                    answer = {"ok": False, "error": _said(exc)}
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps(answer).encode() + b"\n")

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        c = self.cluster
        if op == "ping":
            return {"ok": True}
        if op == "bootstrap":
            return {"ok": True, "bootstrap_servers": c.bootstrap_servers,
                    "plaintext_servers": c.plaintext_servers}
        if op == "status":
            rows = [asdict(row) for row in c.status()]
            return {"ok": True, "nodes": rows, **self.extra_status()}
        if op in ("kill", "stop", "pause", "resume", "restart", "isolate"):
            node = parse_node(message.get("node"), c.broker_ids)
            getattr(c, op)(node)
            n = c.node(node)
            return {"ok": True, "message": f"{n.name}: {op} done, now {n.state()}"
                    + (f" (pid {n.pid})" if n.alive else "")}
        if op == "partition":
            groups = [[parse_node(m, c.broker_ids, clients=True) for m in g]
                      for g in message.get("groups", [])]
            one_way = bool(message.get("one_way", False))
            c.partition(*groups, one_way=one_way)
            return {"ok": True, "message": f"partitioned {groups}" + (" one way" if one_way
                                                                      else "")}
        if op == "slow":
            node = parse_node(message.get("node"), c.broker_ids)
            c.slow(node, delay_ms=int(message.get("delay_ms", 100)),
                   jitter_ms=int(message.get("jitter_ms", 0)),
                   loss_pct=float(message.get("loss_pct", 0.0)))
            return {"ok": True, "message": f"{c.node(node).name} slowed"}
        if op == "heal":
            c.heal()
            return {"ok": True, "message": "healed: every link whole, no delay"}
        raise ValueError(f"unknown request {op!r}")
