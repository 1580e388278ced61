"""DescribeGroups (key 15), versions 0-5.

v3 include_authorized_operations (no ACLs here: the "unknown" sentinel is answered); v4 members'
group_instance_id; v5 is flexible. Per group: its state, protocol type, and while Stable the
selected protocol and each member's metadata and assignment (Kafka shows them only then). A
group this coordinator does not know is "Dead" with no error, as in Kafka; one it does not
coordinate NOT_COORDINATOR.
"""

from __future__ import annotations

from typing import Any

from protocol.apis.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)

from . import register


def _describe(ctx: Any, group_id: str) -> DescribedGroup:
    error, group = ctx.app.groups.describe(group_id)
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


async def handle(ctx: Any, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    return DescribeGroupsResponse(groups=[_describe(ctx, g) for g in request.groups])


register(15, 0, 5, handle)
