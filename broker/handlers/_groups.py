"""Helpers shared by the group handlers (JoinGroup, SyncGroup, ...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from epochlog.protocol.error_codes import ErrorCode

from ..groups.coordinator import OffsetToCommit
from ._context import groups_of

if TYPE_CHECKING:
    from ._context import RequestContext

TopicPartition = tuple[str, int]


class _Partition(Protocol):
    """A partition of OffsetCommit's or TxnOffsetCommit's request."""

    partition_index: int
    committed_offset: int
    committed_leader_epoch: int
    committed_metadata: str | None


class _Topic(Protocol):
    name: str

    @property
    def partitions(self) -> Sequence[_Partition]: ...  # read-only: a list of either's


def client_host(ctx: RequestContext) -> str:
    """The member's host as Kafka shows it ("/127.0.0.1")."""
    host = ctx.peer.rpartition(":")[0] if ":" in ctx.peer else ctx.peer
    return "/" + host.strip("[]")


def client_id(ctx: RequestContext) -> str:
    return ctx.header.client_id or ""


def instance_id(ctx: RequestContext, value: str | None, since: int) -> str | None:
    """group_instance_id where the version carries it (an empty one means none)."""
    return (value or None) if ctx.version >= since else None


async def commit_offsets(ctx: RequestContext, group_id: str, topics: Sequence[_Topic],
                         leader_epoch_since: int, generation: int, member_id: str,
                         instance: str | None, producer: tuple[int, int] | None = None
                         ) -> dict[TopicPartition, int]:
    """OffsetCommit's or (with producer) TxnOffsetCommit's offsets, given to the group
    coordinator: an error per partition (INVALID_GROUP_ID for all without a group id). The
    committed leader epoch is read from the versions that carry it (leader_epoch_since on)."""
    offsets = [OffsetToCommit(t.name, p.partition_index, p.committed_offset,
                              p.committed_leader_epoch if ctx.version >= leader_epoch_since
                              else -1, p.committed_metadata or "")
               for t in topics for p in t.partitions]
    if not group_id:
        return {(o.topic, o.partition): ErrorCode.INVALID_GROUP_ID for o in offsets}
    return await groups_of(ctx.app).commit(group_id, generation, member_id, instance, offsets,
                                           producer=producer)
