"""ListGroups (key 16), versions 0-4.

v3 is flexible; v4 filters by state (states_filter, Kafka's names: "Stable", "Empty", ...; empty
means all). Lists the groups this broker coordinates; COORDINATOR_LOAD_IN_PROGRESS while one of
its offsets partitions is still loading (with the groups already loaded), as Kafka does.
"""

from __future__ import annotations

from typing import Any

from protocol.apis.list_groups import ListedGroup, ListGroupsRequest, ListGroupsResponse

from . import register


async def handle(ctx: Any, request: ListGroupsRequest) -> ListGroupsResponse:
    error, groups = ctx.app.groups.list_groups()
    wanted = {s.lower() for s in request.states_filter} if ctx.version >= 4 else set()
    return ListGroupsResponse(error_code=error, groups=[
        ListedGroup(group_id=g.group_id, protocol_type=g.protocol_type or "",
                    group_state=g.state.value)
        for g in groups if not wanted or g.state.value.lower() in wanted])


register(16, 0, 4, handle)
