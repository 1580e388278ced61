"""DescribeTopicPartitions (key 75, KIP-966) on the controller: partitions with their eligible
leader replicas, which only the controller keeps (brokers forward the request here).

Topics in name order (all of them when the request names none), partitions in index order, from
the request's cursor on, at most response_partition_limit partitions per answer; next_cursor is
where the next page starts. Topic authorized operations are the broker's to fill in (it knows
what it allows); this answer leaves them unset.
"""

from __future__ import annotations

from epochlog.protocol.apis.describe_topic_partitions import (
    Cursor,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    DescribeTopicPartitionsResponsePartition,
    DescribeTopicPartitionsResponseTopic,
)
from epochlog.protocol.error_codes import ErrorCode

from . import outbound
from .model import NO_LEADER, Topic
from .state import ControllerState


def describe_topic_partitions(state: ControllerState, req: DescribeTopicPartitionsRequest,
                              version: int, now_ms: int) -> DescribeTopicPartitionsResponse:
    names = sorted({t.name for t in req.topics}) if req.topics else sorted(state.topics)
    start = req.cursor
    left = max(1, req.response_partition_limit)
    out: list[DescribeTopicPartitionsResponseTopic] = []
    for name in names:
        if start is not None and name < start.topic_name:
            continue
        topic = state.topics.get(name)
        if topic is None:
            out.append(DescribeTopicPartitionsResponseTopic(
                error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
            continue
        first = start.partition_index if start is not None and name == start.topic_name else 0
        parts, next_index = _partitions(state, topic, first, left)
        left -= len(parts)
        out.append(DescribeTopicPartitionsResponseTopic(name=name, topic_id=topic.topic_id,
                                                        partitions=parts))
        if next_index is not None:
            return DescribeTopicPartitionsResponse(
                topics=out, next_cursor=Cursor(topic_name=name, partition_index=next_index))
        if left == 0:
            later = [n for n in names if n > name]
            if later:
                return DescribeTopicPartitionsResponse(
                    topics=out, next_cursor=Cursor(topic_name=later[0], partition_index=0))
    return DescribeTopicPartitionsResponse(topics=out)


def _partitions(state: ControllerState, topic: Topic, first: int, limit: int
                ) -> tuple[list[DescribeTopicPartitionsResponsePartition], int | None]:
    """Up to limit partitions of topic from index first; and the index the next page starts
    at, if any is left."""
    parts: list[DescribeTopicPartitionsResponsePartition] = []
    for index, p in sorted(topic.partitions.items()):
        if index < first:
            continue
        if len(parts) == limit:
            return parts, index
        parts.append(DescribeTopicPartitionsResponsePartition(
            error_code=ErrorCode.LEADER_NOT_AVAILABLE if p.leader == NO_LEADER else 0,
            partition_index=index, leader_id=p.leader, leader_epoch=p.leader_epoch,
            replica_nodes=list(p.replicas), isr_nodes=list(p.isr),
            eligible_leader_replicas=list(p.elr), last_known_elr=list(p.last_known_elr),
            offline_replicas=outbound.offline_replicas(state.brokers, topic.name, index, p)))
    return parts, None
