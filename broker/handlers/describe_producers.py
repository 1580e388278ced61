"""DescribeProducers (key 61), version 0 (KIP-664).

On each partition's leader: the idempotent producers it holds state for (those with a batch
still in the log): producer id and epoch, last sequence, the last batch's largest timestamp.
Without transactions there is no coordinator epoch (-1) and no open transaction (start offset
-1). NOT_LEADER_OR_FOLLOWER on a follower, UNKNOWN_TOPIC_OR_PARTITION for what does not exist.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_producers import (
    DescribeProducersRequest,
    DescribeProducersResponse,
    PartitionResponse,
    ProducerState,
    TopicResponse,
)

from . import register
from ._partitions import leader

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: DescribeProducersRequest
                 ) -> DescribeProducersResponse:
    topics = []
    for t in request.topics:
        answers = []
        for index in t.partition_indexes:
            partition, error = leader(ctx.app, t.name, index)
            producers = []
            if partition is not None:
                for pid, entry in sorted(partition.log.producer_state.producers.items()):
                    last = entry.batches[-1] if entry.batches else None
                    producers.append(ProducerState(
                        producer_id=pid, producer_epoch=entry.producer_epoch,
                        last_sequence=entry.last_sequence,
                        last_timestamp=last.max_timestamp_ms if last else -1,
                        coordinator_epoch=-1, current_txn_start_offset=-1))
            answers.append(PartitionResponse(partition_index=index, error_code=error,
                                             active_producers=producers))
        topics.append(TopicResponse(name=t.name, partitions=answers))
    return DescribeProducersResponse(topics=topics)


register(ApiKey.DESCRIBE_PRODUCERS, 0, 0, handle)
