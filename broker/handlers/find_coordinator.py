"""FindCoordinator (key 10), versions 0-4.

v1 adds key_type (0 group, 1 transaction); v3 is flexible; v4 batches keys (coordinator_keys)
and answers one entry per key. Another key type gets INVALID_REQUEST.

The coordinator of a group is the leader of its `__consumer_offsets` partition, that of a
transactional id the leader of its `__transaction_state` partition (Kafka's abs(hashCode) %
partitions; broker/internal_topics.py). The first lookup creates the topic through the controller
and waits briefly for it; COORDINATOR_NOT_AVAILABLE (retriable) while the topic or the partition's
leader is not there yet. The answer gives the leader's address on the listener the request came
in on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.find_coordinator import (
    Coordinator,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._context import groups_of, txns_of

if TYPE_CHECKING:
    from ._context import RequestContext

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1


async def _one(ctx: RequestContext, key: str, key_type: int) -> Coordinator:
    if key_type == KEY_TYPE_GROUP:
        found = await groups_of(ctx.app).find(key, ctx.listener)
    elif key_type == KEY_TYPE_TRANSACTION:
        found = await txns_of(ctx.app).find(key, ctx.listener)
    else:
        return Coordinator(key=key, node_id=-1, host="", port=-1,
                           error_code=ErrorCode.INVALID_REQUEST,
                           error_message=f"key type {key_type}: 0 (group) or 1 (transaction)")
    error, node_id, host, port = found
    return Coordinator(key=key, node_id=node_id, host=host, port=port, error_code=error,
                       error_message=None)


async def handle(ctx: RequestContext, request: FindCoordinatorRequest) -> FindCoordinatorResponse:
    key_type = request.key_type if ctx.version >= 1 else KEY_TYPE_GROUP
    if ctx.version >= 4:
        return FindCoordinatorResponse(coordinators=[
            await _one(ctx, key, key_type) for key in request.coordinator_keys])
    one = await _one(ctx, request.key, key_type)
    return FindCoordinatorResponse(error_code=one.error_code, error_message=one.error_message,
                                   node_id=one.node_id, host=one.host, port=one.port)


register(ApiKey.FIND_COORDINATOR, 0, 4, handle)
