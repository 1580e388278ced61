"""LeaveGroup (key 13), versions 0-4.

v0-2 name one member (its error is the answer's); v3 a batch of members, each by member id
and/or group_instance_id (static members leave by instance id; a member id that does not match
the instance's is FENCED_INSTANCE_ID), each with its own error; v4 is flexible.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberResponse,
)
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._context import groups_of

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    if ctx.version >= 3:
        leaving = [(m.member_id, m.group_instance_id or None) for m in request.members]
    else:
        leaving = [(request.member_id, None)]
    if not request.group_id:
        return LeaveGroupResponse(error_code=ErrorCode.INVALID_GROUP_ID)
    error, errors = groups_of(ctx.app).leave(request.group_id, leaving)
    if ctx.version < 3:
        return LeaveGroupResponse(error_code=error or errors[0])
    return LeaveGroupResponse(error_code=error, members=[
        MemberResponse(member_id=m, group_instance_id=i, error_code=e)
        for (m, i), e in zip(leaving, errors, strict=True)])


register(ApiKey.LEAVE_GROUP, 0, 4, handle)
