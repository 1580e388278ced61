"""EndTxn (key 26), versions 0-3 (v3 is flexible). v2 may be answered PRODUCER_FENCED; older
versions get INVALID_PRODUCER_EPOCH for it (KIP-588).

Commits or aborts the producer's transaction: the transaction coordinator (txn/coordinator.py)
writes the decision (PrepareCommit or PrepareAbort) to `__transaction_state` and answers; the
markers then go to the transaction's partitions, and until they are all written the id answers
CONCURRENT_TRANSACTIONS, which producers retry. A retried EndTxn of a transaction already ended
the same way succeeds; the other outcome, or nothing to end, is INVALID_TXN_STATE.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.end_txn import EndTxnRequest, EndTxnResponse

from . import register
from ._context import txns_of
from ._txn import fenced_as

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    error = await txns_of(ctx.app).end_txn(request.transactional_id, request.producer_id,
                                           request.producer_epoch, request.committed)
    return EndTxnResponse(error_code=fenced_as(error, ctx.version, 2))


register(ApiKey.END_TXN, 0, 3, handle)
