"""Helpers shared by the client-facing handlers: finding the partition a request may use here.

A request about a partition this broker does not lead is answered as Kafka does:
UNKNOWN_TOPIC_OR_PARTITION when the cluster has no such partition (as far as our metadata cache
knows), NOT_LEADER_OR_FOLLOWER when it exists but is led elsewhere (or not yet by us: the
LeaderAndIsr may still be on its way), so the client refreshes its metadata and retries.
"""

from __future__ import annotations

from typing import Any

from protocol.error_codes import ErrorCode

from ..partition import Partition


def not_served_error(app: Any, topic: str, index: int) -> int:
    if app.replicas.get(topic, index) is None and app.metadata.partition(topic, index) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NOT_LEADER_OR_FOLLOWER


def leader(app: Any, topic: str, index: int, current_leader_epoch: int = -1
           ) -> tuple[Partition | None, int]:
    """(the partition, 0) when we lead it and the client's epoch passes (KIP-320 fencing),
    else (None, error)."""
    partition = app.replicas.get(topic, index)
    if partition is None or not partition.is_leader:
        return None, not_served_error(app, topic, index)
    error = partition.fence(current_leader_epoch)
    if error:
        return None, error
    return partition, 0


TOPIC_NAME_CHARS_MAX = 249
_TOPIC_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def valid_topic_name(name: str) -> bool:
    """Kafka's rule (the controller applies the same one when creating)."""
    return (0 < len(name) <= TOPIC_NAME_CHARS_MAX and name not in (".", "..")
            and all(c in _TOPIC_CHARS for c in name))
