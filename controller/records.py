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


class TopicDeleted(msgspec.Struct, tag="topic_deleted", frozen=True, gc=False):
    name: str


Record = (ControllerStarted | BrokerRegistered | BrokerStateChanged | TopicCreated
          | PartitionChanged | TopicDeleted)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)  # type: ignore[arg-type]


def encode(record: Record) -> bytes:
    return _encoder.encode(record)


def decode(data: bytes) -> Record:
    return _decoder.decode(data)
