"""The metadata log's record types: one per state change, a tagged msgspec union.

The controller's durable state is exactly the fold of these records (`ControllerState.apply`).
A record carries the full new value of what it changes (a partition record holds the whole
partition state, not a delta), so applying one never needs to know how it was decided, and a
replay gives exactly the state that was acknowledged. Records are encoded as msgpack, with the
type under the key "type". Never reuse or rename a tag: old logs must keep reading.
"""

from __future__ import annotations

import uuid

import msgspec


class Listener(msgspec.Struct, frozen=True, gc=False):
    name: str
    host: str
    port: int
    security_protocol: int = 0


class ControllerStarted(msgspec.Struct, tag="controller_started", frozen=True, gc=False):
    """A controller process started; its epoch is one above the last one in the log."""
    controller_epoch: int


class BrokerRegistered(msgspec.Struct, tag="broker_registered", frozen=True, gc=False):
    """A broker's new generation. broker_epoch is above every epoch given before it."""
    broker_id: int
    broker_epoch: int
    incarnation_id: uuid.UUID
    rack: str | None
    listeners: tuple[Listener, ...]
    # Replicas the broker can host within its open-files limit, as it registered (issue 33;
    # -1: no bound, and what logs written before it read as).
    replica_capacity: int = -1


class BrokerStateChanged(msgspec.Struct, tag="broker_state", frozen=True, gc=False):
    """A generation's state: "alive", "shutting_down" or "dead" (a dead generation is over)."""
    broker_id: int
    broker_epoch: int
    state: str


class TopicCreated(msgspec.Struct, tag="topic_created", frozen=True, gc=False):
    name: str
    topic_id: uuid.UUID
    configs: dict[str, str]  # the topic's own settings; the rest follow the cluster defaults


class PartitionChanged(msgspec.Struct, tag="partition", frozen=True, gc=False):
    """A partition's whole new state (also used when the partition is created)."""
    topic: str
    partition: int
    replicas: tuple[int, ...]
    leader: int  # -1: offline
    leader_epoch: int
    isr: tuple[int, ...]
    partition_epoch: int
    # KIP-966's eligible leader replicas: out of the ISR, yet known to hold everything up to
    # the high watermark (absent in logs written before they existed: none).
    elr: tuple[int, ...] = ()
    # KIP-966's last known ELR: members of ISR or ELR that left them by an unclean restart, the
    # last resort once both are empty (state.py).
    last_known_elr: tuple[int, ...] = ()


class TopicDeleted(msgspec.Struct, tag="topic_deleted", frozen=True, gc=False):
    name: str


class TopicConfigsChanged(msgspec.Struct, tag="topic_configs", frozen=True, gc=False):
    """A topic's whole new set of own settings (AlterConfigs, IncrementalAlterConfigs)."""
    name: str
    configs: dict[str, str]


class ClusterDefaultsChanged(msgspec.Struct, tag="cluster_defaults", frozen=True, gc=False):
    """The whole new set of dynamic cluster-wide defaults of topic settings (Kafka's dynamic
    default broker configs, e.g. log.retention.ms), by the topic setting's name."""
    configs: dict[str, str]


Record = (ControllerStarted | BrokerRegistered | BrokerStateChanged | TopicCreated
          | PartitionChanged | TopicDeleted | TopicConfigsChanged | ClusterDefaultsChanged)

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[Record] = msgspec.msgpack.Decoder(Record)


def encode(record: Record) -> bytes:
    return _encoder.encode(record)


def decode(data: bytes) -> Record:
    return _decoder.decode(data)
