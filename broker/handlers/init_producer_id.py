"""InitProducerId (key 22), versions 0-4.

v2 is flexible; v3 lets a producer name its current id and epoch to bump the epoch (KIP-360);
v4 may be answered PRODUCER_FENCED, older versions get INVALID_PRODUCER_EPOCH for it (KIP-588).

With a transactional id the request goes to the id's transaction coordinator
(txn/coordinator.py): the id's producer id at a new epoch, which fences every earlier producer
of the id. Without one, as Kafka does for idempotent producers, every request gets a new producer
id at epoch 0 (v3's id and epoch included), from producer_ids.ProducerIdAllocator: ids never
repeat, across brokers and restarts. When the next block of ids cannot be reserved on disk (a full
disk) the answer is COORDINATOR_NOT_AVAILABLE, which clients retry (KAFKA_STORAGE_ERROR would be
fatal to Java's and librdkafka's producers here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._context import producer_ids_of, replicas_of, txns_of
from ._txn import fenced_as

if TYPE_CHECKING:
    from ._context import RequestContext



async def handle(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id:
        expected = None
        if ctx.version >= 3 and request.producer_id >= 0:
            expected = (request.producer_id, request.producer_epoch)
        answer = await txns_of(ctx.app).init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, expected)
        return InitProducerIdResponse(error_code=fenced_as(answer.error, ctx.version, 4),
                                      producer_id=answer.producer_id,
                                      producer_epoch=answer.producer_epoch)
    allocator = producer_ids_of(ctx.app)
    try:
        producer_id = allocator.allocate()
    except OSError as exc:  # the next block could not be reserved (a full disk): retriable
        replicas_of(ctx.app).logs.disk.failed(f"producer ids to {allocator.path}", exc)
        return InitProducerIdResponse(error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return InitProducerIdResponse(producer_id=producer_id, producer_epoch=0)


register(ApiKey.INIT_PRODUCER_ID, 0, 4, handle)
