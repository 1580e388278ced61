"""`GroupCoordinator`: the groups of the `__consumer_offsets` partitions this broker leads.

Theory of operation
-------------------
A group belongs to partition `abs(java_hashcode(group_id)) % partitions` of `__consumer_offsets`
(Kafka's rule, so Kafka's tools and ours agree), and its coordinator is that partition's leader.
Every decision is the sans-IO core's (core.py: the shards and their loading, parking JoinGroup
and SyncGroup, storing group records, commits, transactional offsets, deletions, timers; the
group state machine below it, state.py). This module is its asyncio shell
(coordinator_driver.py does what both coordinators' shells do alike):

    the replica manager applied a state of an offsets partition (`on_partition`, one of its
      partition_listeners)         -> the core's partition_applied; a Load is a task reading
                                      the partition's log into the core
    a request (JoinGroup, SyncGroup, LeaveGroup, OffsetCommit, TxnOffsetCommit, DeleteGroups,
      OffsetDelete)                -> an event with a token; the answer is awaited until the
                                      core resolves the token
    the core's Append              -> the records appended through the leader's normal append,
                                      answered once replicated to the ISR (acks=all), within
                                      `offsets_commit_timeout_ms`; the outcome back to the core
    the timer task                 -> the core's tick at its next deadline (at least every
                                      TICK_MS_MAX); first, shards we no longer lead are reported
                                      lost (as before every lookup)

Clocks: `clock` (monotonic ms) is the core's now_ms, the groups' deadlines; `wall_clock` is
what is written (commit timestamps, group records).

The offsets topic is created on the first FindCoordinator that finds it missing, through the
controller as auto-creation does (`offsets_topic_num_partitions`,
`offsets_topic_replication_factor`, cleanup.policy=compact; if the controller does not accept
that setting yet, without it, with a warning).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from ..clock import monotonic_ms, wall_clock_ms
from ..coordinator_driver import CoordinatorDriver
from ..internal_topics import InternalTopic
from ..partition import Partition
from .core import (
    OFFSETS_TOPIC,
    CommitAnswer,
    DeleteAnswer,
    GroupCore,
    LeaveAnswer,
    OffsetToCommit,
)
from .state import (
    CommittedOffset,
    Group,
    GroupSettings,
    JoinRequest,
    JoinResult,
    SyncResult,
    random_member_id,
)

if TYPE_CHECKING:
    from ..parts import BrokerParts

__all__ = ["OFFSETS_TOPIC", "GroupCoordinator", "OffsetToCommit", "monotonic_ms",
           "wall_clock_ms"]

OFFSETS_SEGMENT_BYTES = 100 << 20  # Kafka's offsets.topic.segment.bytes


class GroupCoordinator(CoordinatorDriver):
    core: GroupCore

    def __init__(self, parts: BrokerParts, *, clock: Callable[[], int] = monotonic_ms,
                 wall_clock: Callable[[], int] = wall_clock_ms,
                 new_member_id: Callable[[str], str] = random_member_id) -> None:
        c = parts.config
        topic = InternalTopic(
            parts, OFFSETS_TOPIC, partitions=c.offsets_topic_num_partitions,
            replication_factor=c.offsets_topic_replication_factor,
            configs=[("cleanup.policy", "compact"), ("segment.bytes", str(OFFSETS_SEGMENT_BYTES))],
            timeout_ms=c.offsets_commit_timeout_ms, wall_clock=wall_clock)
        super().__init__(parts, topic, clock)
        self.wall_clock = wall_clock
        self.core = GroupCore(
            GroupSettings(c.group_min_session_timeout_ms, c.group_max_session_timeout_ms,
                          c.group_initial_rebalance_delay_ms),
            partition_of=topic.partition_for,
            partition_known=lambda t, p: parts.metadata.partition(t, p) is not None,
            metadata_max_bytes=c.offset_metadata_max_bytes, new_member_id=new_member_id)
        self.counters = self.core.counters  # the metrics read them

    # -------------------------------------------------------------------- the core's clocks
    def _appended(self, append_id: int, error: int, first_offset: int) -> Sequence[object]:
        return self.core.appended(self.clock(), self.wall_clock(), append_id, error,
                                  first_offset)

    def _tick(self) -> Sequence[object]:
        return self.core.tick(self.clock(), self.wall_clock())

    # -------------------------------------------------------------------- partitions, shards
    def partition_for(self, group_id: str) -> int:
        return self.topic.partition_for(group_id)

    def on_partition(self, topic: str, index: int, partition: Partition | None) -> None:
        """The replica manager applied a state of one of our partitions (None: gone)."""
        if topic != OFFSETS_TOPIC:
            return
        epoch = partition.leader_epoch if partition is not None and partition.is_leader else None
        self._run(self.core.partition_applied(index, epoch))

    def close(self) -> None:
        self._run(self.core.unload_all("broker stopping"))

    # ----------------------------------------------------------------- FindCoordinator
    async def find(self, key: str, listener: str) -> tuple[int, int, str, int]:
        """(error, node id, host, port) of the group's coordinator."""
        return await self.topic.find(key, listener)

    # ----------------------------------------------------------------- membership APIs
    async def join(self, group_id: str, req: JoinRequest) -> JoinResult:
        self._check(group_id)
        return await self._call(lambda token: self.core.join(
            self.clock(), self.wall_clock(), group_id, req, token), JoinResult)

    async def sync(self, group_id: str, generation: int, member_id: str,
                   instance_id: str | None, protocol_type: str | None,
                   protocol_name: str | None,
                   assignments: Sequence[tuple[str, bytes]]) -> SyncResult:
        self._check(group_id)
        return await self._call(lambda token: self.core.sync(
            self.clock(), self.wall_clock(), group_id, generation, member_id, instance_id,
            protocol_type, protocol_name, assignments, token), SyncResult)

    def heartbeat(self, group_id: str, generation: int, member_id: str,
                  instance_id: str | None) -> int:
        self._check(group_id)
        error = self.core.heartbeat(self.clock(), group_id, generation, member_id, instance_id)
        self._wake.set()  # a session deadline moved
        return error

    def leave(self, group_id: str, members: Sequence[tuple[str, str | None]]
              ) -> tuple[int, list[int]]:
        """(top-level error, per-member errors)."""
        self._check(group_id)
        answer = self._call_now(lambda token: self.core.leave(
            self.clock(), self.wall_clock(), group_id, members, token), LeaveAnswer)
        return answer.error, list(answer.member_errors)

    # ------------------------------------------------------------------------ offsets
    async def commit(self, group_id: str, generation: int, member_id: str,
                     instance_id: str | None, offsets: Sequence[OffsetToCommit], *,
                     producer: tuple[int, int] | None = None) -> dict[tuple[str, int], int]:
        """OffsetCommit, or with producer (id, epoch) TxnOffsetCommit (core.GroupCore.commit):
        an error code per (topic, partition)."""
        self._check(group_id)
        answer = await self._call(lambda token: self.core.commit(
            self.clock(), self.wall_clock(), group_id, generation, member_id, instance_id,
            offsets, token, producer=producer), CommitAnswer)
        return answer.errors

    def fetch_offsets(self, group_id: str, wanted: Sequence[tuple[str, int]] | None
                      ) -> tuple[int, dict[tuple[str, int], CommittedOffset | None]]:
        """OffsetFetch: (error, committed offset per partition; None: none committed).
        wanted None: every partition the group committed."""
        self._check(group_id)
        return self.core.fetch_offsets(group_id, wanted)

    def unstable(self, group_id: str, tps: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """The partitions whose offsets wait for a transaction's outcome (require_stable)."""
        return self.core.unstable(group_id, tps)

    def txn_marker(self, index: int, producer_id: int, commit: bool) -> None:
        """A transaction marker is replicated in offsets partition index (core.py)."""
        self.core.txn_marker(index, producer_id, commit)

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, int]:
        """DeleteGroups: an error per group (core.GroupCore.delete_group), one after another."""
        results: dict[str, int] = {}
        for group_id in dict.fromkeys(group_ids):
            self._check(group_id)
            answer = await self._call(partial(self.core.delete_group, group_id), DeleteAnswer)
            results[group_id] = answer.error
        return results

    async def delete_offsets(self, group_id: str, wanted: Sequence[tuple[str, int]]
                             ) -> tuple[int, dict[tuple[str, int], int]]:
        """OffsetDelete: (top-level error, an error per partition)."""
        self._check(group_id)
        answer = await self._call(lambda token: self.core.delete_offsets(
            group_id, wanted, token), DeleteAnswer)
        return answer.error, answer.partition_errors

    def describe(self, group_id: str) -> tuple[int, Group | None]:
        self._check(group_id)
        return self.core.describe(group_id)

    def list_groups(self) -> tuple[int, list[Group]]:
        self._unload_lost()
        return self.core.list_groups()

    # ------------------------------------------------------------------------ metrics
    def group_counts(self) -> dict[str, int]:
        return self.core.group_counts()

    def member_count(self) -> int:
        return self.core.member_count()
