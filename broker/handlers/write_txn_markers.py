"""WriteTxnMarkers (key 27), versions 0-1 (v1 is flexible).

Sent by a transaction coordinator (broker/txn/markers.py) to the leaders of a transaction's
partitions once it has decided the outcome: each partition gets a COMMIT or ABORT marker, a
control batch of its own (protocol/control_records.py) with the producer's id and epoch and the
coordinator's epoch, appended through the leader's normal append (storage checks the producer
and coordinator epochs: an older one is INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED)
and answered once replicated to the ISR (acks=all), within MARKER_TIMEOUT_MS (REQUEST_TIMED_OUT
then). A partition we do not lead is NOT_LEADER_OR_FOLLOWER, one nobody knows
UNKNOWN_TOPIC_OR_PARTITION; an ISR below min.insync.replicas NOT_ENOUGH_REPLICAS. The coordinator
retries what failed. A replicated marker in a `__consumer_offsets` partition also tells its
group coordinator to apply or drop the transaction's offsets (TxnOffsetCommit).

Only brokers send it: where the broker has more than one listener, a WriteTxnMarkers arriving on
another than the inter-broker one (which coordinators use) is refused whole with
CLUSTER_AUTHORIZATION_FAILED, as Kafka answers a principal without the CLUSTER_ACTION right (a
client could otherwise commit or abort someone else's transaction). With one listener for
everything, the epochs are the only check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.write_txn_markers import (
    WritableTxnMarker,
    WritableTxnMarkerPartitionResult,
    WritableTxnMarkerResult,
    WritableTxnMarkerTopicResult,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from epochlog.protocol.control_records import marker_batch
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.registry import APIS

from ..clock import wall_clock_ms
from ..error_answers import error_answer
from ..groups.coordinator import OFFSETS_TOPIC
from ..partition import Partition
from ..replication_wait import wait_for_replication
from ..storage import StorageError
from . import register
from ._context import groups_of, replicas_of
from ._partitions import leader

if TYPE_CHECKING:
    from ._context import RequestContext

E = ErrorCode
API = APIS[ApiKey.WRITE_TXN_MARKERS]
MARKER_TIMEOUT_MS = 30_000


async def handle(ctx: RequestContext, request: WriteTxnMarkersRequest
                 ) -> WriteTxnMarkersResponse:
    app = ctx.app
    if len(app.listeners) > 1 and ctx.listener != app.config.listener_plan.inter_broker:
        answer = error_answer(API, ctx.version, request, E.CLUSTER_AUTHORIZATION_FAILED)
        assert isinstance(answer, WriteTxnMarkersResponse)
        return answer
    results: list[WritableTxnMarkerResult] = []
    waits: list[tuple[WritableTxnMarkerPartitionResult, Partition, int, int]] = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            answers = []
            for index in topic.partition_indexes:
                answer = WritableTxnMarkerPartitionResult(partition_index=index)
                written = _append(ctx, marker, topic.name, index, answer)
                if written is not None:
                    waits.append((answer, *written))
                answers.append(answer)
            topics.append(WritableTxnMarkerTopicResult(name=topic.name, partitions=answers))
        results.append(WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics))
    if waits:
        await wait_for_replication(replicas_of(app), waits, MARKER_TIMEOUT_MS)
    for marker, result in zip(request.markers, results, strict=True):
        for answered in result.topics:
            if answered.name == OFFSETS_TOPIC:
                for p_result in answered.partitions:
                    if p_result.error_code == 0:
                        groups_of(app).txn_marker(p_result.partition_index, marker.producer_id,
                                                  marker.transaction_result)
    return WriteTxnMarkersResponse(markers=results)


def _append(ctx: RequestContext, marker: WritableTxnMarker, topic: str, index: int,
            answer: WritableTxnMarkerPartitionResult) -> tuple[Partition, int, int] | None:
    """Append one partition's marker: (partition, its leader epoch, the marker's offset) to
    wait for, or None with answer.error_code set."""
    partition, answer.error_code = leader(ctx.app, topic, index)
    if partition is None:
        return None
    if partition.under_min_isr():
        answer.error_code = E.NOT_ENOUGH_REPLICAS
        return None
    batch = marker_batch(marker.transaction_result, marker.producer_id, marker.producer_epoch,
                         marker.coordinator_epoch, wall_clock_ms())
    try:
        info = partition.append_as_leader(batch)
    except StorageError as exc:
        answer.error_code = exc.error_code
        return None
    replicas_of(ctx.app).poke((topic, index))
    return partition, partition.leader_epoch, info.last_offset


register(ApiKey.WRITE_TXN_MARKERS, 0, 1, handle)
