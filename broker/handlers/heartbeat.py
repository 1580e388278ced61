"""Heartbeat (key 12), versions 0-4.

v3 adds group_instance_id; v4 is flexible. Keeps a member's session; REBALANCE_IN_PROGRESS
tells it to rejoin; UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION and FENCED_INSTANCE_ID as Kafka.
"""

from __future__ import annotations

from typing import Any

from protocol.apis.heartbeat import HeartbeatRequest, HeartbeatResponse
from protocol.error_codes import ErrorCode

from . import register
from ._groups import instance_id


async def handle(ctx: Any, request: HeartbeatRequest) -> HeartbeatResponse:
    if not request.group_id:
        return HeartbeatResponse(error_code=ErrorCode.INVALID_GROUP_ID)
    return HeartbeatResponse(error_code=ctx.app.groups.heartbeat(
        request.group_id, request.generation_id, request.member_id,
        instance_id(ctx, request.group_instance_id, 3)))


register(12, 0, 4, handle)
