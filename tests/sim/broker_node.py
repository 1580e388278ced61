"""A broker process, simulated: the real replica state machines and storage on the simulated clock
and network.

What is real:
- `ControlEpochs` (fencing of control requests), `MetadataCache`, `ReplicaManager` / `Partition`
  (LeaderAndIsr and UpdateMetadata applied by their handlers' own `apply`, topic settings
  included: `TopicConfigs` learns the topic's from the LeaderAndIsr that opens its partitions;
  StopReplica through the sync calls its handler makes), storage `LogManager` / `Log` on real
  files, recovery after a crash included;
- follower replication: `follower.SourceFetcher`, one per source broker, followed and unfollowed
  through `ReplicaManager.partition_listeners` exactly as fetcher.py's `on_partition` does;
- ISR changes: `isr.IsrManager`, with isr_task.py's `build_request` / `apply_answer`;
- the serving decisions: fetch.py's `begin` / `read` / `finish` / `positions`,
  offset_for_leader_epoch.py's `answer`, produce.py's `append`, replication_wait.py's
  `replication_error`.
What is mirrored because the real code is asyncio:
- the controller link (controller_link.py): register with an incarnation id (the answer confirms
  the generation: `ControlEpochs.registration_answered`), heartbeat on the same connection, which
  a failed request closes; when the controller closes it (it crashed) the wait notices at its next
  look (every CONNECTION_CHECK_MS) and heartbeats at once; failed heartbeats back off from
  BACKOFF_MS_MIN, never longer than the interval; STALE_BROKER_EPOCH -> `generation_over`, resign
  everything, register again;
- app.control_request_ready: LeaderAndIsr, StopReplica and UpdateMetadata that arrive while
  `ControlEpochs.must_wait()` are held, then judged by `admit` in arrival order once the
  generation is confirmed; after `controller_request_timeout_ms` a held one is dropped unanswered
  (the controller's sender resends it);
- the control handlers' order: fence (`admit`), then apply;
- the fetch long poll and the acks=all wait (re-checked after every event of this node, as a
  purgatory poke would), the fetcher and ISR tasks' loops, and the storage tick.

A crash drops every object and closes every connection at once (network.py); files stay as a
killed process leaves them (no checkpoint, no clean-shutdown marker), sometimes with a torn,
never-completed batch write at the end of a segment, which recovery must cut.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import random
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from epochlog.broker.controller_link import BACKOFF_MS_MAX, BACKOFF_MS_MIN, CONNECTION_CHECK_MS
from epochlog.broker.fencing import ControlEpochs
from epochlog.broker.fetch_sessions import FetchSessionCache
from epochlog.broker.follower import FollowerStats, SourceFetcher
from epochlog.broker.handlers import fetch as fetch_handler
from epochlog.broker.handlers import leader_and_isr as leader_and_isr_handler
from epochlog.broker.handlers import offset_for_leader_epoch as ofle_handler
from epochlog.broker.handlers import produce as produce_handler
from epochlog.broker.handlers import update_metadata as update_metadata_handler
from epochlog.broker.isr import IsrManager
from epochlog.broker.isr_task import (
    ALTER_PARTITION_VERSION_MAX,
    TICK_MS_MIN,
    WAKE_GAP_MS,
    apply_answer,
    build_request,
)
from epochlog.broker.metadata_cache import MetadataCache
from epochlog.broker.partition import Partition, Role
from epochlog.broker.read_path import ReadPath
from epochlog.broker.replica_selector import selector_for
from epochlog.broker.replicas import ReplicaManager
from epochlog.broker.replication_wait import replication_error
from epochlog.broker.storage import LogConfig, LogManager
from epochlog.broker.topic_configs import settings_from
from epochlog.protocol.apis.broker_heartbeat import BrokerHeartbeatRequest
from epochlog.protocol.apis.broker_registration import (
    BrokerRegistrationListener,
    BrokerRegistrationRequest,
)
from epochlog.protocol.apis.fetch import FetchResponse
from epochlog.protocol.apis.leader_and_isr import LeaderAndIsrResponse
from epochlog.protocol.apis.produce import ProduceResponse, TopicProduceResponse
from epochlog.protocol.apis.stop_replica import StopReplicaPartitionError, StopReplicaResponse
from epochlog.protocol.apis.update_metadata import UpdateMetadataResponse
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.records import build_batch

from .controller_node import CONTROLLER_ID
from .scheduler import Node, Scheduler

if TYPE_CHECKING:
    from .checkers import Checkers
    from .harness import Settings
    from .network import Conn, Network

E = ErrorCode
TP = tuple[str, int]
CONTROL_KEYS = (4, 5, 6)  # LeaderAndIsr, StopReplica, UpdateMetadata
METADATA_KEY = -1  # the simulation's own "where is the leader" request (see producer.py)
STORAGE_TICK_MS = 100  # broker/app.py's


@dataclasses.dataclass
class SimBrokerConfig:
    """The BrokerConfig fields the handlers read."""
    message_max_bytes: int = (1 << 20) + 12
    fetch_wait_ms_max: int = 30_000
    fetch_sessions_max: int = 100
    replica_selector_class: str = "leader"


def _overrides(cls: type, name: str, params: tuple[str, ...]) -> None:
    """A broken variant overrides a private method of the real class: fail at import, naming
    it, if that method is gone or its parameters changed (the override would be dead code and
    the variant silently correct)."""
    found = getattr(cls, name, None)
    have = tuple(inspect.signature(found).parameters) if callable(found) else None
    if have != params:
        raise ImportError(f"tests/sim: {cls.__name__}.{name}{params} is what the broken "
                          f"variant overrides, but the real class has {name}{have}; update "
                          f"_NoTruncation in tests/sim/broker_node.py")


_overrides(SourceFetcher, "_truncate_by_epoch",
           ("self", "f", "epoch", "end_offset", "source", "changed"))
_overrides(SourceFetcher, "_fetch_request", ("self", "fetching"))
_overrides(SourceFetcher, "_start_fetching", ("self", "f", "why"))


class _NoTruncation(SourceFetcher):
    """BROKEN on purpose (Settings.broken="no_truncation"): a follower that never truncates and
    sends no last fetched epoch, so a deposed leader keeps its divergent tail and the leader
    counts it as in sync. The checkers must catch it."""

    def _truncate_by_epoch(self, f: Any, epoch: int, end_offset: int, source: str,
                           changed: set[TP]) -> bool:
        self._start_fetching(f, "BROKEN: no truncation")
        return True

    def _fetch_request(self, fetching: list[Any]) -> Any:
        request: Any = super()._fetch_request(fetching)
        for topic in request.topics:
            for p in topic.partitions:
                p.last_fetched_epoch = -1
        return request


class _AdmitUnconfirmed(ControlEpochs):
    """BROKEN on purpose (Settings.broken="admit_unconfirmed"): the broker before the fix of
    seeds 3, 847, 923 (docs/simulation.md): control requests are judged at once, even before our
    registration answer, so one meant for our previous process can be adopted as ours."""

    def must_wait(self) -> bool:
        return False


@dataclasses.dataclass(eq=False)
class _ParkedFetch:
    plan: fetch_handler.Plan
    seen: list[Any]
    reply: Callable[[Any], None]


@dataclasses.dataclass(eq=False)
class _HeldControl:
    key: int
    request: Any
    reply: Callable[[Any], None]


@dataclasses.dataclass(eq=False)
class _PendingProduce:
    response: ProduceResponse
    waits: list[tuple[Any, Partition, int, int]]  # (answer, partition, epoch, last offset)
    reply: Callable[[Any], None]


class BrokerNode(Node):
    def __init__(self, sim: Scheduler, net: Network, settings: Settings, broker_id: int,
                 data_dir: str, topics: dict[str, dict[str, str]], checkers: Checkers) -> None:
        super().__init__(sim, broker_id, f"broker{broker_id}")
        self.net = net
        self.settings = settings
        self.broker_id = broker_id
        self.data_dir = data_dir
        self.topics = topics
        self.checkers = checkers
        self.config = SimBrokerConfig()
        self.log_config = LogConfig(segment_bytes=settings.segment_bytes,
                                    retention_ms=-1, flush_ms=settings.flush_ms)
        self.replicas: ReplicaManager | None = None
        self.generation_lost_total = 0
        self.reconnects_total = 0  # controller_link's: heartbeat connection found closed
        self.held_total = 0  # control requests held for a registration answer (all lives)
        self.follower_stats = FollowerStats()  # counters only: kept across crashes for figures

    # ---------------------------------------------------------------------------- lifecycle
    def on_start(self) -> None:
        clock = self.sim.clock
        self.epochs = (_AdmitUnconfirmed if self.settings.broken == "admit_unconfirmed"
                       else ControlEpochs)(self.broker_id)
        self.metadata = MetadataCache()
        self.read_path = ReadPath(
            FetchSessionCache(self.config.fetch_sessions_max,
                              random.Random(self.sim.rng.getrandbits(64))),
            selector_for(self.config.replica_selector_class))
        logs = LogManager.open(self.data_dir, self.log_config, clock, broker_id=self.broker_id,
                               cluster_id="epochlog")
        self.replicas = ReplicaManager(self.broker_id, logs, clock, produce_waiters_max=100,
                                       fetch_waiters_max=100)
        self.replicas.partition_listeners.append(self._on_partition)
        self.replicas.on_isr_candidate = self._isr_candidate
        self.incarnation_id = uuid.UUID(int=self.sim.rng.getrandbits(128), version=4)
        self.hb_conn: Conn | None = None
        self.held: list[_HeldControl] = []  # control requests waiting for a confirmation
        self._register_backoff_ms = BACKOFF_MS_MIN
        self._hb_backoff_ms, self._hb_failing = BACKOFF_MS_MIN, 0
        self._hb_token, self._hb_wait_from_ms, self._hb_due_ms = 0, 0, -1
        self._hb_watch = False
        # follower side (fetcher.py's ReplicaFetcherManager)
        self.fetchers: dict[int, SourceFetcher] = {}
        self.following: dict[TP, tuple[int, int]] = {}  # -> (source, leader epoch)
        self.fetch_wake_at: dict[int, int] = {}  # source -> when a pump is scheduled
        # leader side
        self.parked: list[_ParkedFetch] = []
        self.pending: list[_PendingProduce] = []
        self.isr = IsrManager(self.broker_id, clock,
                              lag_time_max_ms=self.settings.lag_time_max_ms,
                              retry_backoff_ms=self.settings.isr_retry_ms,
                              replica_live=lambda r: r in self.metadata.brokers)
        self.isr_in_flight = False
        self.isr_tick_ms = max(TICK_MS_MIN, self.settings.lag_time_max_ms // 2)
        self.isr_wake_at = -1
        self._register()
        self.timer(STORAGE_TICK_MS, self._storage_tick)
        self._isr_schedule(self.isr_tick_ms)

    def on_crash(self) -> None:
        assert self.replicas is not None
        self.net.crashed(self)  # the kernel closes our connections at once
        for each in self.replicas.logs.logs.values():
            each.close()  # the fds only: no flush, no checkpoint, no marker
        if self.settings.torn_writes and self.sim.rng.random() < 0.3:
            self._tear_a_tail()
        self.replicas = None
        self.checkers.on_crash(self.broker_id)

    def _tear_a_tail(self) -> None:
        """A write that the kill cut short: a prefix of a batch at the end of a segment."""
        dirs = sorted(d for d in os.listdir(self.data_dir)
                      if os.path.isdir(os.path.join(self.data_dir, d)))
        if not dirs:
            return
        folder = os.path.join(self.data_dir, self.sim.rng.choice(dirs))
        segments = sorted(n for n in os.listdir(folder) if n.endswith(".log"))
        if not segments:
            return
        torn = build_batch([(None, b"torn-" + bytes(40), None, self.sim.now_ms)])
        cut = self.sim.rng.randrange(1, len(torn))
        with open(os.path.join(folder, segments[-1]), "ab") as f:
            f.write(torn[:cut])
        self.sim.log(f"{self.name}: torn write of {cut} bytes at the end of {folder}")

    # ------------------------------------------------------------------- controller link
    # controller_link.py: registration and heartbeats on one connection ("heartbeat"); a request
    # on it that fails (refused, closed, timed out) closes it, and the next one reconnects.
    def _controller_call(self, key: int, request: Any, on_reply: Callable[[Any], None],
                         on_fail: Callable[[], None]) -> None:
        if self.hb_conn is None or not self.hb_conn.open:
            self.hb_conn = self.net.open_conn(self, CONTROLLER_ID)
        conn = self.hb_conn

        def failed(reason: str) -> None:
            self.net.close_conn(conn, self)  # ControllerLink._request: conn.close()
            on_fail()

        self.net.call(self, CONTROLLER_ID, key, 0, request,
                      self.settings.controller_request_timeout_ms, on_reply, failed, conn=conn)

    def connection_closed(self, conn: Any) -> None:
        """The controller closed our heartbeat connection (it crashed): the heartbeat loop
        notices at its next look (every CONNECTION_CHECK_MS while it waits, if it watches) and
        heartbeats at once on a new connection."""
        if conn is not self.hb_conn:
            return
        if self._hb_watch and self._hb_due_ms > self.sim.now_ms:
            checks = -(-(self.sim.now_ms - self._hb_wait_from_ms) // CONNECTION_CHECK_MS)
            due = self._hb_wait_from_ms + checks * CONNECTION_CHECK_MS
            if due < self._hb_due_ms:
                self.reconnects_total += 1
                self.sim.log(f"{self.name}: heartbeat connection closed: heartbeat at {due}ms")
                self._hb_wait(due - self.sim.now_ms, watch=False)

    def _register(self) -> None:
        """ControllerLink.register: until the controller answers, with a bounded backoff."""
        request = BrokerRegistrationRequest(
            broker_id=self.broker_id, cluster_id="epochlog", incarnation_id=self.incarnation_id,
            rack=f"rack{self.broker_id}", listeners=[BrokerRegistrationListener(
                name="EXTERNAL", host=f"broker{self.broker_id}", port=9092)])
        self._controller_call(62, request, self._registered, self._register_failed)

    def _registered(self, answer: Any) -> None:
        if answer.error_code != 0:
            raise AssertionError(f"{self.name}: registration refused: {answer.error_code}")
        self.epochs.registration_answered(answer.broker_epoch)
        self.sim.log(f"{self.name}: registered, generation {answer.broker_epoch}")
        self._register_backoff_ms = BACKOFF_MS_MIN
        self._release_held()  # app._registered: the held control requests go on
        self._hb_backoff_ms, self._hb_failing = BACKOFF_MS_MIN, 0
        self._hb_wait(self.settings.heartbeat_ms, watch=True)

    def _register_failed(self) -> None:
        delay = self._register_backoff_ms
        self._register_backoff_ms = min(delay * 2, BACKOFF_MS_MAX)
        self.timer(delay, self._register)

    def _hb_wait(self, wait_ms: int, watch: bool) -> None:
        """ControllerLink._wait_heartbeat_due: the next heartbeat in wait_ms, sooner if
        (watch) the heartbeat connection closes meanwhile."""
        self._hb_token += 1
        self._hb_wait_from_ms = self.sim.now_ms
        self._hb_due_ms = self.sim.now_ms + wait_ms
        self._hb_watch = watch
        self.timer(wait_ms, self._heartbeat, self._hb_token)

    def _heartbeat(self, token: int) -> None:
        if token != self._hb_token:
            return  # replaced by an earlier wake-up
        self._hb_due_ms = -1
        offline = self.replicas.offline_dir_ids() if self.replicas is not None else []
        request = BrokerHeartbeatRequest(broker_id=self.broker_id,
                                         broker_epoch=self.epochs.generation,
                                         offline_log_dirs=offline)
        self._controller_call(63, request, self._heartbeat_answer, self._heartbeat_failed)

    def _heartbeat_failed(self) -> None:
        """ControllerLink.run on ControllerUnavailable: again after a backoff doubling from
        BACKOFF_MS_MIN, never longer than the heartbeat interval; no watching meanwhile."""
        self._hb_failing += 1
        wait = min(self._hb_backoff_ms, self.settings.heartbeat_ms)
        self._hb_backoff_ms = min(self._hb_backoff_ms * 2, BACKOFF_MS_MAX)
        self._hb_wait(wait, watch=False)

    def _heartbeat_answer(self, answer: Any) -> None:
        self._hb_backoff_ms, self._hb_failing = BACKOFF_MS_MIN, 0
        if answer.error_code == E.STALE_BROKER_EPOCH:
            assert self.replicas is not None
            self.generation_lost_total += 1
            self.epochs.generation_over()  # control requests wait for the next answer
            count = self.replicas.resign_all(f"generation {self.epochs.generation} is over")
            self.sim.log(f"{self.name}: STALE_BROKER_EPOCH: resigned {count}, register again")
            self._register()
            return
        self._hb_wait(self.settings.heartbeat_ms, watch=True)

    # ------------------------------------------------------------------------------ serving
    def serve(self, key: int, version: int, request: Any, reply: Callable[[Any], None],
              source: int, conn: Any = None) -> None:
        assert self.replicas is not None
        if key in CONTROL_KEYS and self.epochs.must_wait():
            self._hold(key, request, reply)
        elif key in CONTROL_KEYS:
            self._control(key, request, reply)
        elif key == 1:
            self._fetch(request, version, reply)
        elif key == 23:
            reply(ofle_handler.answer(self, request, version))
        elif key == 0:
            self._produce(request, reply)
        elif key == METADATA_KEY:
            reply(self.metadata.partition(*request))
        else:
            raise AssertionError(f"{self.name}: no simulated handler for key {key}")

    def _control(self, key: int, request: Any, reply: Callable[[Any], None]) -> None:
        """The handlers of LeaderAndIsr (4), StopReplica (5), UpdateMetadata (6), past
        app.control_request_ready."""
        if key == 4:
            reply(self._leader_and_isr(request))
        elif key == 5:
            reply(self._stop_replica(request))
        else:
            error = self.epochs.admit("UpdateMetadata", request.controller_id,
                                      request.controller_epoch, request.broker_epoch)
            reply(UpdateMetadataResponse(error_code=error) if error
                  else update_metadata_handler.apply(self, request))

    def _hold(self, key: int, request: Any, reply: Callable[[Any], None]) -> None:
        """app.control_request_ready: our generation is not confirmed (no registration answer
        yet, or the last one declared over): wait for it, at most controller_request_timeout_ms,
        then judge in arrival order; none by then: left unanswered (the sender resends)."""
        self.epochs.held_total += 1
        self.held_total += 1
        held = _HeldControl(key, request, reply)
        self.held.append(held)
        self.timer(self.settings.controller_request_timeout_ms, self._hold_expired, held)

    def _hold_expired(self, held: _HeldControl) -> None:
        if held in self.held:
            self.held.remove(held)
            self.epochs.unanswered_total += 1
            self.sim.log(f"{self.name}: control request {held.key} held "
                         f"{self.settings.controller_request_timeout_ms}ms without a "
                         f"registration answer: unanswered")

    def _release_held(self) -> None:
        while self.held and not self.epochs.must_wait():
            held = self.held.pop(0)
            self._control(held.key, held.request, held.reply)

    def _leader_and_isr(self, request: Any) -> LeaderAndIsrResponse:
        """broker/handlers/leader_and_isr.py past app.control_request_ready: admit, apply. The
        topic's settings must then be those it was created with: they came in this request or an
        earlier one (nothing else tells a broker)."""
        assert self.replicas is not None
        error = self.epochs.admit("LeaderAndIsr", request.controller_id,
                                  request.controller_epoch, request.broker_epoch)
        if error:
            return LeaderAndIsrResponse(error_code=error)
        answer = leader_and_isr_handler.apply(self, request)
        for topic in request.topic_states:
            wanted, _ = settings_from(self.log_config, self.topics[topic.topic_name])
            if self.replicas.topic_configs.get(topic.topic_name) != wanted:
                raise AssertionError(f"{self.name}: topic {topic.topic_name}: settings "
                                     f"{self.replicas.topic_configs.get(topic.topic_name)} after "
                                     f"a LeaderAndIsr, not {wanted}")
        return answer

    def _stop_replica(self, request: Any) -> StopReplicaResponse:
        assert self.replicas is not None
        error = self.epochs.admit("StopReplica", request.controller_id,
                                  request.controller_epoch, request.broker_epoch)
        if error:
            return StopReplicaResponse(error_code=error)
        errors = []
        for topic in request.topic_states:
            for ps in topic.partition_states:
                code = self.replicas.stop_replica(topic.topic_name, ps.partition_index,
                                                  ps.leader_epoch, ps.delete_partition)
                errors.append(StopReplicaPartitionError(
                    topic_name=topic.topic_name, partition_index=ps.partition_index,
                    error_code=code))
        return StopReplicaResponse(partition_errors=errors)

    # ------------------------------------------------------------------------ fetch (leader)
    def _fetch(self, request: Any, version: int, reply: Callable[[Any], None]) -> None:
        """fetch.handle without the event loop: a read that has nothing to say yet is parked
        until a watched position moves (after_event) or its max wait passes."""
        plan = fetch_handler.begin(self, request, version)
        if isinstance(plan, FetchResponse):
            reply(plan)
            return
        done = fetch_handler.read(self, plan)
        wait_ms = min(request.max_wait_ms, self.config.fetch_wait_ms_max)
        if done.answer_now or done.bytes >= request.min_bytes or wait_ms <= 0:
            reply(fetch_handler.finish(self, plan, done))
            return
        parked = _ParkedFetch(plan, fetch_handler.positions(self, plan), reply)
        self.parked.append(parked)
        self.timer(wait_ms, self._fetch_deadline, parked)

    def _fetch_deadline(self, parked: _ParkedFetch) -> None:
        if parked in self.parked:
            self.parked.remove(parked)
            self._answer_parked(parked)

    def _answer_parked(self, parked: _ParkedFetch) -> None:
        parked.reply(fetch_handler.finish(self, parked.plan,
                                          fetch_handler.read(self, parked.plan)))

    # --------------------------------------------------------------------------- produce
    def _produce(self, request: Any, reply: Callable[[Any], None]) -> None:
        """produce.handle for acks=-1 without the event loop."""
        assert request.acks == -1, "the simulated producers use acks=all"
        waits = []
        topics = []
        for topic in request.topic_data:
            answers = []
            for data in topic.partition_data:
                answer, partition, last_offset = produce_handler.append(self, topic.name, data,
                                                                        request.acks)
                answers.append(answer)
                if partition is not None:
                    waits.append((answer, partition, partition.leader_epoch, last_offset))
            topics.append(TopicProduceResponse(name=topic.name, partition_responses=answers))
        pending = _PendingProduce(ProduceResponse(responses=topics), waits, reply)
        if self.settings.broken == "ack_on_append":
            reply(pending.response)  # BROKEN on purpose: acks=1 passed off as acks=all
            return
        if not self._try_settle(pending, final=False):
            self.pending.append(pending)
            self.timer(request.timeout_ms, self._produce_deadline, pending)

    def auto_create_soon(self, topic: str) -> None:  # produce.py calls it for unknown topics
        pass

    def _try_settle(self, pending: _PendingProduce, final: bool) -> bool:
        """replication_wait.wait_for_replication: done when every partition has its answer
        (replication_error not None); at the deadline the rest are REQUEST_TIMED_OUT."""
        errors = [replication_error(self.replicas, p, epoch, last)
                  for _, p, epoch, last in pending.waits]
        if not final and any(e is None for e in errors):
            return False
        for (answer, _, _, _), error in zip(pending.waits, errors, strict=True):
            answer.error_code = E.REQUEST_TIMED_OUT if error is None else error
        pending.reply(pending.response)
        return True

    def _produce_deadline(self, pending: _PendingProduce) -> None:
        if pending in self.pending:
            self.pending.remove(pending)
            self._try_settle(pending, final=True)

    # ------------------------------------------------------------------ after every event
    def after_event(self) -> None:
        if self.replicas is None:
            return
        if self.pending:
            for pending in list(self.pending):
                if self._try_settle(pending, final=False):
                    self.pending.remove(pending)
        if self.parked:
            for parked in list(self.parked):
                if fetch_handler.positions(self, parked.plan) != parked.seen:
                    self.parked.remove(parked)
                    self._answer_parked(parked)
        self.checkers.observe_broker(self)

    # --------------------------------------------------------------------- fetch (follower)
    def _on_partition(self, topic: str, index: int, partition: Partition | None) -> None:
        """fetcher.ReplicaFetcherManager.on_partition."""
        tp = (topic, index)
        if partition is not None and partition.role is Role.FOLLOWER:
            wanted = (partition.leader_id, partition.leader_epoch)
            if self.following.get(tp) == wanted:
                return
            self._unfollow(tp)
            fetcher = self.fetchers.get(partition.leader_id)
            if fetcher is None:
                fetcher = self.fetchers[partition.leader_id] = self._make_fetcher(
                    partition.leader_id)
            fetcher.add(partition)
            self.following[tp] = wanted
            self._wake_fetcher(partition.leader_id, 0)
        else:
            self._unfollow(tp)

    def _unfollow(self, tp: TP) -> None:
        was = self.following.pop(tp, None)
        if was is not None and was[0] in self.fetchers:
            self.fetchers[was[0]].remove(*tp)

    def _make_fetcher(self, source_id: int) -> SourceFetcher:
        cls = _NoTruncation if self.settings.broken == "no_truncation" else SourceFetcher
        return cls(self.broker_id, source_id, self.sim.clock, fetch_max_bytes=64 << 10,
                   partition_max_bytes=16 << 10, max_wait_ms=self.settings.fetch_max_wait_ms,
                   backoff_ms=self.settings.fetch_backoff_ms, stats=self.follower_stats)

    def _wake_fetcher(self, source: int, delay_ms: int) -> None:
        at = self.sim.now_ms + delay_ms
        due = self.fetch_wake_at.get(source)
        if due is not None and due <= at:
            return
        self.fetch_wake_at[source] = at
        self.timer(delay_ms, self._pump, source, at)

    def _pump(self, source: int, at: int) -> None:
        """One turn of fetcher.py's loop: send the next request, or sleep until a backoff
        ends (a new partition wakes it earlier)."""
        if self.fetch_wake_at.get(source) != at:
            return  # superseded by an earlier wake
        del self.fetch_wake_at[source]
        fetcher = self.fetchers.get(source)
        if fetcher is None:
            return
        if not len(fetcher):
            if not fetcher.waiting_for_answer:
                del self.fetchers[source]
            return
        request = fetcher.next_request()
        if request is None:
            wake = fetcher.next_wakeup_ms()
            if wake is not None and not fetcher.waiting_for_answer:
                self._wake_fetcher(source, wake - self.sim.now_ms)
            return
        key, message = request[0], cast(Any, request[1])
        self.net.call(self, source, key, 12 if key == 1 else 4, message,
                      self.settings.request_timeout_ms + (message.max_wait_ms if key == 1 else 0),
                      lambda answer: self._fetch_answered(fetcher, key, answer),
                      lambda reason: self._fetch_failed(fetcher, reason))

    def _fetch_answered(self, fetcher: SourceFetcher, key: int, answer: Any) -> None:
        assert self.replicas is not None
        for tp in fetcher.on_response(key, answer):
            self.replicas.poke(tp)
        self._wake_fetcher(fetcher.source_id, 0)

    def _fetch_failed(self, fetcher: SourceFetcher, reason: str) -> None:
        fetcher.on_failure(reason)
        self._wake_fetcher(fetcher.source_id, 0)

    # ------------------------------------------------------------------------------- ISR
    def _isr_candidate(self, partition: Partition) -> None:
        self._isr_schedule(WAKE_GAP_MS)

    def _isr_schedule(self, delay_ms: int) -> None:
        at = self.sim.now_ms + delay_ms
        if 0 <= self.isr_wake_at <= at:
            return
        self.isr_wake_at = at
        self.timer(delay_ms, self._isr_run, at)

    def _isr_run(self, at: int) -> None:
        """isr_task.IsrTask: ask for due proposals, send them in one AlterPartition."""
        assert self.replicas is not None
        if self.isr_wake_at != at:
            return
        self.isr_wake_at = -1
        if not self.isr_in_flight:
            proposals = self.isr.due(list(self.replicas.partitions.values()))
            if proposals:
                self._alter_partition(proposals)
        wait = self.isr_tick_ms
        retry = self.isr.next_retry_ms()
        if retry is not None:
            wait = max(WAKE_GAP_MS, min(wait, retry - self.sim.now_ms))
        self._isr_schedule(wait)

    def _alter_partition(self, proposals: list[Any]) -> None:
        request = build_request(self.broker_id, self.epochs.generation, proposals)
        self.isr_in_flight = True
        self.net.call(self, CONTROLLER_ID, 56, ALTER_PARTITION_VERSION_MAX, request,
                      self.settings.request_timeout_ms,
                      lambda answer: self._isr_results(proposals, answer),
                      lambda reason: self._isr_results(proposals, None))

    def _isr_results(self, proposals: list[Any], answer: Any) -> None:
        assert self.replicas is not None
        self.isr_in_flight = False
        apply_answer(self.replicas, self.isr, proposals, answer)

    # --------------------------------------------------------------------------- storage
    def _storage_tick(self) -> None:
        assert self.replicas is not None
        for each in list(self.replicas.logs.logs.values()):
            if each.flush_due():
                each.flush()
        self.replicas.logs.tick()
        self.timer(STORAGE_TICK_MS, self._storage_tick)
