"""Metadata (key 3), versions 0-12.

v0 asks for every topic with an empty list (and cannot say "none"); v1 racks and controller id;
v2 cluster id; v4 allow_auto_topic_creation; v5 offline replicas;
v7 partition leader epoch (KIP-320); v9 flexible; v10 topic ids (the controller's, which
UpdateMetadata v7 brings to the cache; zero only for a topic whose id has not reached us); v12 a
topic may be asked for by id alone (answered with its name, or UNKNOWN_TOPIC_ID). v8+ authorized
operations, when asked: all of them, as Kafka without an authorizer (_acl_operations.py).

Answered from the metadata cache (UpdateMetadata). An unknown topic is created when the client
allows it (v4+; always before v4) and the broker's auto_create_topics_enable is on: CreateTopics
goes to the controller with the broker's num_partitions and default_replication_factor, and the
answer waits (bounded) for the new topic to reach our cache; one that has not arrived is answered
LEADER_NOT_AVAILABLE, which clients retry, as Kafka answers a topic being created. An invalid
name is INVALID_TOPIC_EXCEPTION; an unknown topic otherwise UNKNOWN_TOPIC_OR_PARTITION.

Broker addresses are those of the listener the request arrived on (Kafka's rule: a client on
EXTERNAL sees EXTERNAL addresses, a broker on INTERNAL sees INTERNAL ones); a broker without that
listener is shown at its first one. See docs/control-plane.md "Listeners".

The controller id answered is our own broker id: as in KRaft, admin requests may go to any broker,
which forwards them to the controller (a node the clients never see).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.schema import ZERO_UUID
from epochlog.protocol.topic_names import valid_topic_name

from ..metadata_cache import MetadataCache
from . import register
from ._acl_operations import CLUSTER_OPERATIONS, TOPIC_OPERATIONS, UNREQUESTED

if TYPE_CHECKING:
    from ._context import BrokerApp, RequestContext

E = ErrorCode
NO_LEADER = -1


async def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse:
    app = ctx.app
    cache: MetadataCache = app.metadata
    every = request.topics is None or (ctx.version == 0 and not request.topics)
    asked = None if every else [_name(cache, t) for t in request.topics or ()]
    creating = app.config.auto_create_topics_enable and request.allow_auto_topic_creation
    if asked is not None and creating:
        missing = [n for n in asked if n and valid_topic_name(n) and not cache.has_topic(n)]
        if missing:
            await app.auto_create(missing)
    names = sorted(cache.topics) if asked is None else [n for n in asked if n is not None]
    topics = [_topic(cache, name, creating) for name in names] + [
        _unknown_id(t) for t in request.topics or () if t.name is None and _name(cache, t) is None]
    if request.include_topic_authorized_operations:
        for t in topics:
            if not t.error_code:
                t.topic_authorized_operations = TOPIC_OPERATIONS
    return MetadataResponse(brokers=_brokers(app, ctx.listener), cluster_id=app.config.cluster_id,
                            controller_id=app.broker_id, topics=topics,
                            cluster_authorized_operations=CLUSTER_OPERATIONS
                            if request.include_cluster_authorized_operations else UNREQUESTED)


def _name(cache: MetadataCache, asked: MetadataRequestTopic) -> str | None:
    """The name a requested topic goes by: its own, else the one its id has (v12), else None."""
    if asked.name is not None or asked.topic_id == ZERO_UUID:
        return asked.name
    return cache.topic_name(asked.topic_id)


def _unknown_id(asked: MetadataRequestTopic) -> MetadataResponseTopic:
    return MetadataResponseTopic(error_code=E.UNKNOWN_TOPIC_ID, name=None, topic_id=asked.topic_id)


def _brokers(app: BrokerApp, listener: str) -> list[MetadataResponseBroker]:
    known = app.metadata.brokers
    if not known:  # before the first UpdateMetadata: at least we exist
        host, port = app.listeners.get(listener, app.advertised)
        return [MetadataResponseBroker(node_id=app.broker_id, host=host, port=port,
                                       rack=app.config.rack_or_none)]
    answer = []
    for _, b in sorted(known.items()):
        host, port = b.endpoint(listener)
        answer.append(MetadataResponseBroker(node_id=b.broker_id, host=host, port=port,
                                             rack=b.rack))
    return answer


def _topic(cache: MetadataCache, name: str, creating: bool) -> MetadataResponseTopic:
    parts = cache.topics.get(name)
    if parts is None:
        if not valid_topic_name(name):
            error = E.INVALID_TOPIC_EXCEPTION
        elif creating:  # being created: clients retry this, as with Kafka
            error = E.LEADER_NOT_AVAILABLE
        else:
            error = E.UNKNOWN_TOPIC_OR_PARTITION
        return MetadataResponseTopic(error_code=error, name=name)
    return MetadataResponseTopic(name=name, topic_id=cache.topic_id(name), partitions=[
        MetadataResponsePartition(
            error_code=E.LEADER_NOT_AVAILABLE if p.leader == NO_LEADER else 0,
            partition_index=index, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
            offline_replicas=list(p.offline_replicas))
        for index, p in sorted(parts.items())])


register(ApiKey.METADATA, 0, 12, handle)
