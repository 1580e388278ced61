"""ListTransactions (key 66), versions 0-1 (flexible; KIP-664; v1 adds duration_filter,
KIP-994).

The transactional ids this broker coordinates, with their producer id and state name, filtered
by state names (Kafka's: "Ongoing", "PrepareCommit", ...; the ones not known are answered back in
unknown_state_filters), producer ids, and, from v1, transactions open longer than
duration_filter ms. Each broker answers for its own; an admin asks them all.
COORDINATOR_LOAD_IN_PROGRESS while one of its partitions loads (with what is loaded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
    TransactionState,
)

from ..txn.log_records import Status
from . import register
from ._context import txns_of

if TYPE_CHECKING:
    from ._context import RequestContext

_BY_NAME = {s.kafka_name: s for s in Status}


async def handle(ctx: RequestContext, request: ListTransactionsRequest
                 ) -> ListTransactionsResponse:
    states = {_BY_NAME[n] for n in request.state_filters if n in _BY_NAME}
    unknown = [n for n in request.state_filters if n not in _BY_NAME]
    error, found = txns_of(ctx.app).list_transactions(
        states if request.state_filters else None,
        set(request.producer_id_filters) if request.producer_id_filters else None,
        request.duration_filter if ctx.version >= 1 else -1)
    return ListTransactionsResponse(
        error_code=error, unknown_state_filters=unknown,
        transaction_states=[TransactionState(transactional_id=m.transactional_id,
                                             producer_id=m.entry.producer_id,
                                             transaction_state=m.entry.status.kafka_name)
                            for m in found])


register(ApiKey.LIST_TRANSACTIONS, 0, 1, handle)
