"""Heartbeat (key 12), versions 0-4.

v3 adds group_instance_id; v4 is flexible. Keeps a member's session; REBALANCE_IN_PROGRESS
tells it to rejoin; UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION and FENCED_INSTANCE_ID as Kafka.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.heartbeat import HeartbeatRequest, HeartbeatResponse
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._context import groups_of
from ._groups import instance_id

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    if not request.group_id:
        return HeartbeatResponse(error_code=ErrorCode.INVALID_GROUP_ID)
    return HeartbeatResponse(error_code=groups_of(ctx.app).heartbeat(
        request.group_id, request.generation_id, request.member_id,
        instance_id(ctx, request.group_instance_id, 3)))


register(ApiKey.HEARTBEAT, 0, 4, handle)
