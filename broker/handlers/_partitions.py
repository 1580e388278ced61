"""Helpers shared by the client-facing handlers: finding the partition a request may use here.

`serving` decides, for one partition of one request, whether this broker answers it, in Kafka's
order (Partition.getLocalLog):
1. a partition we do not host: UNKNOWN_TOPIC_OR_PARTITION when the cluster has no such partition
   (as far as our metadata cache knows), NOT_LEADER_OR_FOLLOWER when it lives elsewhere (or the
   LeaderAndIsr naming us is still on its way), so the client refreshes metadata and retries;
2. one we host but neither lead nor follow (no leader, or we stopped leading when our generation
   ended): NOT_LEADER_OR_FOLLOWER;
3. KIP-320 fencing of the request's CurrentLeaderEpoch against ours, on the leader and on a
   follower alike (the seed: a follower answers a mismatched epoch with these codes rather than
   NOT_LEADER): older FENCED_LEADER_EPOCH (74), newer UNKNOWN_LEADER_EPOCH (75), -1 no check;
4. a follower answers only where the caller allows it (`follower_ok`: KIP-392 consumer reads,
   ListOffsets from a follower-reading client); otherwise NOT_LEADER_OR_FOLLOWER.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.error_codes import ErrorCode

from ..partition import Partition, Role
from ._context import replicas_of

if TYPE_CHECKING:
    from ._context import BrokerApp


def not_served_error(app: BrokerApp, topic: str, index: int) -> int:
    if replicas_of(app).get(topic, index) is None and app.metadata.partition(topic, index) is None:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    return ErrorCode.NOT_LEADER_OR_FOLLOWER


def serving(app: BrokerApp, topic: str, index: int, current_leader_epoch: int = -1, *,
            follower_ok: bool = False) -> tuple[Partition | None, int]:
    """(the partition, 0) when this broker answers the request for it, else (None, error)."""
    partition = replicas_of(app).get(topic, index)
    if partition is None or partition.role is Role.OFFLINE:
        return None, not_served_error(app, topic, index)
    error = partition.fence(current_leader_epoch)
    if error:
        return None, error
    if not partition.is_leader and not follower_ok:
        return None, ErrorCode.NOT_LEADER_OR_FOLLOWER
    return partition, 0


def leader(app: BrokerApp, topic: str, index: int, current_leader_epoch: int = -1
           ) -> tuple[Partition | None, int]:
    """(the partition, 0) when we lead it and the client's epoch passes (KIP-320 fencing),
    else (None, error)."""
    return serving(app, topic, index, current_leader_epoch)


def leader_epoch_start_offset(partition: Partition) -> int:
    """Where the current leader epoch began in the partition's log (-1 if its cache does not
    say)."""
    entries = partition.log.epoch_cache.entries
    if entries and entries[-1].epoch == partition.leader_epoch:
        return entries[-1].start_offset
    return -1


def high_watermark_known(partition: Partition) -> bool:
    """KIP-207 (and KIP-392's "high watermark propagation"): a new leader's high watermark is
    the true one only once it reaches the start of the leader's epoch; before, a committed offset
    may lie above it. A follower's is what its leader told it."""
    return not partition.is_leader or partition.high_watermark >= \
        leader_epoch_start_offset(partition)
