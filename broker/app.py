"""`Broker`: one broker process's parts, started and stopped in the order the contract needs.

Start (docs/control-plane.md "Start-up order"):
0. wait until the data dir can make a write durable (storage/durability.py: a failed fsync
   stopped us, and a restarting supervisor must not loop on it);
1. raise the soft open-files limit to the hard one and split it (storage/descriptors.py): the
   log file cache's size and the replica capacity told at registration; open the data dir
   (storage LogManager: recovery after a crash, identity check);
2. listen for Kafka requests on each listener (listeners.py; TLS on SSL ones, tls.py); the
   controller connects to our control-plane listener right after our registration;
3. register with the controller (our generation), then heartbeat in the background;
4. a storage task fsyncs due logs off the event loop and writes checkpoints; the ISR task
   (isr_task.py) shrinks and expands the ISRs we lead through AlterPartition; the cleaner task
   compacts logs whose cleanup.policy has "compact" (storage/cleaner.py: each pass reads and
   writes on an executor thread, then swaps the segments in on the loop, between two requests);
5. metrics, if asked for.
Follower fetchers (fetcher.py) follow whatever the replica manager makes us follow, from step 3 on.
Stop: controlled shutdown (our leaderships move while we still serve and fetch), stop
heartbeating, stop the follower fetchers, stop listening, wake every waiting request, then flush
every log and write the checkpoints and the clean-shutdown marker (LogManager.close).

Everything runs on one event loop, which owns all broker state; handlers reach it as `ctx.app`.
A background task that fails sets `fatal`, and the process stops (never a half-working broker).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Coroutine
from typing import Any

from epochlog.protocol.apis.create_topics import CreatableTopic, CreateTopicsRequest
from epochlog.protocol.error_codes import ErrorCode, name_of
from epochlog.protocol.topic_names import valid_topic_name

from .clock import monotonic_ms, wall_clock_ms
from .config import BrokerConfig, parse_host_port
from .control_hold import ControlHold, HoldAction, Judge
from .controller_link import ControllerLink, ControllerLinkClosed, ControllerUnavailable
from .fencing import ControlEpochs
from .fetcher import FetcherSettings, ReplicaFetcherManager
from .groups.coordinator import GroupCoordinator
from .handlers import REGISTRY, load_all
from .isr import IsrManager
from .isr_task import IsrTask
from .metadata_cache import MetadataCache
from .metrics import RequestStats, serve_metrics
from .parts import BrokerParts
from .producer_ids import ProducerIdAllocator
from .read_path import ReadPath
from .replicas import FsyncFailed, ReplicaManager
from .server import KafkaServer, ServerLimits, TlsServing
from .storage import LogManager
from .storage.cleaner import CleanerSettings, LogCleaner
from .storage.descriptors import Budget, budget, raise_soft_limit
from .storage.durability import durable_write_error
from .tls import client_context, server_context
from .txn.coordinator import TxnCoordinator

log = logging.getLogger("epochlog.broker")

STORAGE_TICK_MS = 100  # how often due flushes, retention and checkpoints are looked at
AUTO_CREATE_WAIT_MS_MAX = 2000  # how long Metadata waits for an auto-created topic to arrive
AUTO_CREATE_PENDING_MAX = 100  # topics being auto-created for Produce at once
CLEANER_PASSES_PER_WAKE_MAX = 16  # then the cleaner sleeps its interval again
# A data dir that cannot fsync at start: retried with a backoff between these, said every minute
DURABLE_RETRY_MS_MIN, DURABLE_RETRY_MS_MAX, DURABLE_REMIND_MS = 500, 10_000, 60_000




class Broker:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.epochs = ControlEpochs(config.broker_id)
        self.metadata = MetadataCache()
        self.stats = RequestStats()
        self.replicas: ReplicaManager | None = None
        self.producer_ids: ProducerIdAllocator | None = None
        self.servers: dict[str, KafkaServer] = {}  # listener name -> its server
        self.server: KafkaServer | None = None  # the first-named listener's (metrics)
        self.controller: ControllerLink | None = None
        self.isr: IsrManager | None = None
        self.fetchers: ReplicaFetcherManager | None = None
        self.cleaner: LogCleaner | None = None
        self.groups: GroupCoordinator | None = None  # consumer groups (groups/coordinator.py)
        self.txns: TxnCoordinator | None = None  # transactions (txn/coordinator.py)
        self.read_path: ReadPath | None = None  # the fetch path's state (handlers/fetch.py)
        # Listener name -> advertised (host, port), the control-plane one first: what we
        # register.
        self.listeners: dict[str, tuple[str, int]] = {}
        self.advertised: tuple[str, int] = ("", 0)  # the first-named listener's
        # TLS to other brokers, when the inter-broker listener is SSL (tls.py); else None.
        self.inter_broker_tls: ssl.SSLContext | None = None
        self._server_tls: TlsServing | None = None  # the SSL listeners' (tls.py)
        self.fatal = asyncio.Event()
        # Control requests wait here while our generation is not confirmed (epochs.must_wait).
        self.hold: ControlHold[asyncio.Future[bool]] = ControlHold(
            self.epochs, config.controller_request_timeout_ms)
        self._hold_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._creating: dict[str, asyncio.Task[None]] = {}  # topic -> its auto-create task
        self._hooks_control: asyncio.Server | None = None  # test-only request hooks' control

    # ---------------------------------------------------------------------------- start, stop
    async def start(self) -> int:
        """Open, listen, register; returns our generation."""
        load_all()
        await self._wait_for_a_durable_disk()
        spend = self._descriptor_budget()
        logs = LogManager.open(self.config.data_dir, self.config.log_config(), wall_clock_ms,
                               broker_id=self.broker_id, cluster_id=self.config.cluster_id,
                               retention_check_interval_ms=self.config.log_retention_check_interval_ms,
                               files_max=spend.files_max)
        self.replicas = ReplicaManager(self.broker_id, logs, monotonic_ms,
                                       produce_waiters_max=self.config.produce_waiters_max,
                                       fetch_waiters_max=self.config.fetch_waiters_max)
        self.producer_ids = ProducerIdAllocator(self.config.data_dir, self.broker_id)
        # Built now, registers once we listen (it tells the controller our bound listeners).
        self.controller = ControllerLink(self.config, self.epochs, self.listeners,
                                         on_generation_lost=self._generation_lost,
                                         on_registered=self._registered,
                                         offline_dirs=self.replicas.offline_dir_ids,
                                         previous_broker_epoch=logs.previous_broker_epoch,
                                         clock=monotonic_ms,
                                         replica_capacity=spend.replica_capacity)
        self.replicas.on_offline_change = self.controller.heartbeat_soon
        self._load_tls()
        parts = BrokerParts(self.broker_id, self.config, self.epochs, self.metadata,
                            self.replicas, self.controller, self.spawn, self.inter_broker_tls)
        self.isr = IsrManager(self.broker_id, monotonic_ms,
                              lag_time_max_ms=self.config.replica_lag_time_max_ms,
                              retry_backoff_ms=self.config.isr_retry_backoff_ms,
                              replica_live=lambda r: r in self.metadata.brokers)
        isr_task = IsrTask(parts, self.isr)
        self.replicas.on_isr_candidate = isr_task.wake
        self.fetchers = self._replica_fetchers(self.replicas)
        self.groups = GroupCoordinator(parts)
        self.replicas.partition_listeners.append(self.groups.on_partition)
        self.txns = TxnCoordinator(parts, self.producer_ids)
        self.replicas.partition_listeners.append(self.txns.on_partition)
        await self._listen()
        if self.config.request_hooks_listen:
            await self._serve_request_hooks()
        generation = await self.controller.register()
        self.spawn(self.controller.run(), "heartbeat")
        self.spawn(self._storage_loop(), "storage")
        if self.config.log_cleaner_enable:
            self.cleaner = LogCleaner(logs, CleanerSettings(
                offset_map_bytes_max=self.config.log_cleaner_dedupe_buffer_size,
                io_buffer_bytes=self.config.log_cleaner_io_buffer_size), wall_clock_ms)
            self.spawn(self._cleaner_loop(self.cleaner), "cleaner")
        self.spawn(isr_task.run(), "isr")
        self.spawn(self.groups.run(), "groups")
        self.spawn(self.txns.run(), "transactions")
        if self.config.metrics_address is not None:
            serve_metrics(self, self.stats, *self.config.metrics_address)
        return generation

    def _descriptor_budget(self) -> Budget:
        """Raise the soft open-files limit to the hard one and split it (storage/
        descriptors.py): the log file cache's size and the replicas we can host. One line."""
        before, soft, hard = raise_soft_limit()
        spend = budget(soft, self.config.connections_max)
        log.info("broker %d: open-files limit %d (hard %d%s): %d for log files, %d for "
                 "connections, %d reserved; hosts at most %d replicas", self.broker_id, soft,
                 hard, f", raised from {before}" if before != soft else "", spend.files_max,
                 spend.sockets, spend.reserved, spend.replica_capacity)
        return spend

    async def _wait_for_a_durable_disk(self) -> None:
        """Before opening anything: until a write in the data dir can be fsynced, wait, up and
        serving nothing, retrying with a backoff from DURABLE_RETRY_MS_MIN to
        DURABLE_RETRY_MS_MAX, for as long as it takes (a stop signal ends the wait): exiting
        would make a restarting supervisor loop (storage/durability.py). One ERROR line when it
        starts, one WARNING every DURABLE_REMIND_MS while it lasts, one INFO line at its end."""
        data_dir = self.config.data_dir
        error = durable_write_error(data_dir)
        if error is None:
            return
        log.error("broker %d: data dir %s cannot make a write durable (%s): waiting for the disk "
                  "before opening any log, up but serving nothing (exiting would make a "
                  "restarting supervisor loop)", self.broker_id, data_dir, error)
        began = reminded = time.monotonic()
        retry_ms = DURABLE_RETRY_MS_MIN
        while error is not None:
            await asyncio.sleep(retry_ms / 1000)
            retry_ms = min(retry_ms * 2, DURABLE_RETRY_MS_MAX)
            error = durable_write_error(data_dir)
            if error is not None and time.monotonic() - reminded >= DURABLE_REMIND_MS / 1000:
                reminded = time.monotonic()
                log.warning("broker %d: data dir %s still cannot make a write durable (%s), "
                            "waiting for %.0f s", self.broker_id, data_dir, error,
                            time.monotonic() - began)
        log.info("broker %d: data dir %s makes writes durable again after %.1f s; starting",
                 self.broker_id, data_dir, time.monotonic() - began)

    async def _listen(self) -> None:
        """One KafkaServer per listener; each advertised address is known once bound."""
        c = self.config
        limits = ServerLimits(frame_bytes_max=c.frame_bytes_max,
                              connections_max=c.connections_max,
                              idle_ms_max=c.connection_idle_ms_max)
        plan = c.listener_plan
        tls = self._server_tls
        for lst in plan.listeners:
            server = KafkaServer(self, limits, observer=self.stats, listener=lst.name,
                                 tls=tls if lst.tls else None)
            self.servers[lst.name] = server  # before binding, so stop() closes what was opened
            _, bound = await server.start(lst.host, lst.port)
            self.listeners[lst.name] = lst.advertised_address(bound)
        self.server = self.servers[plan.client]
        self.advertised = self.listeners[plan.client]

    def _load_tls(self) -> None:
        """The TLS contexts the listeners and the inter-broker dialers need (tls.py); a missing
        or wrong file stops the start here, naming it."""
        c, plan = self.config, self.config.listener_plan
        if plan.tls:
            self._server_tls = TlsServing(server_context(c.tls_files()),
                                          c.ssl_handshake_timeout_ms, c.principal_rules())
        if plan.named(plan.inter_broker).tls:
            self.inter_broker_tls = client_context(c.tls_files())

    async def _serve_request_hooks(self) -> None:
        """Test-only request hooks (request_hooks.py), on every listener; their control on
        request_hooks_listen."""
        from .request_hooks import RequestHooks

        hooks = RequestHooks({key: r.api for key, r in REGISTRY.items()})
        for server in self.servers.values():
            server.hooks = hooks
        host, port = parse_host_port(self.config.request_hooks_listen, "request_hooks_listen")
        self._hooks_control = await hooks.serve(host, port)
        bound = self._hooks_control.sockets[0].getsockname()
        log.warning("request hooks (test only) listening on %s:%d", bound[0], bound[1])

    async def stop(self, controlled: bool = True) -> None:
        if self._hold_timer is not None:
            self._hold_timer.cancel()
        if self.controller is not None:
            if controlled and self.epochs.generation >= 0:
                await self._controlled_shutdown(self.controller)
            await self.controller.close()
        if self.fetchers is not None:
            await self.fetchers.close()  # no follower append once we stop
        if self.groups is not None:
            self.groups.close()  # parked group requests: NOT_COORDINATOR
        if self.txns is not None:
            await self.txns.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for server in self.servers.values():
            await server.stop()
        if self._hooks_control is not None:
            self._hooks_control.close()
        if self.replicas is not None:
            self.replicas.close(self.epochs.generation)
        log.info("broker %d stopped (generation %d)", self.broker_id, self.epochs.generation)

    def _replica_fetchers(self, replicas: ReplicaManager) -> ReplicaFetcherManager:
        """Follower fetchers (fetcher.py), told of every partition state the replica manager
        applies; they reach leaders at their inter-broker listener (over TLS if it is SSL)."""
        c = self.config
        inter_broker = c.listener_plan.inter_broker

        def resolve(broker_id: int) -> tuple[str, int] | None:
            info = self.metadata.brokers.get(broker_id)
            return info.endpoint(inter_broker) if info is not None else None

        fetchers = ReplicaFetcherManager(
            self.broker_id, monotonic_ms,
            FetcherSettings(fetch_max_bytes=c.replica_fetch_max_bytes,
                            partition_max_bytes=c.replica_fetch_partition_max_bytes,
                            max_wait_ms=c.replica_fetch_wait_max_ms,
                            backoff_ms=c.replica_fetch_backoff_ms,
                            message_max_bytes=c.message_max_bytes),
            resolve=resolve, poke=replicas.poke, spawn=self.spawn,
            tls=self.inter_broker_tls)
        replicas.partition_listeners.append(fetchers.on_partition)
        return fetchers

    async def _controlled_shutdown(self, controller: ControllerLink) -> None:
        limit_ms = self.config.controlled_shutdown_ms_max
        try:
            async with asyncio.timeout(limit_ms / 1000):
                await controller.controlled_shutdown()
        except TimeoutError:
            log.warning("controlled shutdown did not finish in %d ms; stopping anyway", limit_ms)

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run coro as a broker task: one that fails stops the broker (see _task_done)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        if isinstance(exc, FsyncFailed):  # a known end, said in one line
            log.error("broker %d: %s", self.broker_id, exc)
        else:
            log.error("broker %d: task %s failed, stopping", self.broker_id, task.get_name(),
                      exc_info=exc)
        self.fatal.set()

    async def _storage_loop(self) -> None:
        assert self.replicas is not None
        while True:
            await asyncio.sleep(STORAGE_TICK_MS / 1000)
            await self.replicas.flush_due_logs()
            self.replicas.logs.tick()  # retention and checkpoints, each on its own interval
            if self.replicas.unopened:  # logs that found no descriptor: one may be free now
                self.replicas.retry_unopened()

    async def _cleaner_loop(self, cleaner: LogCleaner) -> None:
        """Each wake, up to CLEANER_PASSES_PER_WAKE_MAX passes: choose (loop), run (executor
        thread, on descriptors of its own), finish (loop: the swap, so no reader sees half)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.log_cleaner_interval_ms / 1000)
            for _ in range(CLEANER_PASSES_PER_WAKE_MAX):
                job = cleaner.choose()
                if job is None:
                    break
                try:
                    result = await loop.run_in_executor(None, job.run)
                except asyncio.CancelledError:
                    job.cancel()  # it stops at its next batch; its .cleaned files are strays
                    raise
                cleaner.finish(job, result)

    def _registered(self, generation: int) -> None:
        self._hold_do(self.hold.confirmed(monotonic_ms()))  # held requests go on

    async def control_request_ready(self, what: str) -> bool:
        """docs/control-plane.md "Before the registration answer" (control_hold.py decides): a
        control request waits until the controller has confirmed our generation, at most
        controller_request_timeout_ms. True: judge it now (epochs.admit, with no await in
        between). False: none came in time; leave it unanswered, so that the controller resends
        it (an answered one never is)."""
        ready: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._hold_do(self.hold.arrived(monotonic_ms(), ready, what))
        if not await ready:
            return False
        if self.epochs.must_wait():  # lost again between its release and its turn to run
            return await self.control_request_ready(what)
        return True

    def _hold_do(self, actions: list[HoldAction[asyncio.Future[bool]]]) -> None:
        """Release what the hold decided (Judge: True, Unanswered: False), and be back at its
        next deadline."""
        for action in actions:
            if not action.request.done():
                action.request.set_result(isinstance(action, Judge))
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        deadline = self.hold.next_deadline_ms()
        if deadline is not None:
            self._hold_timer = asyncio.get_running_loop().call_later(
                max(0, deadline - monotonic_ms()) / 1000,
                lambda: self._hold_do(self.hold.tick(monotonic_ms())))

    def _generation_lost(self, why: str) -> None:
        assert self.replicas is not None
        count = self.replicas.resign_all(why)  # epochs.confirmed is False: control requests wait
        log.warning("broker %d: generation %d is over: stopped leading %d partitions",
                    self.broker_id, self.epochs.generation, count)

    # ---------------------------------------------------------------------- auto-creation
    async def auto_create(self, names: list[str]) -> None:
        """Ask the controller to create topics (cluster defaults), then wait, bounded, until
        they reach our metadata cache."""
        assert self.controller is not None
        request = CreateTopicsRequest(timeout_ms=AUTO_CREATE_WAIT_MS_MAX, topics=[
            CreatableTopic(name=n, num_partitions=self.config.num_partitions,
                           replication_factor=self.config.default_replication_factor)
            for n in names])
        try:
            answer = await self.controller.forward(19, None, request)
        except ControllerLinkClosed:
            return  # the broker is stopping: not a fault
        except ControllerUnavailable as exc:
            log.warning("auto-creating %s failed: %s", names, exc)
            return
        wanted = []
        for result in answer.topics:
            if result.error_code in (0, ErrorCode.TOPIC_ALREADY_EXISTS):
                wanted.append(result.name)
                if result.error_code == 0:
                    log.info("auto-created topic %s (%d partitions, replication factor %d)",
                             result.name, result.num_partitions, result.replication_factor)
            else:
                log.warning("auto-creating topic %s refused: %s %s", result.name,
                            name_of(result.error_code), result.error_message or "")
        await self._wait_for_topics(wanted)

    async def _wait_for_topics(self, names: list[str]) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + AUTO_CREATE_WAIT_MS_MAX / 1000
        while not all(self.metadata.has_topic(n) for n in names):
            remaining_ms = int((deadline - loop.time()) * 1000)
            if remaining_ms <= 0 or not await self.metadata.changed(remaining_ms):
                return

    def auto_create_soon(self, topic: str) -> None:
        """Produce to an unknown topic: create it in the background (docs/design.md: created on
        first use)."""
        if (not self.config.auto_create_topics_enable or not valid_topic_name(topic)
                or topic in self._creating or len(self._creating) >= AUTO_CREATE_PENDING_MAX):
            return
        task = asyncio.get_running_loop().create_task(self.auto_create([topic]))
        self._creating[topic] = task
        task.add_done_callback(lambda _: self._creating.pop(topic, None))
