"""ListOffsets for a set of partitions, each asked of its leader: the one lookup behind
`Admin.list_offsets` and the Consumer's `beginning_offsets`, `end_offsets` and
`offsets_for_times`.

Each partition goes to its leader with the leader epoch we know (KIP-320).
NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, LEADER_NOT_AVAILABLE, a
partition missing from metadata and a broken connection (every retriable error) refresh
metadata and ask again for those partitions only, at most ATTEMPTS_MAX times with backoff; any
other error is raised at once, naming the partition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Literal, NamedTuple, TypeVar

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from epochlog.protocol.error_codes import ErrorCode as E

from .cluster import ClusterClient
from .errors import KafkaConnectionError, KafkaError, UnknownTopicOrPartitionError, error_for
from .types import TopicPartition

ATTEMPTS_MAX = 5
EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP = -2, -1, -3  # ListOffsets' special times
SPECS = {"earliest": EARLIEST_TIMESTAMP, "latest": LATEST_TIMESTAMP,
         "max_timestamp": MAX_TIMESTAMP}
OffsetSpec = Literal["earliest", "latest", "max_timestamp"] | int
T = TypeVar("T")


class ListOffsetsResult(NamedTuple):
    offset: int  # -1: no record at or after the timestamp asked for
    timestamp: int
    leader_epoch: int


async def retrying(call: Callable[[], Awaitable[T]], backoff_s: float) -> T:
    """call(), again on a fresh connection if the one it used broke (a broker restarted), at most
    ATTEMPTS_MAX times with backoff."""
    for attempt in range(ATTEMPTS_MAX):
        try:
            return await call()
        except (ConnectionError, OSError, TimeoutError) as exc:
            if attempt == ATTEMPTS_MAX - 1:
                raise KafkaConnectionError(f"no answer after {ATTEMPTS_MAX} attempts: "
                                           f"{exc}") from exc
            await asyncio.sleep(backoff_s * (attempt + 1))
    raise AssertionError("unreachable")


async def list_offsets(cluster: ClusterClient, timestamps: Mapping[TopicPartition, int], *,
                       read_committed: bool, backoff_s: float
                       ) -> dict[TopicPartition, ListOffsetsResult]:
    """Each partition's offset for its timestamp (or EARLIEST/LATEST/MAX_TIMESTAMP); with
    read_committed, "latest" is the last stable offset."""
    wanted = dict(timestamps)
    out: dict[TopicPartition, ListOffsetsResult] = {}

    async def refresh() -> None:
        await retrying(lambda: cluster.refresh(sorted({tp.topic for tp in wanted})), backoff_s)

    await refresh()
    for attempt in range(ATTEMPTS_MAX):
        retry: dict[TopicPartition, KafkaError] = {}
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp in wanted:
            view = cluster.partitions.get((tp.topic, tp.partition))
            if view is None:
                topic_error = cluster.topic_errors.get(tp.topic, 0)
                if topic_error not in (0, E.LEADER_NOT_AVAILABLE):
                    raise error_for(topic_error, f"list offsets of {tp.topic}-{tp.partition}")
                retry[tp] = UnknownTopicOrPartitionError(f"no metadata for {tp}")
            elif view.leader < 0:
                retry[tp] = error_for(E.LEADER_NOT_AVAILABLE, f"{tp.topic}-{tp.partition}")
            else:
                by_leader.setdefault(view.leader, []).append(tp)
        answers = await asyncio.gather(*(
            _ask(cluster, node, tps, wanted, read_committed) for node, tps in by_leader.items()))
        for got in answers:
            for tp, result in got.items():
                if isinstance(result, ListOffsetsResult):
                    out[tp] = result
                elif result.retriable:  # client.retriable: all after a metadata refresh
                    retry[tp] = result
                else:
                    raise result
        wanted = {tp: wanted[tp] for tp in retry}
        if not wanted:
            return out
        if attempt == ATTEMPTS_MAX - 1:
            raise next(iter(retry.values()))
        await asyncio.sleep(backoff_s * (attempt + 1))
        await refresh()
    return out


async def _ask(cluster: ClusterClient, node: int, tps: list[TopicPartition],
               wanted: Mapping[TopicPartition, int], read_committed: bool
               ) -> dict[TopicPartition, ListOffsetsResult | KafkaError]:
    by_topic: dict[str, list[ListOffsetsPartition]] = {}
    for tp in tps:
        view = cluster.partitions[(tp.topic, tp.partition)]
        by_topic.setdefault(tp.topic, []).append(ListOffsetsPartition(
            partition_index=tp.partition, current_leader_epoch=view.leader_epoch,
            timestamp=wanted[tp]))
    request = ListOffsetsRequest(
        replica_id=-1, isolation_level=1 if read_committed else 0,
        topics=[ListOffsetsTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
    out: dict[TopicPartition, ListOffsetsResult | KafkaError] = {}
    try:
        answer = await cluster.request_broker(node, ApiKey.LIST_OFFSETS, request)
    except (ConnectionError, OSError, TimeoutError) as exc:
        return {tp: KafkaConnectionError(f"list offsets at broker {node}: {exc}") for tp in tps}
    for t in answer.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if p.error_code:
                out[tp] = error_for(p.error_code, f"list offsets of {t.name}-"
                                                  f"{p.partition_index} at broker {node}")
            else:
                out[tp] = ListOffsetsResult(p.offset, p.timestamp, p.leader_epoch)
    return out
