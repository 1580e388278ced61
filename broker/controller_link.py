"""`ControllerLink`: the broker's side of docs/control-plane.md, broker to controller.

Theory of operation
-------------------
1. `register()` sends BrokerRegistration (v2) with our id, rack, advertised listeners with their
   security protocols (the control-plane listener first: the controller sends its control
   requests to the first, listeners.py), an incarnation id made new at every process start and
   the generation our data dir shut down cleanly from (KIP-966; -1 after a crash), until the
   controller answers;
   the answer's broker epoch is our generation (KIP-380).
2. `run()` heartbeats, starting right after registration. Each heartbeat lists our offline
   replicas (v1's offline_log_dirs, one directory id per partition: replicas.py's storage
   failures), and `heartbeat_soon()` asks for one at once when that list changes. On
   STALE_BROKER_EPOCH we stop leading (`on_generation_lost`) and register again with the same
   incarnation id, which gives a new, higher generation (`on_registered`).
   When to register, heartbeat, back off and register again is `ControllerSession`'s
   (controller_session.py, sans-IO); this module carries out what it decides: one request at a
   time on the "heartbeat" connection (reopened when it closed), each answer or failure handed
   back to it. A Connection tells nobody that it closed, so between heartbeats, while the
   session watches, the connection is looked at every `CONNECTION_CHECK_MS`.
3. `controlled_shutdown()` asks the controller to move our leaderships away, repeating every
   `controlled_shutdown_backoff_ms` until nothing remains or `controlled_shutdown_retries_max` is
   spent. STALE_BROKER_EPOCH there means the generation is already over: nothing left to do.
4. `forward()` relays an admin request (CreateTopics, ...) to the controller on a second
   connection, so a slow admin request never delays a heartbeat.
5. `alter_partition()` sends a leader's ISR changes (isr_task.py) on a third connection.

The generation itself lives in `ControlEpochs` (fencing.py): one log line per change.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from epochlog.client.connection import Connection, NoCommonVersion
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.broker_heartbeat import BrokerHeartbeatRequest
from epochlog.protocol.apis.broker_registration import (
    BrokerRegistrationListener,
    BrokerRegistrationRequest,
)
from epochlog.protocol.apis.controlled_shutdown import ControlledShutdownRequest
from epochlog.protocol.error_codes import ErrorCode, name_of
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import Message

from .clock import monotonic_ms
from .config import BrokerConfig
from .controller_session import Action as SessionAction
from .controller_session import (
    ControllerSession,
    GenerationOver,
    Heartbeat,
    Refused,
    Register,
    Registered,
)
from .fencing import ControlEpochs

log = logging.getLogger("epochlog.broker")

# Between heartbeats, how often the heartbeat connection is looked at: a closed one is reopened
# and heartbeated on at once, well inside the controller's connection-loss grace (~500 ms).
CONNECTION_CHECK_MS = 50
HEARTBEAT_TIMEOUT_MS_MIN = 500



class ControllerUnavailable(ConnectionError):
    """The controller could not be reached or did not answer in time."""


class ControllerLinkClosed(ControllerUnavailable):
    """The broker is stopping: its link to the controller is closed and sends nothing more (a
    request in flight when it closed fails with this too). Not a fault to warn about."""


class ControllerLink:
    def __init__(self, config: BrokerConfig, epochs: ControlEpochs,
                 listeners: Mapping[str, tuple[str, int]],
                 on_generation_lost: Callable[[str], None],
                 on_registered: Callable[[int], None] | None = None,
                 offline_dirs: Callable[[], list[uuid.UUID]] | None = None,
                 previous_broker_epoch: int = -1,
                 clock: Callable[[], int] = monotonic_ms, replica_capacity: int = -1) -> None:
        self.config = config
        self.epochs = epochs
        # name -> advertised (host, port), in order: filled as the broker's servers bind, before
        # it registers
        self.listeners = listeners
        self.incarnation_id = uuid.uuid4()
        self.on_generation_lost = on_generation_lost
        self.on_registered = on_registered
        self.offline_dirs = offline_dirs  # what each heartbeat lists in offline_log_dirs
        # KIP-966: the generation this process's data dir shut down cleanly from (-1: a crash),
        # told at every registration (the controller looks at it for a new incarnation only).
        self.previous_broker_epoch = previous_broker_epoch
        # How many replicas we can host within our open-files limit (storage/descriptors.py),
        # told at every registration: the controller places no more here. -1: no bound.
        self.replica_capacity = replica_capacity
        self.clock = clock
        # When to register and heartbeat (with the counters metrics read).
        self.session = ControllerSession(config.broker_id, epochs,
                                         config.broker_heartbeat_interval_ms)
        self._actions: deque[SessionAction] = deque()  # the session's, not yet carried out
        self._conns: dict[str, Connection] = {}
        self._stopping = asyncio.Event()
        self._soon = False  # heartbeat_soon() was called: the session is told by run()
        self._wake = asyncio.Event()  # heartbeat_soon() or close() was called

    # Counted by the session; metrics read them here.
    @property
    def heartbeats_total(self) -> int:
        return self.session.heartbeats_total

    @property
    def registrations_total(self) -> int:
        return self.session.registrations_total

    @property
    def reconnects_total(self) -> int:
        return self.session.reconnects_total

    # -------------------------------------------------------------------------- connections
    async def _connection(self, purpose: str) -> Connection:
        conn = self._conns.get(purpose)
        if conn is not None and not conn.closed:
            return conn
        host, port = self.config.controller_address
        timeout_ms = self.config.controller_request_timeout_ms
        if purpose == "heartbeat":
            # A heartbeat lost on the way must be retried well inside the controller's session,
            # not after a request timeout as long as the session itself.
            timeout_ms = min(timeout_ms, max(HEARTBEAT_TIMEOUT_MS_MIN,
                                             2 * self.config.broker_heartbeat_interval_ms))
        conn = Connection(host, port, client_id=f"epochlog-broker-{purpose}",
                          request_timeout_ms=timeout_ms, connect_timeout_ms=timeout_ms)
        try:
            await conn.connect()
        except (TimeoutError, OSError) as exc:
            await conn.close()
            raise ControllerUnavailable(f"controller {host}:{port}: {exc}") from exc
        except asyncio.CancelledError:  # close() while connecting: no socket left behind
            await conn.close()
            raise
        self._conns[purpose] = conn
        return conn

    async def _request(self, purpose: str, key: int, message: Message,
                       version: int | None = None) -> Any:
        """One request on the purpose's connection and its answer; ControllerUnavailable if it
        fails. close() ends it at once with ControllerLinkClosed, wherever it is (connecting,
        negotiating versions, waiting for the answer), and a closed link sends nothing."""
        api = APIS[key]
        if self._stopping.is_set():
            raise ControllerLinkClosed(f"{api.name}: the broker is stopping")
        work = asyncio.ensure_future(self._exchange(purpose, key, message, version))
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait((work, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not work.done():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
        if work.cancelled() or (work.exception() is not None and self._stopping.is_set()):
            raise ControllerLinkClosed(f"{api.name}: the broker is stopping")
        return work.result()

    async def _exchange(self, purpose: str, key: int, message: Message,
                        version: int | None) -> Any:
        conn = await self._connection(purpose)
        api = APIS[key]
        try:
            return await conn.request(api, conn.version_for(api) if version is None else version,
                                      message)
        except (TimeoutError, OSError) as exc:
            await conn.close()
            raise ControllerUnavailable(f"{api.name} to the controller: {exc}") from exc

    async def close(self) -> None:
        self._stopping.set()
        self._wake.set()
        for conn in list(self._conns.values()):
            await conn.close()
        self._conns.clear()

    # ------------------------------------------------------------------------- registration
    def _registration(self) -> BrokerRegistrationRequest:
        assert self.listeners, "a broker registers at least one listener"
        plan = self.config.listener_plan
        return BrokerRegistrationRequest(
            broker_id=self.config.broker_id, cluster_id=self.config.cluster_id,
            incarnation_id=self.incarnation_id, rack=self.config.rack_or_none,
            listeners=[BrokerRegistrationListener(
                name=name, host=host, port=port,
                security_protocol=int(plan.named(name).protocol))
                for name, (host, port) in self.listeners.items()],
            previous_broker_epoch=self.previous_broker_epoch,
            replica_capacity=self.replica_capacity)

    async def register(self) -> int:
        """Register until the controller answers; returns the new generation (-1 if close()
        came first). Raises RuntimeError on an answer that retrying cannot fix (wrong cluster
        id, bad listener)."""
        self._actions.extend(self.session.start(self.clock()))
        return await self._drive(until_registered=True)

    async def run(self) -> None:
        """Heartbeat until close() (controller_session.py decides when, and when to register
        again)."""
        await self._drive(until_registered=False)

    def heartbeat_soon(self) -> None:
        """Heartbeat now rather than at the next interval (what it lists changed)."""
        self._soon = True
        self._wake.set()

    async def _drive(self, until_registered: bool) -> int:
        """Carry out the session's actions, handing it each answer, failure, closed connection
        and due time, until close() (or, until_registered, until a registration answer: the
        generation)."""
        actions = self._actions
        while not self._stopping.is_set():
            if not actions:
                actions.extend(await self._next_events())
                continue
            match actions.popleft():
                case Register():
                    actions.extend(await self._send_registration())
                case Heartbeat(broker_epoch=broker_epoch):
                    actions.extend(await self._send_heartbeat(broker_epoch))
                case Registered(generation=generation):
                    if self.on_registered is not None:
                        self.on_registered(generation)
                    if until_registered:
                        return generation
                case GenerationOver(why=why):
                    self.on_generation_lost(why)
                case Refused(error_code=code):
                    raise RuntimeError(f"the controller refused our registration: "
                                       f"{name_of(code)}")
        return -1

    async def _next_events(self) -> list[SessionAction]:
        """Wait for the session's next due time, heartbeat_soon() or close(), looking at the
        heartbeat connection every CONNECTION_CHECK_MS while the session watches it."""
        session = self.session
        while not self._stopping.is_set():
            self._wake.clear()
            now_ms = self.clock()
            if self._soon:
                self._soon = False
                return session.heartbeat_soon(now_ms)
            conn = self._conns.get("heartbeat")
            if session.watching and conn is not None and conn.closed:
                return session.connection_closed(now_ms)
            deadline = session.next_deadline_ms()
            if deadline is not None and deadline <= now_ms:
                return session.tick(now_ms)
            wait_ms = None if deadline is None else deadline - now_ms
            if session.watching and (wait_ms is None or wait_ms > CONNECTION_CHECK_MS):
                wait_ms = CONNECTION_CHECK_MS
            try:
                async with asyncio.timeout(None if wait_ms is None else wait_ms / 1000):
                    await self._wake.wait()
            except TimeoutError:
                pass
        return []

    async def _send_registration(self) -> list[SessionAction]:
        try:
            answer = await self._request("heartbeat", 62, self._registration(), 2)
        except ControllerLinkClosed:
            return []  # stopping: nothing to retry, nothing to warn about
        except ControllerUnavailable as exc:
            return self.session.registration_failed(self.clock(), str(exc))
        return self.session.registration_answered(self.clock(), answer.error_code,
                                                  answer.broker_epoch)

    async def _send_heartbeat(self, broker_epoch: int) -> list[SessionAction]:
        offline = self.offline_dirs() if self.offline_dirs is not None else []
        try:
            answer = await self._request("heartbeat", 63, BrokerHeartbeatRequest(
                broker_id=self.config.broker_id, broker_epoch=broker_epoch,
                offline_log_dirs=offline), 1 if offline else 0)
        except ControllerLinkClosed:
            return []
        except ControllerUnavailable as exc:
            return self.session.heartbeat_failed(self.clock(), str(exc))
        return self.session.heartbeat_answered(self.clock(), answer.error_code)

    # --------------------------------------------------------------------- controlled shutdown
    async def controlled_shutdown(self) -> bool:
        """True once the controller reports nothing left that we lead (or that our generation
        is already over); False if the retries ran out."""
        attempts = self.config.controlled_shutdown_retries_max + 1
        for attempt in range(1, attempts + 1):
            request = ControlledShutdownRequest(broker_id=self.config.broker_id,
                                                broker_epoch=self.epochs.generation)
            try:
                answer = await self._request("shutdown", 7, request)
            except (ControllerUnavailable, NoCommonVersion) as exc:
                log.warning("controlled shutdown try %d/%d failed: %s", attempt, attempts, exc)
            else:
                if answer.error_code == ErrorCode.STALE_BROKER_EPOCH:
                    log.info("controlled shutdown: generation %d is already over",
                             self.epochs.generation)
                    return True
                if answer.error_code == 0 and not answer.remaining_partitions:
                    log.info("controlled shutdown of generation %d done", self.epochs.generation)
                    return True
                remaining = [f"{p.topic_name}-{p.partition_index}"
                             for p in answer.remaining_partitions]
                log.info("controlled shutdown try %d/%d: %s, still leading %s", attempt,
                         attempts, name_of(answer.error_code), remaining)
            if attempt < attempts:
                await asyncio.sleep(self.config.controlled_shutdown_backoff_ms / 1000)
        log.warning("controlled shutdown gave up after %d tries", attempts)
        return False

    # ---------------------------------------------------------------------------- AlterPartition
    async def alter_partition(self, request: Message, version_max: int) -> Any:
        """AlterPartition (isr_task.py) on its own connection, at the highest version both
        speak up to version_max; the answer. Raises ControllerUnavailable."""
        conn = await self._connection("isr")
        try:
            version = min(conn.version_for(APIS[ApiKey.ALTER_PARTITION]), version_max)
        except NoCommonVersion as exc:
            raise ControllerUnavailable(str(exc)) from exc
        return await self._request("isr", 56, request, version)

    # ----------------------------------------------------------------------------- forwarding
    async def forward(self, key: int, version: int | None, message: Message) -> Any:
        """Send an admin request to the controller at the client's version (None: the highest
        both speak); its answer. Raises ControllerUnavailable."""
        try:
            return await self._request("admin", key, message, version)
        except NoCommonVersion as exc:
            raise ControllerUnavailable(str(exc)) from exc
