"""AddPartitionsToTxn (key 24), versions 0-3 (v3 is flexible; KIP-890's batched v4+ is not
served). v2 may be answered PRODUCER_FENCED; older versions get INVALID_PRODUCER_EPOCH for it
(KIP-588).

A transactional producer names each partition before its first write there; the transaction
coordinator (txn/coordinator.py) records it in the transaction's state, written to
`__transaction_state`, so that the transaction's markers reach it. A partition no broker knows
is UNKNOWN_TOPIC_OR_PARTITION and the request's other partitions OPERATION_NOT_ATTEMPTED, as in
Kafka; otherwise every partition gets the coordinator's answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopicResult,
)
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._context import txns_of
from ._txn import fenced_as

if TYPE_CHECKING:
    from ._context import RequestContext

E = ErrorCode


async def handle(ctx: RequestContext, request: AddPartitionsToTxnRequest
                 ) -> AddPartitionsToTxnResponse:
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = {tp for tp in wanted if ctx.app.metadata.partition(*tp) is None}
    errors: dict[tuple[str, int], int]
    if unknown:
        errors = {tp: E.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown
                  else E.OPERATION_NOT_ATTEMPTED for tp in wanted}
    else:
        error = await txns_of(ctx.app).add_partitions(
            request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch, wanted)
        error = fenced_as(error, ctx.version, 2)
        errors = dict.fromkeys(wanted, error)
    by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(AddPartitionsToTxnPartitionResult(
            partition_index=index, partition_error_code=error))
    return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=[
        AddPartitionsToTxnTopicResult(name=t, results_by_partition=rs)
        for t, rs in by_topic.items()])


register(ApiKey.ADD_PARTITIONS_TO_TXN, 0, 3, handle)
