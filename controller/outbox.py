"""What the controller's decisions must tell brokers, and the control requests that says it.

Decisions note what changed in an `Outbox` (partitions whose leader or ISR the replicas must
learn, partitions every broker's metadata must show, topics whose settings changed, deletions,
replicas to stop, unclean recovery's log-end queries, brokers to resync whole); `take_ready()`
turns it into `Send`s, one request of each kind per live broker, stamped with the controller's
epoch and that broker's generation (KIP-380), built by outbound.py. A broker to resync gets the
whole state instead of the deltas (`full_state_sends`), which is also what replaces a broker's
overflowing queue.

Topic settings go where LeaderAndIsr goes, as decided when the request is built: every
LeaderAndIsr carries the decided settings of each topic it names (so the full state's carries
every topic the broker hosts), and a change of settings (AlterConfigs, a new cluster default) is
an UpdateMetadata to every live broker. UpdateMetadata because it is the request that tells every
broker what changed in the cluster's metadata, with topic states that may list no partition;
a LeaderAndIsr would restate partitions' leadership, which a settings change leaves as it is,
and reach only replicas, where a new cluster default concerns every broker. Brokers keep the
settings of the topics they hold. Requests reach a broker in decision order, so a later request
never carries older settings than an earlier one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from . import outbound
from .model import Broker, Send, Topic
from .unclean_recovery import LOG_END_QUERY


class ClusterView(Protocol):
    """What the sends are built from (ControllerState's durable state and its tombstones)."""

    @property
    def controller_id(self) -> int: ...
    @property
    def controller_epoch(self) -> int: ...
    @property
    def brokers(self) -> Mapping[int, Broker]: ...
    @property
    def topics(self) -> Mapping[str, Topic]: ...
    @property
    def tombstones(self) -> Mapping[str, tuple[tuple[int, tuple[int, ...]], ...]]: ...
    def decided_settings(self, topic: str) -> Mapping[str, str]: ...


@dataclass
class Outbox:
    """What the decisions since the last take_ready() must tell brokers."""
    full: set[int] = field(default_factory=set)  # broker ids that get the whole state
    leader_and_isr: dict[tuple[str, int], bool] = field(default_factory=dict)  # -> is_new
    metadata: set[tuple[str, int]] = field(default_factory=set)
    settings: set[str] = field(default_factory=set)  # topics whose decided settings changed
    deleted: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)  # -> replicas
    stop: dict[int, list[outbound.StopItem]] = field(default_factory=dict)
    log_end_queries: dict[int, list[tuple[str, int]]] = field(default_factory=dict)  # unclean
    brokers_changed: bool = False

    def sends(self, view: ClusterView) -> list[Send]:
        topics = view.topics
        sends: list[Send] = []
        um_delta: list[outbound.UmItem] = [
            (t, i, topics[t].partitions[i], ()) for t, i in sorted(self.metadata)
            if t in topics]
        um_delta += [(t, i, None, replicas) for (t, i), replicas in sorted(self.deleted.items())]
        decided = _decided(view, {t for t, _ in self.leader_and_isr} | self.settings)
        changed = {t: decided[t] for t in self.settings if t in decided}
        for bid, broker in sorted(view.brokers.items()):
            if not broker.live:
                continue
            if bid in self.full:
                sends += full_state_sends(view, bid)
            else:
                lai = [(t, i, topics[t].partitions[i], is_new)
                       for (t, i), is_new in sorted(self.leader_and_isr.items())
                       if t in topics and bid in topics[t].partitions[i].replicas]
                if lai:
                    sends.append(_lai_send(view, broker, lai, decided))
                if um_delta or changed or self.brokers_changed:
                    sends.append(_um_send(view, broker, um_delta, changed))
            if self.stop.get(bid):
                sends.append(Send(bid, broker.broker_epoch, outbound.STOP_REPLICA_KEY,
                                  outbound.STOP_REPLICA_VERSION,
                                  outbound.stop_replica(view.controller_id, view.controller_epoch,
                                                        broker.broker_epoch, self.stop[bid])))
            if self.log_end_queries.get(bid):  # after the LeaderAndIsr that opens the logs
                sends.append(Send(bid, broker.broker_epoch, outbound.LOG_END_QUERY_KEY,
                                  outbound.LOG_END_QUERY_VERSION,
                                  outbound.log_end_query(LOG_END_QUERY, [
                                      (t, i, topics[t].partitions[i].leader_epoch)
                                      for t, i in self.log_end_queries[bid] if t in topics])))
        return sends


def full_state_sends(view: ClusterView, broker_id: int) -> list[Send]:
    """The whole state for one live generation: UpdateMetadata with every partition (and the
    deletion markers remembered), then LeaderAndIsr with every partition it hosts (sent even
    when empty: it tells the broker which of its local partitions are still its) and the
    settings of their topics: all the settings a broker keeps."""
    broker = view.brokers[broker_id]
    um: list[outbound.UmItem] = []
    lai: list[outbound.LaiItem] = []
    for name, topic in sorted(view.topics.items()):
        for index, p in sorted(topic.partitions.items()):
            um.append((name, index, p, ()))
            if broker_id in p.replicas:
                lai.append((name, index, p, False))
    for name, parts in view.tombstones.items():
        if name not in view.topics:
            um += [(name, index, None, replicas) for index, replicas in parts]
    return [_um_send(view, broker, um),
            _lai_send(view, broker, lai, _decided(view, {t for t, _, _, _ in lai}))]


def _decided(view: ClusterView, topics: set[str]) -> dict[str, Mapping[str, str]]:
    """The decided settings of those of these topics that exist, each worked out once."""
    return {t: view.decided_settings(t) for t in sorted(topics) if t in view.topics}


def _lai_send(view: ClusterView, broker: Broker, items: list[outbound.LaiItem],
              settings: outbound.Settings) -> Send:
    msg = outbound.leader_and_isr(view.controller_id, view.controller_epoch,
                                  broker.broker_epoch, items, view.brokers, settings)
    return Send(broker.broker_id, broker.broker_epoch, outbound.LEADER_AND_ISR_KEY,
                outbound.LEADER_AND_ISR_VERSION, msg)


def _um_send(view: ClusterView, broker: Broker, items: list[outbound.UmItem],
             settings: outbound.Settings | None = None) -> Send:
    ids: dict[str, uuid.UUID] = {name: t.topic_id for name, t in view.topics.items()}
    msg = outbound.update_metadata(view.controller_id, view.controller_epoch,
                                   broker.broker_epoch, items, view.brokers, ids, settings)
    return Send(broker.broker_id, broker.broker_epoch, outbound.UPDATE_METADATA_KEY,
                outbound.UPDATE_METADATA_VERSION, msg)
