"""InitProducerId (key 22), versions 0-4.

v2 is flexible; v3 lets a producer name its current id and epoch to bump the epoch (KIP-360).
Only idempotent producers are served (no transactional id; a transactional id is refused with
INVALID_REQUEST: epochlog has no transaction coordinator). As Kafka does for a producer without a
transactional id, every request gets a new producer id at epoch 0 (v3's id and epoch included),
from producer_ids.ProducerIdAllocator: ids never repeat, across brokers and restarts.
"""

from __future__ import annotations

import logging
from typing import Any

from protocol.apis.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from protocol.error_codes import ErrorCode

from . import register

log = logging.getLogger("epochlog.broker")


async def handle(ctx: Any, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id:
        log.info("InitProducerId from %s refused: transactional id %r (no transactions)",
                 ctx.peer, request.transactional_id)
        return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST)
    return InitProducerIdResponse(producer_id=ctx.app.producer_ids.allocate(), producer_epoch=0)


register(22, 0, 4, handle)
