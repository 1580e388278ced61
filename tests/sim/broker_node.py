"""A broker process, simulated: the broker's real machines and storage on the simulated clock
and network, each driven here as the broker's asyncio code drives it.

Real (the broker's own code, through the same events, actions and deadlines):
- the controller link's decisions, `controller_session.ControllerSession` (register with backoff,
  heartbeat, heartbeat at once on a closed connection, STALE_BROKER_EPOCH ends the generation),
  and the hold of control requests until the generation is confirmed, `control_hold.ControlHold`,
  with `ControlEpochs` (fencing of control requests);
- `MetadataCache`, `ReplicaManager` / `Partition` (LeaderAndIsr and UpdateMetadata applied by
  their handlers' own `apply`, topic settings included: `TopicConfigs` learns the topic's from
  the LeaderAndIsr that opens its partitions; StopReplica through the sync calls its handler
  makes), storage `LogManager` / `Log` on real files, recovery after a crash included;
- follower replication: `source_fetchers.SourceFetchers` (which source fetches what; connect,
  send, sleep, end) over `follower.SourceFetcher`, told by `ReplicaManager.partition_listeners`;
- ISR changes: `isr_schedule.IsrSchedule` (when) over `isr.IsrManager` (what), with
  isr_task.py's `build_request` / `apply_answer`;
- serving: fetch.py's `begin` / `read_or_park` / `finish` / `positions` with
  `fetch_wait.ParkedFetch`, offset_for_leader_epoch.py's `answer`, produce.py's `append_all` with
  `replication_wait.ReplicationWait`.
What stands in for asyncio here: a machine's requests go on the simulated network and its next
deadline is a timer (`_arm`); parked fetches and acks=all waits are re-checked after every event
of this node, as a purgatory poke would wake them; the controller's close of our heartbeat
connection reaches the session when it arrives (ControllerLink looks every CONNECTION_CHECK_MS);
a fetcher's connection opens at once (a leader that is down fails the request instead).
Mirrored still:
- the control handlers' order: fence (`admit`), then apply;
- the storage tick (app.py's loop: flush the logs that are due, then `LogManager.tick`; nothing
  there to decide).

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

from epochlog.broker.control_hold import ControlHold, HoldAction, Judge
from epochlog.broker.controller_session import Action as SessionAction
from epochlog.broker.controller_session import (
    ControllerSession,
    GenerationOver,
    Heartbeat,
    Refused,
    Register,
    Registered,
)
from epochlog.broker.fencing import ControlEpochs
from epochlog.broker.fetch_sessions import FetchSessionCache
from epochlog.broker.fetch_wait import ParkedFetch
from epochlog.broker.follower import FollowerStats, SourceFetcher
from epochlog.broker.handlers import fetch as fetch_handler
from epochlog.broker.handlers import leader_and_isr as leader_and_isr_handler
from epochlog.broker.handlers import offset_for_leader_epoch as ofle_handler
from epochlog.broker.handlers import produce as produce_handler
from epochlog.broker.handlers import update_metadata as update_metadata_handler
from epochlog.broker.isr import IsrManager, IsrProposal
from epochlog.broker.isr_schedule import IsrSchedule, SendAlterPartition
from epochlog.broker.isr_task import ALTER_PARTITION_VERSION_MAX, apply_answer, build_request
from epochlog.broker.metadata_cache import MetadataCache
from epochlog.broker.partition import Partition
from epochlog.broker.read_path import ReadPath
from epochlog.broker.replica_selector import selector_for
from epochlog.broker.replicas import ReplicaManager
from epochlog.broker.replication_wait import ReplicationWait
from epochlog.broker.source_fetchers import Connect, Send, SourceFetchers
from epochlog.broker.storage import LogConfig, LogManager
from epochlog.broker.topic_configs import settings_from
from epochlog.protocol.apis.broker_heartbeat import BrokerHeartbeatRequest
from epochlog.protocol.apis.broker_registration import (
    BrokerRegistrationListener,
    BrokerRegistrationRequest,
)
from epochlog.protocol.apis.fetch import FetchResponse
from epochlog.protocol.apis.leader_and_isr import LeaderAndIsrResponse
from epochlog.protocol.apis.produce import ProduceResponse
from epochlog.protocol.apis.stop_replica import StopReplicaPartitionError, StopReplicaResponse
from epochlog.protocol.apis.update_metadata import UpdateMetadataResponse
from epochlog.protocol.records import build_batch

from .controller_node import CONTROLLER_ID
from .scheduler import Node, Scheduler

if TYPE_CHECKING:
    from .checkers import Checkers
    from .harness import Settings
    from .network import Conn, Network

TP = tuple[str, int]
CONTROL_KEYS = {4: "LeaderAndIsr", 5: "StopReplica", 6: "UpdateMetadata"}
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
    parked: ParkedFetch
    reply: Callable[[Any], None]
    done: fetch_handler.Read | None = None  # the last read: the answer at the deadline


@dataclasses.dataclass(eq=False)
class _HeldControl:
    key: int
    request: Any
    reply: Callable[[Any], None]


@dataclasses.dataclass(eq=False)
class _PendingProduce:
    wait: ReplicationWait
    response: ProduceResponse
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
        self.armed: dict[str, int] = {}  # machine -> when its timer fires (_arm)
        self.hb_conn: Conn | None = None
        self.session = ControllerSession(self.broker_id, self.epochs, self.settings.heartbeat_ms)
        self.hold: ControlHold[_HeldControl] = ControlHold(
            self.epochs, self.settings.controller_request_timeout_ms)
        # follower side (fetcher.py's ReplicaFetcherManager)
        self.fetching = SourceFetchers(self.broker_id, self._make_fetcher,
                                       backoff_ms=self.settings.fetch_backoff_ms)
        # leader side
        self.parked: list[_ParkedFetch] = []
        self.pending: list[_PendingProduce] = []
        self.isr = IsrManager(self.broker_id, clock,
                              lag_time_max_ms=self.settings.lag_time_max_ms,
                              retry_backoff_ms=self.settings.isr_retry_ms,
                              replica_live=lambda r: r in self.metadata.brokers)
        self.isr_schedule = IsrSchedule(self.isr)
        self.isr_schedule.start(self.sim.now_ms)
        self._session_do(self.session.start(self.sim.now_ms))
        self.timer(STORAGE_TICK_MS, self._storage_tick)
        self._isr_do([])  # its first tick

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
                         on_fail: Callable[[str], None]) -> None:
        if self.hb_conn is None or not self.hb_conn.open:
            self.hb_conn = self.net.open_conn(self, CONTROLLER_ID)
        conn = self.hb_conn

        def failed(reason: str) -> None:
            self.net.close_conn(conn, self)  # ControllerLink._request: conn.close()
            on_fail(reason)

        self.net.call(self, CONTROLLER_ID, key, 0, request,
                      self.settings.controller_request_timeout_ms, on_reply, failed, conn=conn)

    def connection_closed(self, conn: Any) -> None:
        """The controller closed our heartbeat connection (it crashed): the session is told
        when the close arrives (ControllerLink finds it at its next look, every
        CONNECTION_CHECK_MS)."""
        if conn is self.hb_conn:
            self._session_do(self.session.connection_closed(self.sim.now_ms))

    def _session_do(self, actions: list[SessionAction]) -> None:
        """ControllerLink._drive: the session's requests go out, their answers come back."""
        session, now = self.session, lambda: self.sim.now_ms
        for action in actions:
            match action:
                case Register():
                    self._controller_call(62, self._registration(), lambda a: self._session_do(
                        session.registration_answered(now(), a.error_code, a.broker_epoch)),
                        lambda why: self._session_do(session.registration_failed(now(), why)))
                case Heartbeat(broker_epoch=broker_epoch):
                    assert self.replicas is not None
                    request = BrokerHeartbeatRequest(
                        broker_id=self.broker_id, broker_epoch=broker_epoch,
                        offline_log_dirs=self.replicas.offline_dir_ids())
                    self._controller_call(63, request, lambda a: self._session_do(
                        session.heartbeat_answered(now(), a.error_code)),
                        lambda why: self._session_do(session.heartbeat_failed(now(), why)))
                case Registered(generation=generation):
                    self.sim.log(f"{self.name}: registered, generation {generation}")
                    self._hold_do(self.hold.confirmed(now()))  # app._registered
                case GenerationOver(why=why):  # app._generation_lost
                    assert self.replicas is not None
                    count = self.replicas.resign_all(why)
                    self.sim.log(f"{self.name}: STALE_BROKER_EPOCH: resigned {count}")
                case Refused(error_code=code):
                    raise AssertionError(f"{self.name}: registration refused: {code}")
        self._arm("session", session.next_deadline_ms(),
                  lambda: self._session_do(session.tick(now())))

    def _registration(self) -> BrokerRegistrationRequest:
        return BrokerRegistrationRequest(
            broker_id=self.broker_id, cluster_id="epochlog", incarnation_id=self.incarnation_id,
            rack=f"rack{self.broker_id}", listeners=[BrokerRegistrationListener(
                name="EXTERNAL", host=f"broker{self.broker_id}", port=9092)])

    def _arm(self, name: str, at_ms: int | None, fn: Callable[[], None]) -> None:
        """One timer per machine, at its next deadline: a nearer one replaces a later timer; a
        timer that finds nothing due does nothing (its machine says so) and arms the next."""
        if at_ms is None:
            return
        at_ms = max(at_ms, self.sim.now_ms)
        armed = self.armed.get(name)
        if armed is not None and self.sim.now_ms <= armed <= at_ms:
            return
        self.armed[name] = at_ms
        self.timer(at_ms - self.sim.now_ms, self._fire, name, at_ms, fn)

    def _fire(self, name: str, at_ms: int, fn: Callable[[], None]) -> None:
        if self.armed.get(name) == at_ms:  # else a nearer one replaced it
            del self.armed[name]
            fn()

    # ------------------------------------------------------------------------------ serving
    def serve(self, key: int, version: int, request: Any, reply: Callable[[Any], None],
              source: int, conn: Any = None) -> None:
        assert self.replicas is not None
        if key in CONTROL_KEYS:  # app.control_request_ready
            actions = self.hold.arrived(self.sim.now_ms, _HeldControl(key, request, reply),
                                        CONTROL_KEYS[key])
            self.held_total += not actions
            self._hold_do(actions)
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

    def _hold_do(self, actions: list[HoldAction[_HeldControl]]) -> None:
        """Judged: applied, in the hold's order; unanswered: dropped (the sender resends)."""
        for action in actions:
            if isinstance(action, Judge):
                self._control(action.request.key, action.request.request, action.request.reply)
        self._arm("hold", self.hold.next_deadline_ms(),
                  lambda: self._hold_do(self.hold.tick(self.sim.now_ms)))

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
        until a watched position moves (after_event, as a purgatory poke) or its max wait
        passes."""
        plan = fetch_handler.begin(self, request, version)
        if isinstance(plan, FetchResponse):
            reply(plan)
            return
        wait_ms = min(request.max_wait_ms, self.config.fetch_wait_ms_max)
        entry = _ParkedFetch(plan, ParkedFetch(self.sim.now_ms, wait_ms, request.min_bytes), reply)
        if self._read_or_park(entry):
            self.timer(wait_ms, self._fetch_deadline, entry)

    def _read_or_park(self, entry: _ParkedFetch) -> bool:
        done = fetch_handler.read_or_park(self, entry.plan, entry.parked, self.sim.now_ms)
        if isinstance(done, FetchResponse):
            entry.reply(done)
            return False
        entry.done = done
        self.parked.append(entry)
        return True

    def _fetch_deadline(self, entry: _ParkedFetch) -> None:
        if entry in self.parked:
            assert entry.done is not None
            self.parked.remove(entry)
            entry.reply(fetch_handler.finish(self, entry.plan, entry.done))

    # --------------------------------------------------------------------------- produce
    def _produce(self, request: Any, reply: Callable[[Any], None]) -> None:
        """produce.handle for acks=-1 without the event loop: its ReplicationWait re-checked
        after every event (as a purgatory poke), final at the request's timeout."""
        assert request.acks == -1 and self.replicas is not None, "the producers use acks=all"
        response, waits = produce_handler.append_all(self, request)
        if self.settings.broken == "ack_on_append":
            reply(response)  # BROKEN on purpose: acks=1 passed off as acks=all
            return
        pending = _PendingProduce(ReplicationWait(self.replicas, waits), response, reply)
        if pending.wait.settled():
            reply(response)
            return
        self.pending.append(pending)
        self.timer(request.timeout_ms, self._produce_deadline, pending)

    def auto_create_soon(self, topic: str) -> None:  # produce.py calls it for unknown topics
        pass

    def _produce_deadline(self, pending: _PendingProduce) -> None:
        if pending in self.pending:
            self.pending.remove(pending)
            pending.wait.settled(final=True)
            pending.reply(pending.response)

    # ------------------------------------------------------------------ after every event
    def after_event(self) -> None:
        if self.replicas is None:
            return
        for pending in list(self.pending):
            if pending.wait.settled():
                self.pending.remove(pending)
                pending.reply(pending.response)
        for entry in list(self.parked):
            if entry.parked.moved(fetch_handler.positions(self, entry.plan)):
                self.parked.remove(entry)
                self._read_or_park(entry)
        self.checkers.observe_broker(self)

    # --------------------------------------------------------------------- fetch (follower)
    def _on_partition(self, topic: str, index: int, partition: Partition | None) -> None:
        """fetcher.ReplicaFetcherManager.on_partition: the sources it names are pumped once
        the event that applied the state is over (as a woken task runs)."""
        if self.fetching.on_partition(topic, index, partition):
            self._arm("fetch", self.sim.now_ms, self._pump_all)

    def _make_fetcher(self, source_id: int) -> SourceFetcher:
        cls = _NoTruncation if self.settings.broken == "no_truncation" else SourceFetcher
        return cls(self.broker_id, source_id, self.sim.clock, fetch_max_bytes=64 << 10,
                   partition_max_bytes=16 << 10, max_wait_ms=self.settings.fetch_max_wait_ms,
                   backoff_ms=self.settings.fetch_backoff_ms, stats=self.follower_stats)

    def _pump_all(self) -> None:
        for source_id in list(self.fetching.sources):
            self._pump(source_id)

    def _pump(self, source_id: int) -> None:
        """fetcher.py's task for one source: what next_step says, until it waits."""
        while True:
            match self.fetching.next_step(self.sim.now_ms, source_id):
                case Connect():  # no connection to open here: a down leader fails the request
                    self.fetching.connected(source_id)
                case Send(api_key=key, request=message):
                    request = cast(Any, message)
                    self.net.call(
                        self, source_id, key, 12 if key == 1 else 4, request,
                        self.settings.request_timeout_ms + (request.max_wait_ms if key == 1 else 0),
                        lambda answer: self._fetch_answered(source_id, key, answer),
                        lambda why: self._fetch_failed(source_id, why))
                    break
                case _:  # Idle or End
                    break
        self._arm("fetch", self.fetching.next_deadline_ms(), self._pump_all)

    def _fetch_answered(self, source_id: int, key: int, answer: Any) -> None:
        assert self.replicas is not None
        for tp in self.fetching.answered(source_id, key, answer):
            self.replicas.poke(tp)
        self._pump(source_id)

    def _fetch_failed(self, source_id: int, why: str) -> None:
        self.fetching.request_failed(source_id, why)
        self._pump(source_id)

    # ------------------------------------------------------------------------------- ISR
    def _isr_candidate(self, partition: Partition) -> None:  # isr_task.IsrTask.wake
        self.isr_schedule.wake(self.sim.now_ms)
        self._arm("isr", self.isr_schedule.next_deadline_ms(), self._isr_tick)

    def _isr_tick(self) -> None:
        assert self.replicas is not None
        self._isr_do(self.isr_schedule.tick(self.sim.now_ms,
                                            list(self.replicas.partitions.values())))

    def _isr_do(self, actions: list[SendAlterPartition]) -> None:
        """isr_task.IsrTask.run: each AlterPartition sent, its answer applied."""
        for send in actions:  # one at most
            sent = list(send.proposals)
            request = build_request(self.broker_id, self.epochs.generation, sent)
            self.net.call(self, CONTROLLER_ID, 56, ALTER_PARTITION_VERSION_MAX, request,
                          self.settings.request_timeout_ms,
                          lambda answer, sent=sent: self._isr_answered(sent, answer),
                          lambda reason, sent=sent: self._isr_answered(sent, None))
        self._arm("isr", self.isr_schedule.next_deadline_ms(), self._isr_tick)

    def _isr_answered(self, proposals: list[IsrProposal], answer: Any) -> None:
        assert self.replicas is not None
        apply_answer(self.replicas, self.isr, proposals, answer)
        self._isr_do(self.isr_schedule.answered(self.sim.now_ms))

    # --------------------------------------------------------------------------- storage
    def _storage_tick(self) -> None:
        assert self.replicas is not None
        for each in list(self.replicas.logs.logs.values()):
            if each.flush_due():
                each.flush()
        self.replicas.logs.tick()
        self.timer(STORAGE_TICK_MS, self._storage_tick)
