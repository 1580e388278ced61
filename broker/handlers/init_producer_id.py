"""InitProducerId (key 22), versions 0-4.

v2 is flexible; v3 lets a producer name its current id and epoch to bump the epoch (KIP-360).
Only idempotent producers are served (no transactional id; a transactional id is refused with
INVALID_REQUEST: epochlog has no transaction coordinator). As Kafka does for a producer without a
transactional id, every request gets a new producer id at epoch 0 (v3's id and epoch included),
from producer_ids.ProducerIdAllocator: ids never repeat, across brokers and restarts. When the
next block of ids cannot be reserved on disk (a full disk) the answer is COORDINATOR_NOT_AVAILABLE,
which clients retry (KAFKA_STORAGE_ERROR would be fatal to Java's and librdkafka's producers here).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from epochlog.protocol.error_codes import ErrorCode

from ..broker_app import producer_ids_of, replicas_of
from . import register

if TYPE_CHECKING:
    from ..server import RequestContext

log = logging.getLogger("epochlog.broker")


async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id:
        log.info("InitProducerId from %s refused: transactional id %r (no transactions)",
                 ctx.peer, request.transactional_id)
        return InitProducerIdResponse(error_code=ErrorCode.INVALID_REQUEST)
    allocator = producer_ids_of(ctx.app)
    try:
        producer_id = allocator.allocate()
    except OSError as exc:  # the next block could not be reserved (a full disk): retriable
        replicas_of(ctx.app).logs.disk.failed(f"producer ids to {allocator.path}", exc)
        return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)


register(ApiKey.INIT_PRODUCER_ID, 0, 4, handle)
