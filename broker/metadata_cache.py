"""`MetadataCache`: the cluster as the controller last described it, for Metadata answers.

Filled only by UpdateMetadata (docs/control-plane.md): `live_brokers` is always the complete list
(replace ours); `topic_states` are upserts; leader -2 marks a deleted partition (forget it; a topic
with no partition left is forgotten). Topic ids come with v7 (`topic_ids`, name -> UUID); a zero
id (v5-6, or a topic being deleted) does not replace a known one. The first UpdateMetadata of a
generation lists everything, so a restarted broker needs nothing else.

Each broker keeps every listener it registered (name, host, port), in registration order.
`BrokerInfo.endpoint(listener)` picks the one of that name, else the first: Metadata answers with
the listener the request arrived on (Kafka's rule), and a follower's fetcher must ask for
INTERNAL (docs/control-plane.md "Listeners").

Readers that wait for a change (Metadata after auto-creating a topic) await `changed()`, bounded
by their own timeout. Mutated only by the UpdateMetadata handler, on the event loop.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass

from epochlog.protocol.apis.update_metadata import UpdateMetadataRequest
from epochlog.protocol.schema import ZERO_UUID

LEADER_DURING_DELETE = -2


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int


@dataclass(frozen=True)
class BrokerInfo:
    broker_id: int
    rack: str | None
    endpoints: tuple[Endpoint, ...]  # never empty; in registration order

    def endpoint(self, listener: str) -> tuple[str, int]:
        """(host, port) of the named listener, else of the first one."""
        chosen = next((e for e in self.endpoints if e.listener == listener), self.endpoints[0])
        return chosen.host, chosen.port


@dataclass(frozen=True)
class PartitionInfo:
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]


class MetadataCache:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerInfo] = {}
        self.topics: dict[str, dict[int, PartitionInfo]] = {}
        self.topic_ids: dict[str, uuid.UUID] = {}  # name -> id, for the topics in `topics`
        self.updates_total = 0
        self._changed = asyncio.Event()

    def apply(self, request: UpdateMetadataRequest) -> None:
        self.brokers = {}
        for b in request.live_brokers:
            if b.endpoints:  # a broker registers at least one; one without is unreachable
                self.brokers[b.id] = BrokerInfo(b.id, b.rack, tuple(
                    Endpoint(e.listener, e.host, e.port) for e in b.endpoints))
        for topic in request.topic_states:
            parts = self.topics.setdefault(topic.topic_name, {})
            if topic.topic_id != ZERO_UUID:
                self.topic_ids[topic.topic_name] = topic.topic_id
            for ps in topic.partition_states:
                if ps.leader == LEADER_DURING_DELETE:
                    parts.pop(ps.partition_index, None)
                    continue
                parts[ps.partition_index] = PartitionInfo(
                    ps.leader, ps.leader_epoch, ps.partition_epoch, tuple(ps.replicas),
                    tuple(ps.isr), tuple(ps.offline_replicas))
            if not parts:
                del self.topics[topic.topic_name]
                self.topic_ids.pop(topic.topic_name, None)
        self.updates_total += 1
        self._changed.set()
        self._changed = asyncio.Event()

    async def changed(self, timeout_ms: int) -> bool:
        """Wait for the next update; False if none came within timeout_ms."""
        try:
            async with asyncio.timeout(timeout_ms / 1000):
                await self._changed.wait()
            return True
        except TimeoutError:
            return False

    def partition(self, topic: str, index: int) -> PartitionInfo | None:
        return self.topics.get(topic, {}).get(index)

    def has_topic(self, topic: str) -> bool:
        return topic in self.topics

    def topic_id(self, topic: str) -> uuid.UUID:
        """The topic's id, or the zero id if we know none."""
        return self.topic_ids.get(topic, ZERO_UUID)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, if we hold it."""
        return next((n for n, i in self.topic_ids.items() if i == topic_id), None)
