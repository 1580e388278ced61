"""JoinGroup (key 11), versions 0-7.

v0 has no rebalance timeout (the session timeout serves as one, as in Kafka); v1 adds it; v4 new
members get MEMBER_ID_REQUIRED with their id and must join again with it; v5 group_instance_id
(static membership, FENCED_INSTANCE_ID); v6 is flexible; v7 answers protocol_type and a
nullable protocol_name. The request waits (parked) until the group's join phase ends
(broker/groups/state.py); the leader's answer lists the members and their metadata.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.join_group import (
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from epochlog.protocol.error_codes import ErrorCode

from ..groups.state import JoinRequest
from . import register
from ._context import groups_of
from ._groups import client_host, client_id, instance_id

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    v = ctx.version
    if not request.group_id:
        return JoinGroupResponse(error_code=ErrorCode.INVALID_GROUP_ID,
                                 member_id=request.member_id,
                                 protocol_name=None if v >= 7 else "")
    rebalance_ms = request.rebalance_timeout_ms if v >= 1 else request.session_timeout_ms
    join = JoinRequest(
        member_id=request.member_id, group_instance_id=instance_id(ctx, request.group_instance_id,
                                                                   5),
        client_id=client_id(ctx), client_host=client_host(ctx),
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=rebalance_ms if rebalance_ms > 0 else request.session_timeout_ms,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, p.metadata) for p in request.protocols),
        require_known_member_id=v >= 4)
    result = await groups_of(ctx.app).join(request.group_id, join)
    name = result.protocol_name
    return JoinGroupResponse(
        error_code=result.error, generation_id=result.generation,
        protocol_type=result.protocol_type if v >= 7 else None,
        protocol_name=name if v >= 7 else (name or ""), leader=result.leader,
        member_id=result.member_id,
        members=[JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=meta)
                 for m, i, meta in result.members])


register(ApiKey.JOIN_GROUP, 0, 7, handle)
