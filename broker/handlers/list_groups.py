"""ListGroups (key 16), versions 0-4.

v3 is flexible; v4 filters by state (states_filter, Kafka's names: "Stable", "Empty", ...; empty
means all). Lists the groups this broker coordinates; COORDINATOR_LOAD_IN_PROGRESS while one of
its offsets partitions is still loading (with the groups already loaded), as Kafka does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.list_groups import ListedGroup, ListGroupsRequest, ListGroupsResponse

from . import register
from ._context import groups_of

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    error, groups = groups_of(ctx.app).list_groups()
    wanted = {s.lower() for s in request.states_filter} if ctx.version >= 4 else set()
    return ListGroupsResponse(error_code=error, groups=[
        ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "",
                    group_state=g.state.value)
        for g in groups if not wanted or g.state.value.lower() in wanted])


register(ApiKey.LIST_GROUPS, 0, 4, handle)
