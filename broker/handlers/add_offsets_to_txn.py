"""AddOffsetsToTxn (key 25), versions 0-3 (v3 is flexible). v2 may be answered PRODUCER_FENCED;
older versions get INVALID_PRODUCER_EPOCH for it (KIP-588).

A transactional producer about to send its consumer's offsets (TxnOffsetCommit) adds the group's
`__consumer_offsets` partition to its transaction, so that the transaction's marker reaches it
and the offsets take effect with the transaction's records, or not at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from epochlog.protocol.error_codes import ErrorCode

from ..groups.coordinator import OFFSETS_TOPIC
from . import register
from ._context import groups_of, txns_of
from ._txn import fenced_as

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not request.group_id:
        return AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_GROUP_ID)
    offsets_partition = (OFFSETS_TOPIC, groups_of(ctx.app).partition_for(request.group_id))
    error = await txns_of(ctx.app).add_partitions(request.transactional_id, request.producer_id,
                                                  request.producer_epoch, [offsets_partition])
    return AddOffsetsToTxnResponse(error_code=fenced_as(error, ctx.version, 2))


register(ApiKey.ADD_OFFSETS_TO_TXN, 0, 3, handle)
