"""The controller as a pure state machine: decisions in, records and control requests out.

Theory of operation
-------------------
`ControllerState` holds the cluster's metadata: the controller epoch, brokers and their
generations (broker epochs, KIP-380), topics with their partitions' replicas, leader, leader epoch,
ISR and partition epoch. It does no I/O and never reads a clock: every method that depends on time
takes `now_ms`, and randomness (topic ids, where assignment starts) comes from an injected
`random.Random`. Its settings are the controller's own `ControllerConfig`, read where they are
needed. The same code runs in real processes and in a deterministic simulation.

Deciding and applying are separate. A decision (`register_broker`, `expire_sessions`,
`alter_partition`, `create_topic`, ...) reads the state and emits records; the state changes only
by `apply(record)`, which is also what a replay of the metadata log runs, so a replay rebuilds
exactly the state that was decided. Decisions accumulate their records and the control requests
that follow from them; `take_ready()` hands both over, like etcd-raft's Ready:

    persist before you send: the caller appends `ready.records` to the metadata log and fsyncs
    BEFORE it sends any of `ready.sends` or answers the request that caused them.

(`ControllerService._commit` is where that rule is enforced.) If the append fails the process must
stop: the in-memory state would be ahead of the durable one.

Beside this file: what the decisions must tell brokers is noted in an `Outbox`, which builds the
control requests (outbox.py); a topic request's checks are pure functions (topic_checks.py), and
so is the choice of a partition's next leader and its ISR (elections.py), which the decisions
here carry out.

KIP-380 handling of broker changes: a registration from a broker id with no live generation is a
start-up; one while the old generation is still live, from a new process (another incarnation id),
is a bounce: the old generation fails first (its leaderships are re-elected from the ISR and it
leaves ISRs), then the new one starts up. A session that expires is a failure. KIP-101: a broker
that leads a partition after its (re)registration always leads it in a new leader epoch.

Connection loss: a killed broker's TCP connections close at once, long before its session would
expire. When the connection a live generation heartbeats on closes (`connection_lost`, told by the
service), its session deadline is brought forward to `broker_connection_loss_grace_ms` from then
(never pushed back): a live broker reconnects and heartbeats within it (which restores a full
session); a dead one is failed by `expire_sessions` as if its session had expired, logged as a
connection loss. Volatile, like every session deadline.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from epochlog.protocol.apis.broker_heartbeat import replica_dir_id
from epochlog.protocol.error_codes import ErrorCode

from . import elections, outbox, rebalance, topic_checks, topic_settings
from .config import ControllerConfig
from .model import ALIVE, DEAD, NO_LEADER, SHUTTING_DOWN, Broker, Partition, Ready, Send, Topic
from .records import (
    BrokerRegistered,
    BrokerStateChanged,
    ClusterDefaultsChanged,
    ControllerStarted,
    Listener,
    PartitionChanged,
    Record,
    TopicConfigsChanged,
    TopicCreated,
    TopicDeleted,
)
from .unclean_recovery import Recoveries

log = logging.getLogger("epochlog.controller")

TOMBSTONES_MAX = 10_000  # deleted topics remembered for full-state resyncs (volatile)

E = ErrorCode


@dataclass
class CreateTopicResult:
    error: int = 0
    message: str | None = None
    topic_id: uuid.UUID = uuid.UUID(int=0)
    num_partitions: int = -1
    replication_factor: int = -1
    configs: dict[str, str] = field(default_factory=dict)


@dataclass
class HeartbeatResult:
    error: int = 0
    is_fenced: bool = True
    should_shut_down: bool = False


class ControllerState:
    def __init__(self, config: ControllerConfig, rng: random.Random | None = None) -> None:
        """config: the controller's settings, read from there (so a new one is added in
        ControllerConfig alone); rng: all the state's randomness."""
        self.config = config
        self.controller_id = config.controller_id
        self.cluster_id = config.cluster_id
        self.topic_defaults = config.topic_defaults()  # the static defaults of topic settings
        self.rng = rng or random.Random()
        # Durable state: changed only by apply().
        self.controller_epoch = 0
        self.next_broker_epoch = 1
        self.brokers: dict[int, Broker] = {}
        self.topics: dict[str, Topic] = {}
        # Dynamic cluster-wide defaults of topic settings (AlterConfigs on the default BROKER
        # resource), by topic setting name: above topic_defaults, below a topic's own.
        self.dynamic_defaults: dict[str, str] = {}
        # Volatile.
        self.counters: Counter[str] = Counter()
        self.tombstones: dict[str, tuple[tuple[int, tuple[int, ...]], ...]] = {}
        self._records: list[Record] = []
        self._out = outbox.Outbox()
        self._next_rebalance_ms: int | None = None  # set by the first rebalance_leaders call
        # KIP-966 unclean recovery (unclean_recovery.py); None: an unclean election takes the
        # first live replica at once (unclean_recovery_timeout_ms -1)
        self.recoveries = Recoveries(config.unclean_recovery_timeout_ms) \
            if config.unclean_recovery_timeout_ms >= 0 else None
        # broker id -> the generation whose heartbeat connection closed and which has not
        # heartbeated since (its session deadline is the grace's end)
        self._connection_lost: dict[int, int] = {}

    # ----------------------------------------------------------------------------- applying
    def apply(self, record: Record) -> None:
        """Fold one record into the state (decisions and replay alike)."""
        match record:
            case ControllerStarted(controller_epoch=epoch):
                assert epoch > self.controller_epoch, (epoch, self.controller_epoch)
                self.controller_epoch = epoch
            case BrokerRegistered():
                assert record.broker_epoch >= self.next_broker_epoch, record
                self.next_broker_epoch = record.broker_epoch + 1
                self.brokers[record.broker_id] = Broker(
                    record.broker_id, record.broker_epoch, record.incarnation_id, record.rack,
                    record.listeners, replica_capacity=record.replica_capacity)
            case BrokerStateChanged(broker_id=bid, broker_epoch=epoch, state=state):
                broker = self.brokers[bid]
                assert broker.broker_epoch == epoch, (record, broker)
                broker.state = state
            case TopicCreated(name=name, topic_id=topic_id, configs=configs):
                assert name not in self.topics, name
                self.topics[name] = Topic(name, topic_id, dict(configs))
                self._derive_policy(self.topics[name])
            case PartitionChanged():
                self.topics[record.topic].partitions[record.partition] = Partition(
                    record.replicas, record.leader, record.leader_epoch, record.isr,
                    record.partition_epoch, record.elr, record.last_known_elr)
            case TopicDeleted(name=name):
                del self.topics[name]
            case TopicConfigsChanged(name=name, configs=configs):
                self.topics[name].configs = dict(configs)
                self._derive_policy(self.topics[name])
            case ClusterDefaultsChanged(configs=configs):
                self.dynamic_defaults = dict(configs)
                for topic in self.topics.values():
                    self._derive_policy(topic)
            case _:
                raise AssertionError(f"unknown record {record!r}")

    def _derive_policy(self, topic: Topic) -> None:
        """The typed settings decisions use, parsed once per change of the topic's settings
        or the cluster's defaults (the one resolution: topic_settings.decided)."""
        topic.policy = topic_settings.policy(self.decided_settings(topic.name))

    def replay(self, records: Sequence[Record]) -> None:
        for record in records:
            self.apply(record)

    def _emit(self, record: Record) -> None:
        self.apply(record)
        self._records.append(record)

    def take_ready(self) -> Ready:
        """Records to persist and requests to send since the last call (see the module rule)."""
        ready = Ready(self._records, self._out.sends(self))
        self._records = []
        self._out = outbox.Outbox()
        return ready

    def durable_view(self) -> dict[str, Any]:
        """The durable state as plain data, for comparing a replay with the live state."""
        return {
            "controller_epoch": self.controller_epoch,
            "next_broker_epoch": self.next_broker_epoch,
            "brokers": {i: (b.broker_epoch, str(b.incarnation_id), b.rack, b.listeners, b.state)
                        for i, b in sorted(self.brokers.items())},
            "topics": {n: (str(t.topic_id), t.configs,
                           {i: (p.replicas, p.leader, p.leader_epoch, p.isr, p.partition_epoch,
                                p.elr, p.last_known_elr)
                            for i, p in sorted(t.partitions.items())})
                       for n, t in sorted(self.topics.items())},
        }

    # ---------------------------------------------------------------------- controller start
    def start(self, now_ms: int) -> int:
        """A controller process starts: a new controller epoch, fresh sessions for the live
        generations found in the log, and the whole state to each of them."""
        self._emit(ControllerStarted(self.controller_epoch + 1))
        self._connection_lost.clear()
        for broker in self.brokers.values():
            if broker.live:
                broker.session_deadline_ms = now_ms + self.config.broker_session_timeout_ms
                self._out.full.add(broker.broker_id)
        log.info("controller %d started with controller epoch %d (%d live brokers, %d topics)",
                 self.controller_id, self.controller_epoch,
                 sum(b.live for b in self.brokers.values()), len(self.topics))
        return self.controller_epoch

    # -------------------------------------------------------------------------------- brokers
    def register_broker(self, broker_id: int, incarnation_id: uuid.UUID, rack: str | None,
                        listeners: Sequence[Listener], now_ms: int,
                        cluster_id: str = "", previous_broker_epoch: int = -1,
                        replica_capacity: int = -1) -> tuple[int, int]:
        """(error, broker epoch) for a BrokerRegistration. previous_broker_epoch: the
        generation a new process shut down cleanly from (its clean-shutdown file), -1 if it
        did not (KIP-966). replica_capacity: how many replicas it can host (-1: no bound);
        topic creations and partition increases place no more on it (topic_checks.py)."""
        if cluster_id and cluster_id != self.cluster_id:
            log.warning("broker %d refused: cluster id %r is not ours (%r)", broker_id,
                        cluster_id, self.cluster_id)
            return E.INCONSISTENT_CLUSTER_ID, -1
        if broker_id < 0 or not listeners:
            return E.INVALID_REGISTRATION, -1
        old = self.brokers.get(broker_id)
        kind = "start-up"
        if old is not None and old.live:
            if old.incarnation_id != incarnation_id:
                kind = f"bounce (generation {old.broker_epoch} fails first)"
                self.counters["bounces"] += 1
                self._fail_generation(old, "bounced")
            else:
                kind = f"re-registration of the same process (generation {old.broker_epoch})"
        if old is not None and old.incarnation_id != incarnation_id \
                and previous_broker_epoch != old.broker_epoch:
            self._unclean_restart(broker_id, old.broker_epoch, previous_broker_epoch)
        epoch = self.next_broker_epoch
        self._emit(BrokerRegistered(broker_id, epoch, incarnation_id, rack, tuple(listeners),
                                    replica_capacity))
        broker = self.brokers[broker_id]
        broker.session_deadline_ms = now_ms + self.config.broker_session_timeout_ms
        self._connection_lost.pop(broker_id, None)
        self.counters["registrations"] += 1
        log.info("broker %d registered: generation %d, rack %s, listeners %s (control requests "
                 "to %s:%d), incarnation %s, hosts at most %s replicas: %s", broker_id, epoch,
                 rack, broker.describe_listeners(), *broker.endpoint, incarnation_id,
                 "unbounded" if replica_capacity < 0 else replica_capacity, kind)
        self._start_generation(broker_id)
        return 0, epoch

    def _unclean_restart(self, broker_id: int, last_epoch: int, said_epoch: int) -> None:
        """KIP-966: a broker that did not shut down cleanly may have lost what it acknowledged
        (a crash before its page cache reached the disk, a recovery cut): it leaves the ISR and
        the ELR of its partitions, so that it leads only after catching up, and joins their
        last known ELR, a last resort once ISR and ELR are both empty (elections.py), a
        former ISR member ahead of former ELR members."""
        self.counters["unclean_restarts"] += 1
        log.warning("broker %d restarted after an unclean shutdown (its last generation was %d, "
                    "it says %s): it leaves the ISR and eligible replicas of its partitions",
                    broker_id, last_epoch, "none" if said_epoch < 0 else said_epoch)
        for topic, index, p in self._partitions_of(broker_id):
            if broker_id not in p.isr and broker_id not in p.elr:
                continue
            rest = _without(p.last_known_elr, broker_id)
            known = (broker_id, *rest) if broker_id in p.isr else (*rest, broker_id)
            leader = NO_LEADER if p.leader == broker_id else p.leader
            self._change(topic, index, leader, _without(p.isr, broker_id),
                         f"broker {broker_id} restarted uncleanly",
                         elr=_without(p.elr, broker_id), last_known_elr=known)

    def heartbeat(self, broker_id: int, broker_epoch: int, now_ms: int,
                  want_shut_down: bool = False,
                  offline_dirs: Sequence[uuid.UUID] = ()) -> HeartbeatResult:
        broker = self._current_generation(broker_id, broker_epoch, "BrokerHeartbeat")
        if broker is None:
            return HeartbeatResult(error=E.STALE_BROKER_EPOCH)
        broker.session_deadline_ms = now_ms + self.config.broker_session_timeout_ms
        if self._connection_lost.pop(broker_id, None) is not None:
            log.info("broker %d generation %d heartbeats again after its connection closed",
                     broker_id, broker_epoch)
        self._offline_replicas(broker, offline_dirs)
        if want_shut_down:
            remaining = self._shut_down(broker)
            return HeartbeatResult(is_fenced=True, should_shut_down=not remaining)
        return HeartbeatResult(is_fenced=not broker.eligible)

    def _offline_replicas(self, broker: Broker, offline_dirs: Sequence[uuid.UUID]) -> None:
        """Kafka's log-dir failure handling, per partition: a replica the broker lists offline
        leaves the ISR, and if it led, another in-sync replica is elected (none: the partition
        is offline with its ISR kept). One that comes back is a follower again; a partition left
        without a leader may elect it (it is still the last in-sync replica)."""
        bid = broker.broker_id
        if not offline_dirs and not broker.offline_replicas:
            return
        wanted = set(offline_dirs)
        offline_now = frozenset((topic.name, index) for topic, index, _ in self._partitions_of(bid)
                              if replica_dir_id(topic.name, index) in wanted)
        before, broker.offline_replicas = broker.offline_replicas, offline_now
        self._out.metadata.update(offline_now ^ before)  # Metadata lists offline replicas
        for name, index in sorted(offline_now - before):
            topic = self.topics[name]
            p = topic.partitions[index]
            self.counters["replicas_offline"] += 1
            log.warning("%s-%d: the replica on broker %d is offline (a storage error there)",
                        name, index, bid)
            if p.leader == bid:
                self._elect(topic, index, p, f"the leader's replica on {bid} is offline",
                            not_eligible=(bid,))
            elif (bid in p.isr and len(p.isr) > 1) or bid in p.elr:
                self._change(topic, index, p.leader, _without(p.isr, bid),
                             f"the replica on {bid} is offline", not_eligible=(bid,))
        for name, index in sorted(before - offline_now):
            back = self.topics.get(name)
            if back is None or index not in back.partitions:
                continue
            p = back.partitions[index]
            log.info("%s-%d: the replica on broker %d is online again", name, index, bid)
            if p.leader == NO_LEADER:
                self._elect(back, index, p, f"the replica on {bid} is online again")

    def expire_sessions(self, now_ms: int) -> list[int]:
        """Fail every live generation whose session deadline has passed; their ids."""
        expired = [b for b in self.brokers.values()
                   if b.live and b.session_deadline_ms <= now_ms]
        for broker in sorted(expired, key=lambda b: b.broker_id):
            if self._connection_lost.pop(broker.broker_id, None) == broker.broker_epoch:
                # after a controlled shutdown the broker is expected to go: not a warning
                log.log(logging.INFO if broker.state == SHUTTING_DOWN else logging.WARNING,
                        "broker %d generation %d: connection lost, no heartbeat on a new "
                        "connection within %d ms", broker.broker_id, broker.broker_epoch,
                        self.config.broker_connection_loss_grace_ms)
                self.counters["connection_loss_failures"] += 1
                self._fail_generation(broker, "connection lost")
                continue
            log.warning("broker %d generation %d: session expired (%d ms without heartbeat)",
                        broker.broker_id, broker.broker_epoch,
                        self.config.broker_session_timeout_ms)
            self.counters["sessions_expired"] += 1
            self._fail_generation(broker, "session expired")
        return [b.broker_id for b in expired]

    def connection_lost(self, broker_id: int, broker_epoch: int, now_ms: int) -> bool:
        """The connection generation broker_epoch of broker_id heartbeats on closed: unless it
        heartbeats again within broker_connection_loss_grace_ms, expire_sessions fails it. True
        when that shortened its session (a live generation, whose deadline was later)."""
        broker = self.brokers.get(broker_id)
        if broker is None or not broker.live or broker.broker_epoch != broker_epoch:
            return False
        deadline_ms = now_ms + self.config.broker_connection_loss_grace_ms
        if deadline_ms >= broker.session_deadline_ms:
            return False
        broker.session_deadline_ms = deadline_ms
        self._connection_lost[broker_id] = broker_epoch
        self.counters["connection_losses"] += 1
        log.info("broker %d generation %d: its heartbeat connection closed; failed in %d ms "
                 "unless it heartbeats again", broker_id, broker_epoch,
                 self.config.broker_connection_loss_grace_ms)
        return True

    def next_session_deadline_ms(self) -> int | None:
        """The earliest session deadline of a live generation (None: no live generation), so
        that a timer can run expire_sessions when it is due."""
        return min((b.session_deadline_ms for b in self.brokers.values() if b.live),
                   default=None)

    def controlled_shutdown(self, broker_id: int, broker_epoch: int, now_ms: int
                            ) -> tuple[int, list[tuple[str, int]]]:
        """(error, partitions the broker still leads). Moves leadership off it first."""
        if broker_id not in self.brokers:
            return E.BROKER_NOT_AVAILABLE, []
        broker = self._current_generation(broker_id, broker_epoch, "ControlledShutdown")
        if broker is None:
            return E.STALE_BROKER_EPOCH, []
        broker.session_deadline_ms = now_ms + self.config.broker_session_timeout_ms
        self._connection_lost.pop(broker_id, None)  # alive after all: a full session
        return 0, self._shut_down(broker)

    def check_generation(self, broker_id: int, broker_epoch: int, what: str) -> int:
        """0 when broker_epoch is the broker's live generation, else STALE_BROKER_EPOCH."""
        ok = self._current_generation(broker_id, broker_epoch, what) is not None
        return 0 if ok else E.STALE_BROKER_EPOCH

    def _current_generation(self, broker_id: int, broker_epoch: int, what: str
                            ) -> Broker | None:
        broker = self.brokers.get(broker_id)
        if broker is not None and broker.live and broker.broker_epoch == broker_epoch:
            return broker
        current = f"generation {broker.broker_epoch} ({broker.state})" if broker else "none"
        log.warning("fenced %s from broker %d generation %d: its current one is %s",
                    what, broker_id, broker_epoch, current)
        self.counters["stale_broker_epoch_refused"] += 1
        return None

    def _fail_generation(self, broker: Broker, reason: str) -> None:
        """KIP-380 onBrokerFailure: the generation is over; move what it led, leave ISRs."""
        bid = broker.broker_id
        # A generation that ended as planned (a controlled shutdown, a restart) takes its
        # partitions offline as expected: that is not a warning for a person to act on.
        planned = broker.state == SHUTTING_DOWN or reason == "bounced"
        self._emit(BrokerStateChanged(bid, broker.broker_epoch, DEAD))
        log.info("broker %d generation %d is dead: %s", bid, broker.broker_epoch, reason)
        self._out.brokers_changed = True
        for topic, index, p in self._partitions_of(bid):
            self._out.metadata.add((topic.name, index))  # its replicas are offline now
            if p.leader == bid:
                self._elect(topic, index, p, f"leader {bid} {reason}", planned=planned)
            elif bid in p.isr and len(p.isr) > 1:
                self._change(topic, index, p.leader, _without(p.isr, bid),
                             f"replica {bid} {reason}")

    def _start_generation(self, broker_id: int) -> None:
        """KIP-380 onBrokerStartUp: whole state to it; offline partitions may elect it; a
        partition it still leads gets a new leader epoch (KIP-101 returning leader)."""
        self._out.full.add(broker_id)
        self._out.brokers_changed = True
        for topic, index, p in self._partitions_of(broker_id):
            self._out.metadata.add((topic.name, index))  # its replicas are online again
            if p.leader == NO_LEADER:
                self._elect(topic, index, p, f"broker {broker_id} returned")
            elif p.leader == broker_id:
                self._change(topic, index, broker_id, p.isr,
                             f"returning leader {broker_id}", bump_leader_epoch=True)

    def _shut_down(self, broker: Broker) -> list[tuple[str, int]]:
        """Controlled shutdown: lead nothing, leave ISRs where another member remains. Returns
        the partitions it still leads that another replica may yet take: one alive but not in
        the ISR may catch up. Where no other replica is alive (every broker stopping at once),
        retrying cannot help, so such partitions are not reported and the broker stops at once."""
        bid = broker.broker_id
        if broker.state == ALIVE:
            self._emit(BrokerStateChanged(bid, broker.broker_epoch, SHUTTING_DOWN))
            log.info("broker %d generation %d is shutting down", bid, broker.broker_epoch)
            self._out.brokers_changed = True
        remaining = []
        for topic, index, p in self._partitions_of(bid):
            if len(p.replicas) == 1:
                continue  # nowhere to move it; Kafka leaves such partitions out too
            if p.leader == bid:
                choice = elections.at_shutdown(p, self._can_lead(topic.name, index), self._live,
                                               bid)
                if choice.leader == NO_LEADER:
                    if any(self._alive(r) for r in p.replicas if r != bid):
                        remaining.append((topic.name, index))
                    continue
                self.counters["elections_clean"] += 1
                self._change(topic, index, choice.leader, choice.isr,
                             f"controlled shutdown of {bid}")
            elif bid in p.isr and len(p.isr) > 1:
                self._change(topic, index, p.leader, _without(p.isr, bid),
                             f"controlled shutdown of {bid}")
                self._out.stop.setdefault(bid, []).append(
                    (topic.name, index, topic.partitions[index].leader_epoch, False))
        return remaining

    def _alive(self, broker_id: int) -> bool:
        b = self.brokers.get(broker_id)
        return b is not None and b.eligible

    # ------------------------------------------------------------------------------ elections
    def _can_lead(self, name: str, index: int) -> elections.Eligible:
        """Whether a replica of partition name-index may lead now (elections.py)."""
        return lambda r: self._eligible(r, (name, index))

    def _elect(self, topic: Topic, index: int, p: Partition, reason: str, *,
               planned: bool = False, not_eligible: tuple[int, ...] = ()) -> None:
        """Leader election after the leader failed (or for an offline partition), chosen by
        elections.after_leader_loss: from the ISR, else from the eligible leader replicas
        (KIP-966), else, if the topic allows it, unclean (through unclean recovery when it is
        on). not_eligible: replicas that leave the ISR without joining the ELR (their log lost
        records)."""
        unclean_ok = topic.policy.unclean_leader_election
        choice = elections.after_leader_loss(p, self._can_lead(topic.name, index), self._live,
                                             unclean=unclean_ok)
        new, source = choice.leader, choice.source
        if new == NO_LEADER:
            if p.leader == NO_LEADER and not not_eligible:
                return  # still offline: nothing changes
            # Keep the ISR as it was: its last member, returning, can lead with nothing lost.
            log.log(logging.INFO if planned else logging.WARNING,
                    "%s-%d is OFFLINE: no live in-sync or eligible replica (%s)", topic.name,
                    index, reason)
            self.counters["partitions_offline"] += 1
            self._change(topic, index, NO_LEADER, choice.isr, reason, not_eligible=not_eligible)
            return
        if source == elections.UNCLEAN and self.recoveries is not None:
            self._recover(topic, index, p, reason, not_eligible)
            return
        if source == elections.UNCLEAN:
            log.warning("UNCLEAN leader election for %s-%d: broker %d is not in the ISR %s; "
                        "records acknowledged by the old ISR may be lost", topic.name, index,
                        new, list(p.isr))
            self._lead_uncleanly(topic, index, new, f"UNCLEAN election: {reason}")
            return
        if source in elections.OUTSIDE_ISR:
            counter, where, why = elections.OUTSIDE_ISR[source]
            log.warning("%s-%d: %s; broker %d leads from the %s %s", topic.name, index, why, new,
                        where, list(p.elr if source == elections.FROM_ELR else p.last_known_elr))
            self.counters[counter] += 1
            self._change(topic, index, new, choice.isr, f"election from the {where}: {reason}",
                         not_eligible=not_eligible)
            return
        self.counters["elections_clean"] += 1
        self._change(topic, index, new, choice.isr, reason, not_eligible=not_eligible)

    # ------------------------------------------------------------------ unclean recovery
    def _recover(self, topic: Topic, index: int, p: Partition, reason: str,
                 not_eligible: tuple[int, ...]) -> None:
        """An unclean election is due: ask the live replicas for their log ends first
        (unclean_recovery.py); the partition has no leader until they answered."""
        assert self.recoveries is not None
        key = (topic.name, index)
        self.recoveries.start(key, p.replicas)
        live = {r: self.brokers[r].broker_epoch for r in p.replicas if self._eligible(r, key)}
        asking = self.recoveries.to_ask(key, live)
        for r in asking:
            self._out.log_end_queries.setdefault(r, []).append(key)
        if p.leader != NO_LEADER or not_eligible:
            log.warning("%s-%d is OFFLINE: no live in-sync or eligible replica (%s); unclean "
                        "recovery asks replicas %s for their log ends", topic.name, index,
                        reason, sorted(live))
            self.counters["partitions_offline"] += 1
            self._change(topic, index, NO_LEADER, p.isr, reason, not_eligible=not_eligible)
        elif asking:
            log.info("%s-%d: unclean recovery asks broker(s) %s for their log ends (%s)",
                     topic.name, index, asking, reason)

    def log_ends_answered(self, broker_id: int, broker_epoch: int, topics: Sequence[Any]
                          ) -> None:
        """A broker's answer to the controller's log-end query (OffsetForLeaderEpoch with
        replica_id LOG_END_QUERY): each partition's (last leader epoch, log end offset), or
        an error (no log to offer). A recovery every replica answered elects at once."""
        if self.recoveries is None:
            return
        for topic in topics:
            for part in topic.partitions:
                key = (topic.topic, part.partition)
                # no log at all holds nothing (-1, 0); a log the broker cannot read (offline) is
                # no candidate (None)
                end = (part.leader_epoch, part.end_offset) if not part.error_code else \
                    (-1, 0) if part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION else None
                recovery = self.recoveries.answer(key, broker_id, broker_epoch, end)
                if recovery is not None and recovery.complete():
                    self._finish_recovery(key)

    def recovery_tick(self, now_ms: int) -> None:
        """Timer: recoveries whose timeout passed elect from the answers they have."""
        if self.recoveries is not None:
            for key in self.recoveries.tick(now_ms):
                self._finish_recovery(key)

    def _finish_recovery(self, key: tuple[str, int]) -> None:
        assert self.recoveries is not None
        topic = self.topics.get(key[0])
        p = topic.partitions.get(key[1]) if topic else None
        if topic is None or p is None or p.leader != NO_LEADER or \
                not topic.policy.unclean_leader_election:
            self.recoveries.end(key)  # gone, led again, or no longer allowed to go unclean
            return
        recovery = self.recoveries.pending[key]
        live = {r for r in p.replicas if self._eligible(r, key)
                and recovery.asked.get(r) == self.brokers[r].broker_epoch}
        best = recovery.best(live)
        if best is None:
            return  # no live replica offered a log it can read: wait for one that does
        new = best[0]
        log.warning("UNCLEAN leader election for %s-%d: broker %d holds the most of the "
                    "replicas that answered unclean recovery (%s); records acknowledged by the "
                    "old ISR %s past its log end may be lost", key[0], key[1], new,
                    recovery.describe(), list(p.isr))
        self.counters["unclean_recoveries"] += 1
        self._lead_uncleanly(topic, key[1], new, "UNCLEAN election by unclean recovery")

    def _lead_uncleanly(self, topic: Topic, index: int, new: int, reason: str) -> None:
        """`new` leads alone from outside the ISR (the caller said why, loudly): ELR and last
        known ELR are emptied, and with a leader any unclean recovery of it ends (_change)."""
        self.counters["elections_unclean"] += 1
        self._change(topic, index, new, (new,), reason, elr=(), last_known_elr=())

    def _min_isr(self, topic: Topic, p: Partition) -> int:
        """The topic's min.insync.replicas, at most its replication factor (Kafka's effective
        rule, which the brokers' Partition.under_min_isr applies too)."""
        return max(1, min(topic.policy.min_insync_replicas, len(p.replicas)))

    def _next_elr(self, topic: Topic, p: Partition, isr: tuple[int, ...]) -> tuple[int, ...]:
        """KIP-966: while the ISR is below min.insync.replicas, the leaders' high watermark
        stands still, so members that leave it then still hold everything committed: they join
        the eligible leader replicas. An ISR back at min.insync.replicas empties it."""
        if len(isr) >= self._min_isr(topic, p):
            return ()
        kept = [r for r in p.elr if r not in isr]
        return tuple(kept + [r for r in p.isr if r not in isr and r not in kept])

    def elect_leader(self, topic_name: str, index: int, election_type: int
                     ) -> tuple[int, str | None]:
        """ElectLeaders for one partition: (error, message)."""
        topic = self.topics.get(topic_name)
        p = topic.partitions.get(index) if topic else None
        if topic is None or p is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION, "no such topic or partition"
        if election_type == elections.ELECTION_PREFERRED:
            return self._elect_preferred(topic, index, p, "preferred leader election (admin)")
        if election_type == elections.ELECTION_UNCLEAN:
            if p.leader != NO_LEADER and self._eligible(p.leader, (topic.name, index)):
                return E.ELECTION_NOT_NEEDED, "the partition has a live leader"
            choice = elections.unclean_by_admin(p, self._can_lead(topic.name, index), self._live)
            if choice.leader == NO_LEADER:
                return E.ELIGIBLE_LEADERS_NOT_AVAILABLE, "no replica is alive"
            if choice.source == elections.UNCLEAN:
                log.warning("UNCLEAN leader election for %s-%d requested by an admin: broker %d",
                            topic.name, index, choice.leader)
                self._lead_uncleanly(topic, index, choice.leader, "admin election")
            else:
                self.counters["elections_clean"] += 1
                self._change(topic, index, choice.leader, choice.isr, "admin election")
            return 0, None
        return E.INVALID_REQUEST, f"unknown election type {election_type}"

    def _elect_preferred(self, topic: Topic, index: int, p: Partition, reason: str
                         ) -> tuple[int, str | None]:
        """Hand leadership to the first replica of the assignment, if it is alive and in the
        ISR (elections.preferred_refusal); the ISR stays as it is."""
        error, message = elections.preferred_refusal(p, self._can_lead(topic.name, index))
        if error:
            return error, message
        self.counters["elections_preferred"] += 1
        self._change(topic, index, p.replicas[0], p.isr, reason)
        return 0, None

    def rebalance_leaders(self, now_ms: int) -> list[tuple[str, int]]:
        """Kafka's auto leader rebalance (rebalance.py), at most once per check interval (the
        first check one interval after the first call). The partitions whose leadership moved
        back to their preferred replica."""
        if not self.config.auto_leader_rebalance_enable:
            return []
        interval_ms = self.config.leader_imbalance_check_interval_seconds * 1000
        if self._next_rebalance_ms is None:
            self._next_rebalance_ms = now_ms + interval_ms
        if now_ms < self._next_rebalance_ms:
            return []
        self._next_rebalance_ms = now_ms + interval_ms
        percentage = self.config.leader_imbalance_per_broker_percentage
        over = rebalance.over_threshold(self.topics, percentage)
        moved = []
        for name, index in rebalance.candidates(self.topics, set(over)):
            topic = self.topics[name]
            p = topic.partitions[index]
            total, not_led = over[p.replicas[0]]
            error, _ = self._elect_preferred(
                topic, index, p, f"leader rebalance: broker {p.replicas[0]} leads "
                f"{total - not_led} of the {total} partitions it is preferred for, imbalance "
                f"above {percentage}%")
            if error == 0:
                moved.append((name, index))
        if moved:
            self.counters["rebalance_elections"] += len(moved)
            log.info("leader rebalance moved %d partitions back to their preferred replica",
                     len(moved))
        return moved

    # -------------------------------------------------------------------------- AlterPartition
    def alter_partition(self, broker_id: int, topic_name: str, index: int, leader_epoch: int,
                        partition_epoch: int, new_isr: Sequence[int],
                        isr_epochs: Sequence[int] | None = None
                        ) -> tuple[int, Partition | None]:
        """One partition of an AlterPartition whose broker epoch was already checked
        (check_generation). (error, the partition's state after the request)."""
        topic = self.topics.get(topic_name)
        p = topic.partitions.get(index) if topic else None
        if topic is None or p is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION, None
        error = self._alter_error(broker_id, (topic_name, index), p, leader_epoch,
                                  partition_epoch, new_isr, isr_epochs)
        if error:
            # Expected races, said and not warned about: INELIGIBLE_REPLICA with a member
            # shutting down or restarting; FENCED_LEADER_EPOCH and INVALID_UPDATE_VERSION with a
            # change of ours the leader has not heard of yet (brokers registering one after
            # another in a whole-cluster restart move the epochs while leaders propose ISRs).
            expected = error in (E.INELIGIBLE_REPLICA, E.FENCED_LEADER_EPOCH,
                                 E.INVALID_UPDATE_VERSION)
            log.log(logging.INFO if expected else logging.WARNING,
                    "AlterPartition %s-%d from broker %d refused: %s (leader epoch %d/%d, "
                    "partition epoch %d/%d, isr %s)", topic_name, index, broker_id,
                    E(error).name, leader_epoch, p.leader_epoch, partition_epoch,
                    p.partition_epoch, list(new_isr))
            return error, p
        if tuple(new_isr) != p.isr:
            self._change(topic, index, p.leader, tuple(new_isr),
                         f"AlterPartition from leader {broker_id}", from_leader=True)
        return 0, topic.partitions[index]

    def _alter_error(self, broker_id: int, where: tuple[str, int], p: Partition, leader_epoch: int,
                     partition_epoch: int, new_isr: Sequence[int],
                     isr_epochs: Sequence[int] | None) -> int:
        if leader_epoch != p.leader_epoch:
            return E.FENCED_LEADER_EPOCH
        if broker_id != p.leader:
            return E.INVALID_REQUEST
        if partition_epoch != p.partition_epoch:
            return E.INVALID_UPDATE_VERSION
        if (not new_isr or broker_id not in new_isr or len(set(new_isr)) != len(new_isr)
                or any(r not in p.replicas for r in new_isr)):
            return E.INVALID_REQUEST
        for i, r in enumerate(new_isr):
            if r == broker_id:
                continue
            b = self.brokers.get(r)
            if b is None or not self._eligible(r, where):
                return E.INELIGIBLE_REPLICA
            if isr_epochs is not None and isr_epochs[i] not in (-1, b.broker_epoch):
                return E.INELIGIBLE_REPLICA  # v3: a member seen in an older generation
        return 0

    # -------------------------------------------------------------------------------- topics
    def decided_settings(self, name: str) -> dict[str, str]:
        """The settings the controller decides for topic `name`, which its control requests
        carry to brokers (topic_settings.decided; outbox.py)."""
        return topic_settings.decided(self.topics[name].configs, self.topic_defaults,
                                      self.dynamic_defaults)

    def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                     assignments: Mapping[int, Sequence[int]] | None,
                     configs: Mapping[str, str | None], validate_only: bool = False
                     ) -> CreateTopicResult:
        error, message = topic_checks.check_name(name)
        if error:
            return CreateTopicResult(error, message)
        if name in self.topics:
            return CreateTopicResult(E.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists")
        bad, overrides = topic_settings.check(configs)
        if bad is not None:
            return CreateTopicResult(E.INVALID_CONFIG, bad)
        if assignments:
            if num_partitions != -1 or replication_factor != -1:
                return CreateTopicResult(E.INVALID_REQUEST, "give either an assignment or "
                                         "partitions and replication factor, not both")
            error, message, replica_lists = topic_checks.check_assignment(assignments,
                                                                             self.brokers)
        else:
            error, message, replica_lists = self._auto_assignment(num_partitions,
                                                                  replication_factor)
        if not error:
            error, message = self._check_capacity(replica_lists)
        if error:
            return CreateTopicResult(error, message)
        too_many = topic_checks.min_insync_above(overrides, len(replica_lists[0]))
        if too_many:
            return CreateTopicResult(E.INVALID_CONFIG, too_many)
        result = CreateTopicResult(0, None, uuid.UUID(int=self.rng.getrandbits(128), version=4),
                                   len(replica_lists), len(replica_lists[0]), overrides)
        if validate_only:
            return result
        self._emit(TopicCreated(name, result.topic_id, overrides))
        topic = self.topics[name]
        for index, replicas in enumerate(replica_lists):
            self._add_partition(topic, index, replicas)
        log.info("topic %s created: id %s, %d partitions, replication factor %d, settings %s",
                 name, result.topic_id, result.num_partitions, result.replication_factor,
                 overrides)
        return result

    def alter_topic_configs(self, name: str, configs: Mapping[str, str | None],
                            validate_only: bool = False) -> tuple[int, str | None]:
        """Replace a topic's own settings with configs (a null value: back to the default);
        (0, None) or (error, why). The change goes to the brokers in UpdateMetadata."""
        topic = self.topics.get(name)
        if topic is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"
        bad, overrides = topic_settings.check(configs)
        if bad is not None:
            return E.INVALID_CONFIG, bad
        replication_factor = max((len(p.replicas) for p in topic.partitions.values()),
                                 default=0)
        too_many = topic_checks.min_insync_above(overrides, replication_factor)
        if too_many:
            return E.INVALID_CONFIG, too_many
        if validate_only or overrides == topic.configs:
            return 0, None
        before = {name: self.decided_settings(name)}
        self._emit(TopicConfigsChanged(name, overrides))
        self._settings_changed(before)
        log.info("topic %s: settings changed to %s", name, overrides or "the defaults")
        return 0, None

    def alter_cluster_defaults(self, configs: Mapping[str, str | None],
                               validate_only: bool = False) -> tuple[int, str | None]:
        """Replace the dynamic cluster-wide defaults (by topic setting name; a null value: none)
        with configs; (0, None) or (error, why). Topics without their own value follow them: the
        brokers learn their new settings in UpdateMetadata."""
        bad, defaults = topic_settings.check(configs)
        if bad is not None:
            return E.INVALID_CONFIG, bad
        if validate_only or defaults == self.dynamic_defaults:
            return 0, None
        before = {name: self.decided_settings(name) for name in self.topics}
        self._emit(ClusterDefaultsChanged(defaults))
        self._settings_changed(before)
        log.info("dynamic cluster defaults changed to %s", defaults or "none")
        return 0, None

    def _settings_changed(self, before: Mapping[str, Mapping[str, str]]) -> None:
        """The topics of `before` whose decided settings now differ go to the brokers."""
        self._out.settings.update(name for name, was in before.items()
                                  if self.decided_settings(name) != was)

    def _add_partition(self, topic: Topic, index: int, replicas: Sequence[int]) -> None:
        live = tuple(r for r in replicas if self._eligible(r))
        leader = live[0] if live else NO_LEADER
        record = PartitionChanged(topic.name, index, tuple(replicas), leader, 0,
                                  live or tuple(replicas), 0)
        self._emit(record)
        self._out.leader_and_isr[(topic.name, index)] = True
        self._out.metadata.add((topic.name, index))

    def _auto_assignment(self, num_partitions: int, replication_factor: int
                         ) -> tuple[int, str | None, list[tuple[int, ...]]]:
        """topic_checks.auto_assignment with the cluster's defaults for -1 (Kafka's
        num.partitions and default.replication.factor; unset, min(3, eligible brokers))."""
        eligible = [(b.broker_id, b.rack) for b in self.brokers.values() if b.eligible]
        if num_partitions == -1:
            num_partitions = self.config.default_num_partitions
        if replication_factor == -1:
            replication_factor = self.config.default_replication_factor
            if replication_factor == -1:
                replication_factor = min(3, len(eligible))
        return topic_checks.auto_assignment(eligible, num_partitions, replication_factor,
                                            self.rng)

    def _check_capacity(self, replica_lists: Sequence[Sequence[int]]) -> tuple[int, str | None]:
        """topic_checks.check_capacity with the replicas each broker hosts now."""
        hosted: dict[int, int] = {}
        for topic in self.topics.values():
            for p in topic.partitions.values():
                for replica in p.replicas:
                    hosted[replica] = hosted.get(replica, 0) + 1
        capacity = {b.broker_id: b.replica_capacity for b in self.brokers.values()}
        return topic_checks.check_capacity(replica_lists, hosted, capacity)

    def create_partitions(self, topic_name: str, count: int,
                          assignments: Sequence[Sequence[int]] | None,
                          validate_only: bool = False) -> tuple[int, str | None]:
        topic = self.topics.get(topic_name)
        if topic is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {topic_name!r}"
        current = len(topic.partitions)
        if count <= current or count > topic_checks.TOPIC_PARTITIONS_MAX:
            return E.INVALID_PARTITIONS, (f"topic {topic_name} has {current} partitions; ask for "
                                          f"more (at most {topic_checks.TOPIC_PARTITIONS_MAX})")
        rf = len(topic.partitions[0].replicas)
        if assignments:
            if len(assignments) != count - current:
                return E.INVALID_REPLICA_ASSIGNMENT, f"{count - current} assignments expected"
            error, message, lists = topic_checks.check_assignment(
                dict(enumerate(assignments)), self.brokers)
            if not error and len(lists[0]) != rf:
                error, message = E.INVALID_REPLICA_ASSIGNMENT, f"replication factor is {rf}"
        else:
            error, message, lists = self._auto_assignment(count - current, rf)
        if not error:
            error, message = self._check_capacity(lists)
        if error or validate_only:
            return error, message
        for offset, replicas in enumerate(lists):
            self._add_partition(topic, current + offset, replicas)
        log.info("topic %s: partitions %d -> %d", topic_name, current, count)
        return 0, None

    def delete_topic(self, topic_name: str) -> int:
        topic = self.topics.get(topic_name)
        if topic is None:
            return E.UNKNOWN_TOPIC_OR_PARTITION
        parts = sorted(topic.partitions.items())
        self._emit(TopicDeleted(topic_name))
        self._out.settings.discard(topic_name)
        for index, p in parts:
            self._out.deleted[(topic_name, index)] = p.replicas
            self._out.leader_and_isr.pop((topic_name, index), None)
            self._out.metadata.discard((topic_name, index))
            for r in p.replicas:
                if self._live(r):
                    self._out.stop.setdefault(r, []).append(
                        (topic_name, index, p.leader_epoch, True))
        self.tombstones[topic_name] = tuple((i, p.replicas) for i, p in parts)
        while len(self.tombstones) > TOMBSTONES_MAX:
            del self.tombstones[next(iter(self.tombstones))]
        log.info("topic %s deleted (id %s, %d partitions)", topic_name, topic.topic_id,
                 len(parts))
        return 0

    def topic_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return next((t for t in self.topics.values() if t.topic_id == topic_id), None)

    # ------------------------------------------------------------------------------- helpers
    def _live(self, broker_id: int) -> bool:
        b = self.brokers.get(broker_id)
        return b is not None and b.live

    def _eligible(self, broker_id: int, replica: tuple[str, int] | None = None) -> bool:
        """The broker may lead and be in ISRs; with replica (topic, index), also its replica of
        that partition is not offline."""
        b = self.brokers.get(broker_id)
        return b is not None and b.eligible and replica not in b.offline_replicas

    def _partitions_of(self, broker_id: int) -> Iterator[tuple[Topic, int, Partition]]:
        for _, topic in sorted(self.topics.items()):
            for index, p in sorted(topic.partitions.items()):
                if broker_id in p.replicas:
                    yield topic, index, p

    def _change(self, topic: Topic, index: int, leader: int, isr: tuple[int, ...], reason: str,
                *, bump_leader_epoch: bool = False, from_leader: bool = False,
                elr: tuple[int, ...] | None = None, not_eligible: tuple[int, ...] = (),
                last_known_elr: tuple[int, ...] | None = None) -> None:
        """Emit a partition's new leader/ISR. A leader change (or a returning leader) bumps the
        leader epoch; every change bumps the partition epoch. The ELR follows the ISR
        (`_next_elr`) unless given; not_eligible replicas never stay in it."""
        p = topic.partitions[index]
        if leader != NO_LEADER and self.recoveries is not None:
            self.recoveries.end((topic.name, index))
        new_epoch = p.leader_epoch + (1 if bump_leader_epoch or leader != p.leader else 0)
        if elr is None:
            elr = self._next_elr(topic, p, isr)
        elr = tuple(r for r in elr if r not in not_eligible)
        if last_known_elr is None:  # emptied with the ELR at min.insync.replicas
            last_known_elr = () if len(isr) >= self._min_isr(topic, p) else tuple(
                r for r in p.last_known_elr if r not in isr and r not in elr)
        self._emit(PartitionChanged(topic.name, index, p.replicas, leader, new_epoch, isr,
                                    p.partition_epoch + 1, elr, last_known_elr))
        log.info("%s-%d: leader %d -> %d (epoch %d -> %d), isr %s -> %s%s, partition epoch %d: "
                 "%s", topic.name, index, p.leader, leader, p.leader_epoch, new_epoch,
                 list(p.isr), list(isr), f", elr {list(p.elr)} -> {list(elr)}"
                 if elr or p.elr else "", p.partition_epoch + 1, reason)
        self._out.metadata.add((topic.name, index))
        if not from_leader:
            # The leader learns an ISR change it asked for from the answer; anything else the
            # controller decided goes to the replicas as LeaderAndIsr.
            self._out.leader_and_isr.setdefault((topic.name, index), False)

    # -------------------------------------------------------------------------- sends
    def full_state_sends(self, broker_id: int) -> list[Send]:
        """The whole state for one live generation (outbox.full_state_sends)."""
        return outbox.full_state_sends(self, broker_id)


def _without(isr: tuple[int, ...], broker_id: int) -> tuple[int, ...]:
    return tuple(r for r in isr if r != broker_id)
