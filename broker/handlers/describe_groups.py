"""DescribeGroups (key 15), versions 0-5.

v3 include_authorized_operations (no authorizer: every group operation, as Kafka without
one); v4 members'
group_instance_id; v5 is flexible. Per group: its state, protocol type, and while Stable the
selected protocol and each member's metadata and assignment (Kafka shows them only then). A
group this coordinator does not know is "Dead" with no error, as in Kafka; one it does not
coordinate NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)

from . import register
from ._acl_operations import GROUP_OPERATIONS
from ._context import groups_of

if TYPE_CHECKING:
    from ._context import RequestContext


def _describe(ctx: RequestContext, group_id: str) -> DescribedGroup:
    error, group = groups_of(ctx.app).describe(group_id)
    if error or group is None:
        return DescribedGroup(error_code=error, group_id=group_id,
                              group_state="" if error else "Dead")
    state, protocol_type, protocol, members = group.describe()
    return DescribedGroup(
        group_id=group_id, group_state=state, protocol_type=protocol_type,
        protocol_data=protocol, members=[
            DescribedGroupMember(member_id=m.member_id,
                                 group_instance_id=m.group_instance_id if ctx.version >= 4
                                 else None,
                                 client_id=m.client_id, client_host=m.client_host,
                                 member_metadata=metadata, member_assignment=assignment)
            for m, metadata, assignment in members])


async def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    groups = [_describe(ctx, g) for g in request.groups]
    if request.include_authorized_operations:
        for g in groups:
            if not g.error_code:
                g.authorized_operations = GROUP_OPERATIONS
    return DescribeGroupsResponse(groups=groups)


register(ApiKey.DESCRIBE_GROUPS, 0, 5, handle)
