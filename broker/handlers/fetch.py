"""Fetch (key 1), versions 4-12.

v4 isolation level and last_stable_offset; v5 log_start_offset; v7 fetch sessions; v9
current_leader_epoch (KIP-320: older -> FENCED_LEADER_EPOCH, newer -> UNKNOWN_LEADER_EPOCH, -1 no
check); v11 rack_id and preferred_read_replica (KIP-392: always -1 here until follower reads come);
v12 is flexible with last_fetched_epoch: a fetcher whose last fetched epoch ends before its fetch
offset in our epoch cache gets `diverging_epoch` (KIP-320/KIP-595) and no records.

Fetch sessions are not kept: session_id 0 is answered with session_id 0, which tells the client
that every fetch is a full one (Kafka's answer when it has no session to give); a non-zero
session id is FETCH_SESSION_ID_NOT_FOUND, after which clients fall back to full fetches.

Consumers (replica_id -1) read up to the high watermark (the last stable offset equals it: no
transactions); replicas (replica_id >= 0, the replication issue's fetchers) read up to the log end,
and their fetch offset tells the leader how far they are (Partition.update_follower). Offsets
outside [log start, log end] are OFFSET_OUT_OF_RANGE. Sizes: partition_max_bytes per partition and
max_bytes per request, except that the first batch of the first partition with data is always
returned whole (KIP-74), so a batch larger than the limits never stalls a consumer.

Long poll: with fewer than min_bytes to return, no error and max_wait_ms left (capped by the
broker's fetch_wait_ms_max), the request waits in the fetch purgatory, woken whenever a watched
partition changes (an append, a high watermark move, a role change), and reads again.
"""

from __future__ import annotations

import asyncio
from typing import Any

from protocol.apis.fetch import (EpochEndOffset, FetchableTopicResponse, FetchPartition,
                                 FetchRequest, FetchResponse, LeaderIdAndEpoch, PartitionData)
from protocol.error_codes import ErrorCode

from ..partition import Partition
from ..storage import StorageError
from . import register
from ._partitions import leader

E = ErrorCode
READ_COMMITTED = 1
NO_DIVERGENCE = EpochEndOffset()
Want = tuple[str, FetchPartition]


async def handle(ctx: Any, request: FetchRequest) -> FetchResponse:
    app = ctx.app
    if request.session_id != 0:
        return FetchResponse(error_code=E.FETCH_SESSION_ID_NOT_FOUND, session_id=0)
    wants = [(t.topic, p) for t in request.topics for p in t.partitions]
    from_replica = request.replica_id >= 0
    if from_replica:
        _note_follower_positions(app, request.replica_id, wants)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(request.max_wait_ms, app.config.fetch_wait_ms_max) / 1000
    while True:
        answer, total_bytes, stop = _read_all(app, request, wants, from_replica, ctx.version)
        remaining_ms = int((deadline - loop.time()) * 1000)
        if stop or total_bytes >= request.min_bytes or remaining_ms <= 0:
            return answer
        seen = _positions(app, wants, from_replica)
        changed = await app.replicas.fetch_purgatory.wait_until(
            [(topic, p.partition) for topic, p in wants],
            lambda: _positions(app, wants, from_replica) != seen, remaining_ms)
        if not changed:
            return answer


def _positions(app: Any, wants: list[Want], from_replica: bool) -> list[tuple[int, int, bool]]:
    """What a waiting fetch watches: per partition, the readable end, leader epoch and role."""
    out = []
    for topic, p in wants:
        partition = app.replicas.get(topic, p.partition)
        out.append((-1, -1, False) if partition is None else
                   (partition.readable_end(from_replica), partition.leader_epoch,
                    partition.is_leader))
    return out


def _note_follower_positions(app: Any, replica_id: int, wants: list[Want]) -> None:
    for topic, p in wants:
        partition = app.replicas.get(topic, p.partition)
        if partition is not None and partition.update_follower(replica_id, p.fetch_offset):
            app.replicas.poke((topic, p.partition))


def _read_all(app: Any, request: FetchRequest, wants: list[Want], from_replica: bool,
              version: int) -> tuple[FetchResponse, int, bool]:
    """(answer, bytes of records in it, answer at once: an error or a divergence)."""
    budget = request.max_bytes
    total = 0
    stop = False
    topics: dict[str, FetchableTopicResponse] = {}
    for topic, p in wants:
        data = _read_one(app, topic, p, from_replica, budget, min_one=total == 0)
        if request.isolation_level == READ_COMMITTED:
            data.aborted_transactions = []
        size = len(data.records or b"")
        total += size
        budget -= size
        stop = stop or data.error_code != 0 or data.diverging_epoch != NO_DIVERGENCE
        answer = topics.get(topic)
        if answer is None:
            answer = topics[topic] = FetchableTopicResponse(topic=topic)
        answer.partitions.append(data)
    return FetchResponse(responses=list(topics.values()), session_id=0), total, stop


def _read_one(app: Any, topic: str, p: FetchPartition, from_replica: bool, budget: int,
              min_one: bool) -> PartitionData:
    data = PartitionData(partition_index=p.partition, aborted_transactions=None, records=b"")
    partition, data.error_code = leader(app, topic, p.partition, p.current_leader_epoch)
    if partition is None:
        _hint_leader(app, topic, p.partition, data)
        return data
    data.high_watermark = partition.high_watermark
    data.last_stable_offset = partition.high_watermark
    data.log_start_offset = partition.log_start_offset
    if p.last_fetched_epoch >= 0 and _diverging(partition, p, data):
        return data
    if not partition.log_start_offset <= p.fetch_offset <= partition.log_end_offset:
        data.error_code = E.OFFSET_OUT_OF_RANGE
        return data
    end = partition.readable_end(from_replica)
    bytes_max = min(p.partition_max_bytes, budget)
    if p.fetch_offset >= end or (bytes_max <= 0 and not min_one):
        return data
    try:
        records = partition.log.read(p.fetch_offset, max(bytes_max, 0), offset_max=end)
    except StorageError as exc:
        data.error_code = exc.error_code
        return data
    if len(records) > bytes_max and not min_one:
        return data  # a batch bigger than what is left: the next fetch starts with it
    data.records = records
    return data


def _diverging(partition: Partition, p: FetchPartition, data: PartitionData) -> bool:
    """KIP-320: the fetcher's last fetched epoch ends, in our log, before its fetch offset."""
    epoch, end_offset = partition.log.end_offset_for_epoch(p.last_fetched_epoch)
    if epoch == -1 or epoch < p.last_fetched_epoch or end_offset < p.fetch_offset:
        data.diverging_epoch = EpochEndOffset(epoch=epoch, end_offset=end_offset)
        return True
    return False


def _hint_leader(app: Any, topic: str, index: int, data: PartitionData) -> None:
    """v12: name the leader we know of, so the client need not wait for a metadata refresh."""
    if data.error_code in (E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH):
        info = app.metadata.partition(topic, index)
        if info is not None:
            data.current_leader = LeaderIdAndEpoch(leader_id=info.leader,
                                                   leader_epoch=info.leader_epoch)


register(1, 4, 12, handle)
