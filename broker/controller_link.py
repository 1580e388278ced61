"""`ControllerLink`: the broker's side of docs/control-plane.md, broker to controller.

Theory of operation
-------------------
1. `register()` sends BrokerRegistration (v2) with our id, rack, advertised listeners (EXTERNAL
   first, then INTERNAL if we have one: the controller sends its control requests to INTERNAL
   when it is there), an incarnation id made new at every process start and the generation our
   data dir shut down cleanly from (KIP-966; -1 after a crash), retrying (with a
   bounded backoff) until the controller answers; the answer's broker epoch is our generation
   (KIP-380).
2. `run()` heartbeats every `broker_heartbeat_interval_ms`, starting right after registration.
   When the connection it heartbeats on closes, it reconnects and heartbeats at once, retrying
   with a bounded backoff (`BACKOFF_MS_MIN` doubling to `BACKOFF_MS_MAX`, never beyond the
   heartbeat interval), with the same broker epoch: the controller fails a generation whose
   heartbeat connection closed unless it heartbeats again within `broker_connection_loss_grace_ms`
   (~500 ms; that is how a killed broker is noticed at once), and a restarted controller gives
   live generations a fresh session. Each heartbeat lists our offline replicas (v1's
   offline_log_dirs, one directory id per partition: replicas.py's storage failures), and
   `heartbeat_soon()` sends one at once when that list changes. The closing is noticed by
   looking at the connection every `CONNECTION_CHECK_MS` between heartbeats.
   STALE_BROKER_EPOCH means our generation is over: control requests wait again
   (`ControlEpochs.generation_over`), stop leading
   (`on_generation_lost`) and register again with the same incarnation id, which gives a new,
   higher generation (`on_registered`).
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

from .config import BrokerConfig
from .fencing import ControlEpochs

log = logging.getLogger("epochlog.broker")

BACKOFF_MS_MIN, BACKOFF_MS_MAX = 50, 1000
# Between heartbeats, how often the heartbeat connection is looked at: a closed one is reopened
# and heartbeated on at once, well inside the controller's connection-loss grace (~500 ms).
CONNECTION_CHECK_MS = 50
# A failed registration is logged on the first try and then every this many tries, not each one.
REGISTRATION_LOG_EVERY = 20
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
                 previous_broker_epoch: int = -1) -> None:
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
        self.heartbeats_total = 0
        self.registrations_total = 0
        self.reconnects_total = 0  # heartbeat connections found closed and reopened at once
        self._conns: dict[str, Connection] = {}
        self._stopping = asyncio.Event()
        self._due_now = asyncio.Event()  # heartbeat_soon() was called

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
        for conn in list(self._conns.values()):
            await conn.close()
        self._conns.clear()

    # ------------------------------------------------------------------------- registration
    def _registration(self) -> BrokerRegistrationRequest:
        assert self.listeners, "a broker registers at least one listener"
        return BrokerRegistrationRequest(
            broker_id=self.config.broker_id, cluster_id=self.config.cluster_id,
            incarnation_id=self.incarnation_id, rack=self.config.rack_or_none,
            listeners=[BrokerRegistrationListener(name=name, host=host, port=port)
                       for name, (host, port) in self.listeners.items()],
            previous_broker_epoch=self.previous_broker_epoch)

    async def register(self) -> int:
        """Register until the controller answers; returns the new generation (-1 if close()
        came first). Raises RuntimeError on an answer that retrying cannot fix (wrong cluster
        id, bad listener)."""
        backoff_ms, tries = BACKOFF_MS_MIN, 0
        while not self._stopping.is_set():
            tries += 1
            try:
                answer = await self._request("heartbeat", 62, self._registration(), 2)
            except ControllerUnavailable as exc:
                if tries % REGISTRATION_LOG_EVERY == 1:
                    log.warning("broker %d: registration failed (try %d), retrying: %s",
                                self.config.broker_id, tries, exc)
                await self._pause(backoff_ms)
                backoff_ms = min(backoff_ms * 2, BACKOFF_MS_MAX)
                continue
            if answer.error_code != 0:
                raise RuntimeError(f"the controller refused our registration: "
                                   f"{name_of(answer.error_code)}")
            self.registrations_total += 1
            self.epochs.registration_answered(answer.broker_epoch)
            if self.on_registered is not None:
                self.on_registered(answer.broker_epoch)
            generation: int = answer.broker_epoch
            return generation
        return -1

    # ---------------------------------------------------------------------------- heartbeats
    async def run(self) -> None:
        """Heartbeat until close(); at once (bounded backoff) when the heartbeat connection
        closes or a heartbeat fails; re-register whenever the generation is over."""
        interval_ms = self.config.broker_heartbeat_interval_ms
        backoff_ms, wait_ms, failing_since = BACKOFF_MS_MIN, interval_ms, 0
        while not self._stopping.is_set():
            if await self._wait_heartbeat_due(wait_ms, watch=not failing_since):
                self.reconnects_total += 1
                log.info("broker %d: the connection to the controller closed; reconnecting "
                         "and heartbeating at once", self.config.broker_id)
            if self._stopping.is_set():
                return
            self._due_now.clear()
            offline = self.offline_dirs() if self.offline_dirs is not None else []
            try:
                answer = await self._request("heartbeat", 63, BrokerHeartbeatRequest(
                    broker_id=self.config.broker_id, broker_epoch=self.epochs.generation,
                    offline_log_dirs=offline), 1 if offline else 0)
            except ControllerUnavailable as exc:
                failing_since += 1
                if failing_since == 1:
                    log.warning("broker %d: heartbeat failed, retrying with backoff: %s",
                                self.config.broker_id, exc)
                wait_ms = min(backoff_ms, interval_ms)
                backoff_ms = min(backoff_ms * 2, BACKOFF_MS_MAX)
                continue
            if failing_since:
                log.info("broker %d: heartbeating again after %d failed tries",
                         self.config.broker_id, failing_since)
            backoff_ms, wait_ms, failing_since = BACKOFF_MS_MIN, interval_ms, 0
            self.heartbeats_total += 1
            if answer.error_code == ErrorCode.STALE_BROKER_EPOCH:
                why = f"the controller says generation {self.epochs.generation} is over"
                log.warning("broker %d: %s (session expired); stop leading, register again",
                            self.config.broker_id, why)
                self.epochs.generation_over()  # control requests wait for the next answer
                self.on_generation_lost(why)
                await self.register()
            elif answer.error_code != 0:
                log.warning("heartbeat answered %s", name_of(answer.error_code))

    def heartbeat_soon(self) -> None:
        """Heartbeat now rather than at the next interval (what it lists changed)."""
        self._due_now.set()

    async def _wait_heartbeat_due(self, ms: int, watch: bool) -> bool:
        """Wait ms, or less if close() or heartbeat_soon() is called or (watch) the heartbeat
        connection closes; True in the last case (the heartbeat is due at once). While
        heartbeats fail the connection is known to be down: no watching, the backoff is the
        wait."""
        deadline = asyncio.get_running_loop().time() + ms / 1000
        while not self._stopping.is_set() and not self._due_now.is_set():
            conn = self._conns.get("heartbeat")
            if watch and conn is not None and conn.closed:
                return True
            left_ms = (deadline - asyncio.get_running_loop().time()) * 1000
            if left_ms <= 0:
                return False
            await self._pause(min(left_ms, CONNECTION_CHECK_MS))
        return False

    async def _pause(self, ms: float) -> None:
        try:
            async with asyncio.timeout(ms / 1000):
                await self._stopping.wait()
        except TimeoutError:
            pass

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
