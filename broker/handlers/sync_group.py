"""SyncGroup (key 14), versions 0-5.

v3 adds group_instance_id; v4 is flexible; v5 protocol_type and protocol_name, checked against
the group's (INCONSISTENT_GROUP_PROTOCOL) and answered. The leader sends every member's
assignment; it is stored in `__consumer_offsets` (replicated) before anyone is answered. Other
members' requests wait (parked) for that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.sync_group import SyncGroupRequest, SyncGroupResponse
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._context import groups_of
from ._groups import instance_id

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    v = ctx.version
    if not request.group_id:
        return SyncGroupResponse(error_code=ErrorCode.INVALID_GROUP_ID)
    result = await groups_of(ctx.app).sync(
        request.group_id, request.generation_id, request.member_id,
        instance_id(ctx, request.group_instance_id, 3),
        request.protocol_type if v >= 5 else None, request.protocol_name if v >= 5 else None,
        [(a.member_id, a.assignment) for a in request.assignments])
    return SyncGroupResponse(
        error_code=result.error, assignment=result.assignment,
        protocol_type=result.protocol_type if v >= 5 else None,
        protocol_name=result.protocol_name if v >= 5 else None)


register(ApiKey.SYNC_GROUP, 0, 5, handle)
