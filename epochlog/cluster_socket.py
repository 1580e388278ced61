"""The client side of a running `epochlog cluster up`'s control socket: how another terminal (or
another epochlog tool) reaches it. The server side is cluster_control.py.

`cluster up` listens on a Unix socket in its data dir, `<data-dir>/cluster.sock` (the folder's
permissions guard it). A command connects, sends one JSON line (`{"op": "kill", "node": 2}`) and
reads one JSON line back (`{"ok": true, ...}` or `{"ok": false, "error": ...}`). Paths longer
than a Unix socket address holds are reached through /proc/self/fd/N/cluster.sock (Linux).

This module imports nothing of the test harness, so the everyday tools (`epochlog consume`, ...)
can ask the folder's cluster for its bootstrap servers without loading it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SOCKET_NAME = "cluster.sock"
REQUEST_BYTES_MAX = 64 * 1024
ANSWER_BYTES_MAX = 4 << 20
CONTROL_S = 180.0  # the longest a command waits: a restart stops, starts and registers
SUN_PATH_MAX = 100  # Linux holds 107 bytes; a little room


class ControlError(RuntimeError):
    """No cluster answers at this data dir, or it refused the request."""


class NoCluster(ControlError):
    """Nothing listens on the data dir's control socket."""


def socket_path(data_dir: Path) -> Path:
    return data_dir / SOCKET_NAME


@contextlib.contextmanager
def short_path(path: Path) -> Iterator[str]:
    """A path a Unix socket address can hold: the path itself, or /proc/self/fd/N/NAME."""
    if len(os.fsencode(path)) <= SUN_PATH_MAX:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def read_line(conn: socket.socket, limit: int) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            raise ControlError(f"message over {limit} bytes")
    return data


def request(data_dir: Path, message: dict[str, Any], timeout_s: float = CONTROL_S
            ) -> dict[str, Any]:
    """Send one request to the cluster running in data_dir; its answer (ok true)."""
    path = socket_path(data_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        try:
            with short_path(path) as address:
                conn.connect(address)
        except (FileNotFoundError, ConnectionRefusedError):
            raise NoCluster(f"no cluster runs in {data_dir} (nothing answers on {path}); "
                               f"start one with `epochlog cluster up --data-dir {data_dir}`"
                               ) from None
        conn.sendall(json.dumps(message).encode() + b"\n")
        raw = read_line(conn, ANSWER_BYTES_MAX)
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
