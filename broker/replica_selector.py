"""Which replica a consumer should read from (KIP-392's ReplicaSelector, broker side).

Theory of operation
-------------------
A leader answering a consumer's Fetch v11+ asks its selector for the preferred read replica. The
selector sees the client (its rack, from Fetch's RackId) and the partition as the leader knows it:
the leader itself, and each follower with its rack, its log end offset as last reported (the
leader's `Partition.followers`), how long since it was last caught up, and whether it is in the
ISR. Only live followers that already hold the consumer's fetch offset are shown (as Kafka does:
a replica without the offset could only answer OFFSET_NOT_AVAILABLE or out of range).

Two selectors, named by the broker setting `replica_selector_class` (Kafka's
`replica.selector.class`; Kafka's class names are accepted as values too):

    leader      always the leader (Kafka's LeaderSelector, the default: nothing changes for
                clients)
    rack-aware  the leader if it is in the client's rack; else the most caught-up in-sync
                replica in that rack (largest log end, then most recently caught up, then
                lowest id, so the choice is deterministic); else the leader (Kafka's
                RackAwareReplicaSelector, restricted to the ISR)

`preferred_read_replica` turns the choice into Fetch's PreferredReadReplica: -1 when the answer
is "read here, from the leader", else the chosen follower's id. Pure functions of their inputs
(the clock is a parameter), so the simulation runs them as they are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

NO_PREFERENCE = -1


@dataclass(frozen=True)
class ReplicaView:
    broker_id: int
    rack: str | None
    log_end_offset: int
    since_caught_up_ms: int  # 0 for the leader
    in_sync: bool


@dataclass(frozen=True)
class ClientView:
    rack_id: str  # "" when the client named none
    client_id: str = ""


class ReplicaSelector(Protocol):
    name: str

    def select(self, client: ClientView, leader: ReplicaView,
               replicas: Sequence[ReplicaView]) -> ReplicaView | None:
        """The replica the client should read from (replicas include the leader)."""


class LeaderSelector:
    name = "leader"

    def select(self, client: ClientView, leader: ReplicaView,
               replicas: Sequence[ReplicaView]) -> ReplicaView | None:
        return leader


class RackAwareSelector:
    name = "rack-aware"

    def select(self, client: ClientView, leader: ReplicaView,
               replicas: Sequence[ReplicaView]) -> ReplicaView | None:
        if not client.rack_id or leader.rack == client.rack_id:
            return leader
        same_rack = [r for r in replicas if r.rack == client.rack_id and r.in_sync]
        if not same_rack:
            return leader
        return max(same_rack, key=lambda r: (r.log_end_offset, -r.since_caught_up_ms,
                                             -r.broker_id))


SELECTORS: dict[str, Callable[[], ReplicaSelector]] = {
    "leader": LeaderSelector,
    "rack-aware": RackAwareSelector,
}
# Kafka's class names, so a setting copied from a Kafka broker's properties works here.
KAFKA_CLASS_NAMES = {
    "org.apache.kafka.common.replica.LeaderSelector": "leader",
    "org.apache.kafka.common.replica.RackAwareReplicaSelector": "rack-aware",
}


def selector_for(name: str) -> ReplicaSelector:
    """The selector a `replica_selector_class` value names; ValueError naming the choices."""
    make = SELECTORS.get(KAFKA_CLASS_NAMES.get(name, name))
    if make is None:
        choices = ", ".join([*SELECTORS, *KAFKA_CLASS_NAMES])
        raise ValueError(f"replica_selector_class: unknown selector {name!r} (one of: {choices})")
    return make()


def preferred_read_replica(selector: ReplicaSelector, partition: Any, my_rack: str | None,
                           racks: Mapping[int, str | None], client: ClientView,
                           fetch_offset: int, now_ms: int) -> int:
    """Fetch's PreferredReadReplica for a consumer reading `partition` (which we lead) at
    fetch_offset: -1 to read here, else a follower's id. `racks` holds the live brokers (the
    metadata cache's) with their racks; a follower not in it is not offered."""
    leader = ReplicaView(partition.broker_id, my_rack or None, partition.log_end_offset, 0, True)
    replicas = [leader]
    isr = set(partition.isr)
    for broker_id, progress in sorted(partition.followers.items()):
        if broker_id not in racks or progress.log_end_offset < max(fetch_offset, 0):
            continue
        since = now_ms - progress.last_caught_up_ms if progress.last_caught_up_ms >= 0 else now_ms
        replicas.append(ReplicaView(broker_id, racks[broker_id] or None, progress.log_end_offset,
                                    max(since, 0), broker_id in isr))
    chosen = selector.select(client, leader, replicas)
    if chosen is None or chosen.broker_id == leader.broker_id:
        return NO_PREFERENCE
    return chosen.broker_id
