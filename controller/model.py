"""The controller's in-memory model: brokers, topics, partitions, and what goes out to brokers.

Plain mutable classes owned by `ControllerState`; nothing else mutates them. Durable fields are
set only by `ControllerState.apply` (from records); `Broker.session_deadline_ms` and
`Broker.offline_replicas` are volatile: sessions do not survive a controller restart (every live
broker gets a new session deadline when a controller starts), and every heartbeat lists the
broker's offline replicas again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from epochlog.protocol.schema import Message

from .records import Listener, Record

ALIVE = "alive"
SHUTTING_DOWN = "shutting_down"  # in controlled shutdown: keeps its session, leads nothing new
DEAD = "dead"  # the generation is over; the broker must register again
BROKER_STATES = (ALIVE, SHUTTING_DOWN, DEAD)

NO_LEADER = -1
LEADER_DURING_DELETE = -2  # in UpdateMetadata: the partition was deleted (Kafka's marker)


@dataclass
class Broker:
    broker_id: int
    broker_epoch: int
    incarnation_id: uuid.UUID
    rack: str | None
    listeners: tuple[Listener, ...]
    state: str = ALIVE
    replica_capacity: int = -1  # replicas it can host (its registration); -1: no bound
    session_deadline_ms: int = 0
    # Volatile: its replicas whose logs are offline (a storage error), as its last heartbeat
    # listed them. They may not lead or be in an ISR until a heartbeat leaves them out.
    offline_replicas: frozenset[tuple[str, int]] = frozenset()

    @property
    def live(self) -> bool:
        """Has a current generation (alive or shutting down): control requests go to it."""
        return self.state != DEAD

    @property
    def eligible(self) -> bool:
        """May lead and may be in an ISR."""
        return self.state == ALIVE

    @property
    def endpoint(self) -> tuple[str, int]:
        """Where the controller reaches this broker: the listener it registered first, which a
        broker makes its control-plane listener (broker/listeners.py: Kafka's
        control.plane.listener.name, by default its inter-broker listener; INTERNAL when set
        with the older internal_listen). Control requests go here, and LeaderAndIsr's
        live_leaders name it (brokers find each other's inter-broker listener themselves)."""
        first = self.listeners[0]
        return first.host, first.port

    def describe_listeners(self) -> str:
        """'EXTERNAL localhost:19092, INTERNAL broker1:9091', for log lines."""
        return ", ".join(f"{lst.name} {lst.host}:{lst.port}" for lst in self.listeners)


@dataclass
class Partition:
    replicas: tuple[int, ...]
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    elr: tuple[int, ...] = ()  # eligible leader replicas (KIP-966; state.py says when)
    last_known_elr: tuple[int, ...] = ()  # ... and those that lost it by an unclean restart


@dataclass(frozen=True)
class TopicPolicy:
    """The topic settings the controller's own decisions use, typed: parsed once from the
    topic's decided settings (topic_settings.policy) whenever they change, never per decision."""
    min_insync_replicas: int = 1  # KIP-966's ELR rule (capped at the replication factor)
    unclean_leader_election: bool = False


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]  # the topic's own settings (overrides), as Kafka names them
    partitions: dict[int, Partition] = field(default_factory=dict)
    policy: TopicPolicy = TopicPolicy()  # derived from configs and the cluster's defaults


@dataclass(frozen=True)
class Send:
    """A control request for one generation of one broker. The sender drops it if that
    generation is no longer the broker's current one."""
    broker_id: int
    broker_epoch: int
    api_key: int
    version: int
    message: Message


@dataclass
class Ready:
    """What one decision produced: records to persist, then requests to send (in that order)."""
    records: list[Record] = field(default_factory=list)
    sends: list[Send] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.records or self.sends)
