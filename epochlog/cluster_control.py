"""The control socket of a running `epochlog cluster up`: how another terminal drives it.

`cluster up` listens on a Unix socket in its data dir, `<data-dir>/cluster.sock` (the folder's
permissions guard it). A command (`epochlog cluster kill 2`) connects, sends one JSON line
(`{"op": "kill", "node": 2}`) and reads one JSON line back (`{"ok": true, "message": ...}` or
`{"ok": false, "error": ...}`); `status` answers the nodes' rows. Each request runs the same
`epochlog.testing.Cluster` method a test would call, one request at a time.

A socket file left by a `cluster up` that died is replaced by the next one; a live one (it
answers) makes a second `cluster up` on the same data dir refuse to start. Paths longer than a
Unix socket address holds are reached through /proc/self/fd/N/cluster.sock (Linux).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from epochlog.testing.cluster import CLIENTS, CONTROLLER, Cluster, NodeId

SOCKET_NAME = "cluster.sock"
REQUEST_BYTES_MAX = 64 * 1024
ANSWER_BYTES_MAX = 4 << 20
CONTROL_S = 180.0  # the longest a command waits: a restart stops, starts and registers
SUN_PATH_MAX = 100  # Linux holds 107 bytes; a little room


class ControlError(RuntimeError):
    """No cluster answers at this data dir, or it refused the request."""


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_NAME


@contextlib.contextmanager
def _short_path(path: Path) -> Iterator[str]:
    """A path a Unix socket address can hold: the path itself, or /proc/self/fd/N/NAME."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def _read_line(conn: socket.socket, limit: int) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            raise ControlError(f"message over {limit} bytes")
    return data


# -------------------------------------------------------------------------------- client
def request(data_dir: Path, message: dict[str, Any], timeout_s: float = CONTROL_S
            ) -> dict[str, Any]:
    """Send one request to the cluster running in data_dir; its answer (ok true)."""
    path = socket_path(data_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        try:
            with _short_path(path) as address:
                conn.connect(address)
        except (FileNotFoundError, ConnectionRefusedError):
            raise ControlError(f"no cluster runs in {data_dir} (nothing answers on {path}); "
                               f"start one with `epochlog cluster up --data-dir {data_dir}`"
                               ) from None
        conn.sendall(json.dumps(message).encode() + b"\n")
        raw = _read_line(conn, ANSWER_BYTES_MAX)
    if not raw:
        raise ControlError("the cluster closed the control connection without an answer")
    answer: dict[str, Any] = json.loads(raw)
    if not answer.get("ok"):
        raise ControlError(str(answer.get("error", "refused")))
    return answer


def running(data_dir: Path) -> bool:
    """Whether a cluster answers on data_dir's control socket."""
    try:
        request(data_dir, {"op": "ping"}, timeout_s=5.0)
        return True
    except (ControlError, OSError):
        return False


# -------------------------------------------------------------------------------- server
def parse_node(text: object) -> NodeId:
    """A node as a command names it: a broker id, "controller" (or "c"), "clients"."""
    if isinstance(text, int):
        return text
    word = str(text).strip().lower()
    if word in ("controller", "c"):
        return CONTROLLER
    if word == CLIENTS:
        return CLIENTS
    if word.isdigit():
        return int(word)
    raise ValueError(f"{text!r} is not a node: a broker id, 'controller' or 'clients'")


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
        with _short_path(self.path) as address:
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
                    raw = _read_line(conn, REQUEST_BYTES_MAX)
                    conn.settimeout(None)
                    answer = self.handle(json.loads(raw))
                except Exception as exc:  # the answer says what went wrong; we serve on
                    answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps(answer).encode() + b"\n")

    def handle(self, message: dict[str, Any]) -> dict[str, Any]:
        op = message.get("op")
        c = self.cluster
        if op == "ping":
            return {"ok": True}
        if op == "status":
            rows = [asdict(row) for row in c.status()]
            return {"ok": True, "nodes": rows, **self.extra_status()}
        if op in ("kill", "stop", "pause", "resume", "restart", "isolate"):
            node = parse_node(message.get("node"))
            getattr(c, op)(node)
            n = c.node(node)
            return {"ok": True, "message": f"{n.name}: {op} done, now {n.state()}"
                    + (f" (pid {n.pid})" if n.alive else "")}
        if op == "partition":
            groups = [[parse_node(m) for m in g] for g in message.get("groups", [])]
            one_way = bool(message.get("one_way", False))
            c.partition(*groups, one_way=one_way)
            return {"ok": True, "message": f"partitioned {groups}" + (" one way" if one_way
                                                                      else "")}
        if op == "slow":
            node = parse_node(message.get("node"))
            c.slow(node, delay_ms=int(message.get("delay_ms", 100)),
                   jitter_ms=int(message.get("jitter_ms", 0)),
                   loss_pct=float(message.get("loss_pct", 0.0)))
            return {"ok": True, "message": f"{c.node(node).name} slowed"}
        if op == "heal":
            c.heal()
            return {"ok": True, "message": "healed: every link whole, no delay"}
        raise ValueError(f"unknown request {op!r}")
