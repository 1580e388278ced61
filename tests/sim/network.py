"""The simulated network: request/answer calls between nodes, with delay, loss and partitions.

Theory of operation
-------------------
`call(src, dst, key, version, request, timeout_ms, on_reply, on_fail)` models one request on a
connection: the request travels (delay; or lost, or cut by a partition), the destination serves
it whenever it gets to run it (a paused node queues it), its answer travels back the same way.
The caller gets exactly one of `on_reply(answer)` or `on_fail(reason)`: an answer that comes
after the timeout is dropped (the real clients close the connection on a timeout), but the
request may still be served late, which is how stale requests reach a server in real life.
A destination that is down refuses the connection: a quick failure. A server that crashes closes
every connection at once: the calls it was serving fail at their callers ("connection closed",
one network delay later) instead of timing out, as the kernel's FIN/RST makes them (unless the
link is cut, when the caller only times out). A paused server closes nothing.

Connections (`open_conn`, `call(..., conn=)`, `close_conn`): for the one link whose connection
matters to the real code, the broker's registration-and-heartbeat connection to the controller
(the controller cuts a generation's session short when it closes: docs/control-plane.md "The
heartbeat connection"). Such a connection is FIFO in each direction (a message never overtakes
an earlier one, the close included), belongs to the server process it first reached (a
restarted server resets it), and its close, by either side or by a crash of either, reaches the
other side's `connection_closed(conn)` one delay later unless the link is cut.

Messages are the real msgspec request/response objects. One message in `codec_every` is also
encoded and decoded with the real codec (protocol.api) at the version the real sender would use,
so a codec fault shows up here too. Keys below 0 are the simulation's own (no codec).

Link faults: `loss` (a probability per message), `slow` (a probability of a long delay), and
`cut` pairs: a directed link (a, b) in `cut` delivers nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from epochlog.protocol.registry import APIS

if TYPE_CHECKING:
    from .scheduler import Node, Scheduler

DELAY_MS_MIN, DELAY_MS_MAX = 1, 4
SLOW_DELAY_MS_MAX = 150
REFUSED_MS = 2


@dataclass(eq=False)
class Conn:
    """One client-to-server connection (see the module docstring)."""
    conn_id: int
    client: Node
    client_life: int
    server_id: int
    server_life: int = -1  # the server process it reached; -1: none yet
    open: bool = True
    arrival_ms: dict[bool, int] = field(default_factory=lambda: {True: 0, False: 0})


class Network:
    def __init__(self, sim: Scheduler, *, codec_every: int = 20) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.nodes: dict[int, Node] = {}
        self.loss = 0.0
        self.slow = 0.02
        self.cut: set[tuple[int, int]] = set()
        self.codec_every = codec_every
        self.sent = 0
        self.lost = 0
        self.codec_checked = 0
        self._next_call = 0
        self._next_conn = 0
        self.conns: dict[int, Conn] = {}  # the open ones
        # node id -> call id -> (caller, caller's life, its fail): the calls it is serving
        self._serving: dict[int, dict[int, tuple[Node, int, Callable[[str], None]]]] = {}

    def add(self, node: Node) -> None:
        self.nodes[node.node_id] = node

    # ---------------------------------------------------------------------------- faults
    def partition(self, groups: list[list[int]]) -> None:
        """Cut every link between different groups (nodes in no group keep their links)."""
        self.cut = set()
        for i, a_group in enumerate(groups):
            for j, b_group in enumerate(groups):
                if i != j:
                    self.cut.update((a, b) for a in a_group for b in b_group)
        self.sim.log(f"network: PARTITION {groups}")

    def heal(self) -> None:
        if self.cut or self.loss:
            self.sim.log("network: healed")
        self.cut = set()
        self.loss = 0.0

    # ------------------------------------------------------------------------------ calls
    def call(self, src: Node, dst_id: int, key: int, version: int, request: Any,
             timeout_ms: int, on_reply: Callable[[Any], None],
             on_fail: Callable[[str], None], conn: Conn | None = None) -> None:
        self._next_call += 1
        call_id = self._next_call
        src_life = src.life
        pending = {call_id}

        def fail(reason: str) -> None:
            if call_id in pending:
                pending.discard(call_id)
                on_fail(reason)

        def answered(answer: Any) -> None:
            if call_id in pending:
                pending.discard(call_id)
                on_reply(answer)

        self.sim.after(timeout_ms, src.execute, src_life, fail, "timeout")
        request = self._maybe_codec(key, version, request, True)
        if conn is not None and not conn.open:  # the peer closed it; we learn it by an RST
            self.sim.after(REFUSED_MS, src.execute, src_life, fail, "connection reset")
            return
        self._transmit(src.node_id, dst_id, self._arrive, src, src_life, dst_id, key, version,
                       request, answered, fail, call_id, conn, conn=conn, upstream=True)

    def _arrive(self, src: Node, src_life: int, dst_id: int, key: int, version: int,
                request: Any, answered: Callable[[Any], None], fail: Callable[[str], None],
                call_id: int, conn: Conn | None) -> None:
        dst = self.nodes[dst_id]
        if conn is not None:
            if conn.open and conn.server_life < 0 and dst.up:
                conn.server_life = dst.life  # connected: this server process's connection
            if not conn.open or conn.server_life != dst.life or not dst.up:
                # closed meanwhile (the server crashed), or a restarted (or dead) server that
                # knows no such connection: an RST
                self._drop(conn)
                self.sim.after(REFUSED_MS, src.execute, src_life, fail, "connection reset")
                return
        if not dst.up:
            self.sim.after(REFUSED_MS, src.execute, src_life, fail, "connection refused")
            return
        dst_life = dst.life
        serving = self._serving.setdefault(dst_id, {})
        serving[call_id] = (src, src_life, fail)

        def reply(answer: Any) -> None:
            if dst.life != dst_life or not dst.up:
                return  # the server died before it answered: the connection is gone
            serving.pop(call_id, None)
            answer = self._maybe_codec(key, version, answer, False)
            self._transmit(dst_id, src.node_id, src.execute, src_life, answered, answer,
                           conn=conn, upstream=False)

        dst.execute(dst_life, dst.serve, key, version, request, reply, src.node_id, conn)

    # ---------------------------------------------------------------------- connections
    def open_conn(self, client: Node, server_id: int) -> Conn:
        self._next_conn += 1
        conn = Conn(self._next_conn, client, client.life, server_id)
        self.conns[conn.conn_id] = conn
        return conn

    def close_conn(self, conn: Conn, by: Node) -> None:
        """`by` (one end, alive) closes conn: the other end hears of it one delay later."""
        if not conn.open:
            return
        self._drop(conn)
        self._tell_closed(conn, by)

    def _drop(self, conn: Conn) -> None:
        conn.open = False
        self.conns.pop(conn.conn_id, None)

    def _tell_closed(self, conn: Conn, by: Node) -> None:
        if by is conn.client:
            if conn.server_life < 0:
                return  # it never reached a server process: nobody to tell
            other, life, upstream = self.nodes[conn.server_id], conn.server_life, True
        else:
            other, life, upstream = conn.client, conn.client_life, False
        if other.up and other.life == life:
            self._transmit(by.node_id, other.node_id, other.execute, life,
                           other.connection_closed, conn, conn=conn, upstream=upstream,
                           lossless=True)

    def crashed(self, node: Node) -> None:
        """node's process died (call before its life changes): its connections close at once,
        and every call it was serving fails at its caller (a FIN or RST, unless cut)."""
        for conn in list(self.conns.values()):
            if (conn.client is node and conn.client_life == node.life) or \
                    (conn.server_id == node.node_id and conn.server_life == node.life):
                self._drop(conn)
                self._tell_closed(conn, node)
        for src, src_life, fail in self._serving.pop(node.node_id, {}).values():
            self._transmit(node.node_id, src.node_id, src.execute, src_life, fail,
                           "connection closed", lossless=True)

    def _transmit(self, a: int, b: int, fn: Callable[..., Any], *args: Any,
                  conn: Conn | None = None, upstream: bool = True,
                  lossless: bool = False) -> None:
        """lossless: a FIN/RST, which TCP retransmits: only a cut loses it."""
        self.sent += 1
        if (a, b) in self.cut or (not lossless and self.loss and
                                  self.rng.random() < self.loss):
            self.lost += 1
            return
        delay = self.rng.randint(DELAY_MS_MIN, DELAY_MS_MAX)
        if self.rng.random() < self.slow:
            delay += self.rng.randint(0, SLOW_DELAY_MS_MAX)
        at = self.sim.now_ms + delay
        if conn is not None:  # FIFO on a connection: never before the one sent earlier
            at = conn.arrival_ms[upstream] = max(at, conn.arrival_ms[upstream])
        self.sim.at(at, fn, *args)

    def _maybe_codec(self, key: int, version: int, message: Any, is_request: bool) -> Any:
        if key < 0 or self.codec_every <= 0 or self.rng.randrange(self.codec_every):
            return message
        self.codec_checked += 1
        api = APIS[key]
        if is_request:
            return api.decode_request(api.encode_request(message, version), version)
        return api.decode_response(api.encode_response(message, version), version)
