"""Committed offsets on the wire: OffsetCommit and OffsetFetch requests from (offset, leader
epoch) pairs, and their answers read back into them. Pure; client.group sends them.

Offsets carry the leader epoch of the record before them (KIP-320): OffsetCommit v6+ sends it and
OffsetFetch v5+ returns it (-1 where the committer did not say, as aiokafka's v3 commits do).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from epochlog.protocol.apis.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from epochlog.protocol.apis.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestTopic,
    OffsetFetchResponse,
)

from .types import TopicPartition

Committed = dict[TopicPartition, tuple[int, int] | None]


def commit_request(group_id: str, generation: int, member_id: str, instance_id: str | None,
                   offsets: Mapping[TopicPartition, tuple[int, int]]) -> OffsetCommitRequest:
    topics: dict[str, list[OffsetCommitRequestPartition]] = {}
    for tp, (offset, epoch) in sorted(offsets.items()):
        topics.setdefault(tp.topic, []).append(OffsetCommitRequestPartition(
            partition_index=tp.partition, committed_offset=offset,
            committed_leader_epoch=epoch, committed_metadata=""))
    return OffsetCommitRequest(
        group_id=group_id, generation_id_or_member_epoch=generation, member_id=member_id,
        group_instance_id=instance_id,
        topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in topics.items()])


def commit_errors(answer: OffsetCommitResponse) -> set[int]:
    return {p.error_code for t in answer.topics for p in t.partitions} - {0}


def fetch_request(group_id: str, partitions: Iterable[TopicPartition]) -> OffsetFetchRequest:
    topics: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        topics.setdefault(tp.topic, []).append(tp.partition)
    return OffsetFetchRequest(group_id=group_id, require_stable=True, topics=[
        OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics.items()])


def fetch_errors(answer: OffsetFetchResponse) -> set[int]:
    return ({answer.error_code} | {p.error_code for t in answer.topics
                                   for p in t.partitions}) - {0}


def committed_offsets(answer: OffsetFetchResponse, wanted: Iterable[TopicPartition]
                      ) -> Committed:
    """(offset, leader epoch) per wanted partition; None where nothing is committed."""
    out: Committed = {tp: None for tp in wanted}
    for t in answer.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if p.committed_offset >= 0 and tp in out:
                out[tp] = (p.committed_offset, p.committed_leader_epoch)
    return out
