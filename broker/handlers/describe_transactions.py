"""DescribeTransactions (key 65), version 0 (flexible; KIP-664).

Each transactional id's state as its coordinator holds it (txn/coordinator.py): Kafka's state
name ("Ongoing", "PrepareCommit", ...), timeout, start time (-1 when no transaction is open),
producer id and epoch, and the partitions of the open transaction. An id this broker does not
coordinate is NOT_COORDINATOR, one it does not know TRANSACTIONAL_ID_NOT_FOUND.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    TopicData,
    TransactionState,
)

from ..txn.log_records import Status
from . import register
from ._context import txns_of

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: DescribeTransactionsRequest
                 ) -> DescribeTransactionsResponse:
    states = []
    for transactional_id in request.transactional_ids:
        error, m = txns_of(ctx.app).describe(transactional_id)
        answer = TransactionState(error_code=error, transactional_id=transactional_id,
                                  producer_id=-1, producer_epoch=-1,
                                  transaction_start_time_ms=-1)
        if m is not None:
            e = m.entry
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(e.partitions):
                by_topic.setdefault(topic, []).append(index)
            answer.transaction_state = e.status.kafka_name
            answer.transaction_timeout_ms = e.timeout_ms
            answer.transaction_start_time_ms = e.start_ms if e.status is not Status.EMPTY \
                else -1
            answer.producer_id, answer.producer_epoch = e.producer_id, e.producer_epoch
            answer.topics = [TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()]
        states.append(answer)
    return DescribeTransactionsResponse(transaction_states=states)


register(ApiKey.DESCRIBE_TRANSACTIONS, 0, 0, handle)
