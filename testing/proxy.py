"""TCP proxies in front of a cluster's processes, for faults the kernel cannot make here.

Theory of operation
-------------------
A process's advertised address is its proxy's; the proxy forwards each connection to the
process's real listener. Knowing who connected (`identify`: by source address in a namespace, by
the socket's owning process on loopback), it forwards each direction through a bounded queue:

- a *cut* from A to B holds the bytes A sends to B: they wait in the queue, the proxy stops
  reading once it is full, and the sender's kernel buffers fill, so nothing arrives and nothing
  is refused, much as when packets are dropped. On heal the held bytes go on, as TCP's
  retransmissions would deliver them. (Connections are still accepted while cut; see network.py
  for what this mode cannot do.)
- a *slow* node's bytes wait `delay ± jitter` before they are written on, order kept (a chunk
  never overtakes the one before it), so each round trip with that node grows by the delay.

All proxies of a cluster run on one asyncio loop in one daemon thread. The fault state lives with
the caller (`Policy`); `changed()` wakes every held pump to look again. Limits: CHUNK_BYTES_MAX
per read, CHUNKS_MAX queued per direction, CONNECT_S to reach the upstream listener.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import socket
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

CHUNK_BYTES_MAX = 64 * 1024
CHUNKS_MAX = 64
CONNECT_S = 5.0
CLOSE_S = 5.0

Peer = tuple[str, int]


class Policy(Protocol):
    def held(self, src: str, dst: str) -> bool:
        """Whether bytes from src to dst must wait (a cut)."""

    def delay_s(self, src: str) -> float:
        """How long bytes sent by src wait before they go on (0: not at all)."""


class ProxyHub:
    """One loop in one thread serving every proxy of a cluster."""

    def __init__(self, name: str, policy: Policy) -> None:
        self.policy = policy
        self._loop = asyncio.new_event_loop()
        self._changed = asyncio.Event()
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"epochlog-{name}",
                                        daemon=True)
        self._thread.start()

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(CONNECT_S * 2)

    def add(self, node: str, listener: socket.socket, connect: Callable[[], socket.socket],
            identify: Callable[[Peer], str],
            executor: concurrent.futures.Executor | None = None) -> None:
        """Serve `listener` (bound and listening) for node: each connection goes to a socket
        `connect()` returns (run on `executor`: a thread inside the node's namespace)."""
        async def start() -> None:
            async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                await self._serve(node, reader, writer, connect, identify, executor)
            listener.setblocking(False)
            self._servers.append(await asyncio.start_server(accepted, sock=listener))
        self._call(start())

    def changed(self) -> None:
        """The policy changed: wake held pumps (from any thread)."""
        def wake() -> None:
            old, self._changed = self._changed, asyncio.Event()
            old.set()
        self._loop.call_soon_threadsafe(wake)

    def close(self) -> None:
        if self._loop.is_closed():
            return

        async def stop() -> None:
            for server in self._servers:
                server.close()
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        try:
            self._call(stop())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CLOSE_S)
            if not self._thread.is_alive():
                self._loop.close()

    # -------------------------------------------------------------------------- forwarding
    async def _serve(self, node: str, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, connect: Callable[[], socket.socket],
                     identify: Callable[[Peer], str],
                     executor: concurrent.futures.Executor | None) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            peer = writer.get_extra_info("peername")
            src = identify((peer[0], peer[1]))
            loop = asyncio.get_running_loop()
            try:
                sock = await asyncio.wait_for(loop.run_in_executor(executor, connect), CONNECT_S)
                up_reader, up_writer = await asyncio.open_connection(sock=sock)
            except (OSError, TimeoutError):
                return  # the process is down: the client sees its connection close
            try:
                await asyncio.gather(self._pump(reader, up_writer, src, node),
                                     self._pump(up_reader, writer, node, src))
            finally:
                up_writer.close()
        finally:
            writer.close()
            self._tasks.discard(task)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    src: str, dst: str) -> None:
        """Bytes from src to dst: read into a bounded queue, written on when due and not cut."""
        queue: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue(CHUNKS_MAX)
        loop = asyncio.get_running_loop()

        async def read() -> None:
            due = 0.0
            try:
                while data := await reader.read(CHUNK_BYTES_MAX):
                    due = max(due, loop.time() + self.policy.delay_s(src))
                    await queue.put((due, data))
            except OSError:
                pass
            finally:
                await queue.put(None)

        reading = asyncio.create_task(read())
        try:
            while (item := await queue.get()) is not None:
                due, data = item
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                while self.policy.held(src, dst):
                    await self._changed.wait()
                writer.write(data)
                await writer.drain()
            if writer.can_write_eof():
                writer.write_eof()
        except OSError:
            writer.close()
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading


# ------------------------------------------------------------------ who is at the other end
def _hex_address(host: str, port: int) -> str:
    """An IPv4 address as /proc/net/tcp writes it: the 32-bit value in host byte order."""
    packed = socket.inet_aton(host)
    return f"{int.from_bytes(packed, 'little'):08X}:{port:04X}"


def socket_owner(peer: Peer, local: Peer, pids: dict[int, str], default: str) -> str:
    """Which of our children (pid -> name) owns the socket at `peer` connected to `local`, found
    through /proc: the socket's inode in /proc/net/tcp, then the child holding that inode
    among its open files. `default` when none does (a client of the test)."""
    want_local, want_remote = _hex_address(*peer), _hex_address(*local)
    inode = ""
    try:
        with open("/proc/net/tcp") as f:
            for line in f:
                fields = line.split()
                if len(fields) > 9 and fields[1] == want_local and fields[2] == want_remote:
                    inode = fields[9]
                    break
    except OSError:
        return default
    if not inode:
        return default
    target = f"socket:[{inode}]"
    for pid, name in pids.items():
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    return name
            except OSError:
                continue
    return default
