"""Helpers for the controller tests: a controller child process and a stand-in broker.

`FakeBroker` is a real TCP server on 127.0.0.1 that registers with the controller and receives its
LeaderAndIsr, UpdateMetadata and StopReplica requests, recording each and answering as
docs/control-plane.md says a broker must: an older broker epoch than its current one is refused
with STALE_BROKER_EPOCH, an older controller epoch with STALE_CONTROLLER_EPOCH. It stands in until
the real broker exists. Tests await what it received (`wait_for`), never sleep.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from epochlog.client.connection import Connection
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.broker_heartbeat import BrokerHeartbeatRequest
from epochlog.protocol.apis.broker_registration import (
    BrokerRegistrationListener,
    BrokerRegistrationRequest,
)
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.frames import FrameBuffer, frame
from epochlog.protocol.headers import (
    decode_request_header,
    encode_response_header,
    peek_request_header,
)
from epochlog.protocol.registry import APIS

WAIT_S = 10.0
CONTROL_KEYS = (4, 5, 6)
_LISTENING = re.compile(r"listening on ([\d.]+):(\d+) with controller epoch (\d+)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Received:
    api_key: int
    version: int
    message: Any
    answer: int  # the error code the fake broker answered with


class FakeBroker:
    def __init__(self, broker_id: int, rack: str | None = None) -> None:
        self.broker_id = broker_id
        self.rack = rack
        self.incarnation_id = uuid.uuid4()
        self.broker_epoch = -1
        self.controller_epoch = -1
        self.received: list[Received] = []
        self.refuse_as_stale = False  # answer everything STALE_BROKER_EPOCH (a test hook)
        self.hold = asyncio.Event()  # cleared: answers wait until it is set again
        self.hold.set()
        self._changed = asyncio.Condition()
        self._server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> FakeBroker:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()

    def bounce(self) -> None:
        """A new process: a new incarnation id (its next registration is a bounce)."""
        self.incarnation_id = uuid.uuid4()

    async def register(self, conn: Connection) -> int:
        api = APIS[ApiKey.BROKER_REGISTRATION]
        answer = await conn.request(api, 0, BrokerRegistrationRequest(
            broker_id=self.broker_id, cluster_id="epochlog", incarnation_id=self.incarnation_id,
            rack=self.rack, listeners=[BrokerRegistrationListener(
                name="PLAINTEXT", host="127.0.0.1", port=self.port)]))
        assert answer.error_code == 0, answer
        self.broker_epoch = answer.broker_epoch
        return answer.broker_epoch

    async def heartbeat(self, conn: Connection, want_shut_down: bool = False) -> Any:
        return await conn.request(APIS[ApiKey.BROKER_HEARTBEAT], 0, BrokerHeartbeatRequest(
            broker_id=self.broker_id, broker_epoch=self.broker_epoch,
            want_shut_down=want_shut_down))

    async def wait_for(self, predicate: Callable[[Received], bool],
                       timeout_s: float = WAIT_S) -> Received:
        """The first request received (already or later) that matches."""
        def find() -> Received | None:
            return next((r for r in self.received if predicate(r)), None)
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: find() is not None),
                                   timeout_s)
        found = find()
        assert found is not None
        return found

    def of(self, api_key: int) -> list[Received]:
        return [r for r in self.received if r.api_key == api_key]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        frames = FrameBuffer(64 << 20)
        try:
            while data := await reader.read(65536):
                for request in frames.feed(data):
                    writer.write(await self._answer(request))
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _answer(self, request: bytes) -> bytes:
        key, version, _ = peek_request_header(request)
        api = APIS[key]
        header, pos = decode_request_header(request, api.request_header_version(version))
        msg = api.decode_request(request, version, pos)
        error = self._check(msg)
        received = Received(key, version, msg, error)
        async with self._changed:
            self.received.append(received)
            self._changed.notify_all()
        await self.hold.wait()
        error = self._check(msg)  # the generation may have changed while the answer was held
        received.answer = error
        answer = api.response(error_code=error)
        head = encode_response_header(header.correlation_id, api.response_header_version(version))
        return frame(head + api.encode_response(answer, version))

    def _check(self, msg: Any) -> int:
        if self.refuse_as_stale or msg.broker_epoch < self.broker_epoch:
            return ErrorCode.STALE_BROKER_EPOCH
        if msg.controller_epoch < self.controller_epoch:
            return ErrorCode.STALE_CONTROLLER_EPOCH
        self.controller_epoch = msg.controller_epoch
        return 0


class ControllerProcess:
    """`epochlog controller` as a child process; `start` returns once it listens."""

    def __init__(self, data_dir: str, port: int | None = None, *args: str) -> None:
        self.data_dir = data_dir
        self.port = port or free_port()
        self.args = args
        self.proc: asyncio.subprocess.Process | None = None
        self.lines: list[str] = []
        self._new_line = asyncio.Event()
        self.epoch = -1
        self._drain: asyncio.Task[None] | None = None

    async def start(self) -> ControllerProcess:
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "epochlog", "controller", "--data-dir", self.data_dir,
            "--listen", f"127.0.0.1:{self.port}", *self.args,
            stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        listening = asyncio.get_running_loop().create_future()
        self._drain = asyncio.get_running_loop().create_task(self._read_log(listening))
        self.epoch = await asyncio.wait_for(listening, WAIT_S)
        return self

    async def _read_log(self, listening: asyncio.Future[int]) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        async for raw in self.proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            self.lines.append(line)
            self._new_line.set()
            found = _LISTENING.search(line)
            if found and not listening.done():
                listening.set_result(int(found.group(3)))
        if not listening.done():
            listening.set_exception(RuntimeError("controller exited:\n" + "\n".join(self.lines)))

    async def connect(self) -> Connection:
        return await Connection("127.0.0.1", self.port, request_timeout_ms=5000).connect()

    async def stop(self, sig: int = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        rc = await asyncio.wait_for(self.proc.wait(), WAIT_S)
        if self._drain is not None:
            await asyncio.wait_for(self._drain, WAIT_S)
        return rc

    def log_has(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    async def wait_log(self, text: str, timeout_s: float = WAIT_S) -> str:
        """The first line with text, once read (the controller logs before it answers, but its
        stderr reaches us on its own schedule); AssertionError after timeout_s."""
        try:
            async with asyncio.timeout(timeout_s):
                while True:
                    found = next((line for line in self.lines if text in line), None)
                    if found is not None:
                        return found
                    self._new_line.clear()
                    await self._new_line.wait()
        except TimeoutError:
            raise AssertionError(f"controller: no line with {text!r} within {timeout_s} s; "
                                 "log:\n" + "\n".join(self.lines[-30:])) from None
