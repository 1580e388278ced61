"""DeleteGroups (key 42), versions 0-2.

v1 only changes throttling; v2 is flexible. Per group: GROUP_ID_NOT_FOUND for a group this
coordinator does not hold, NON_EMPTY_GROUP while it has members, NOT_COORDINATOR or
COORDINATOR_LOAD_IN_PROGRESS as for any group request; otherwise the group and its committed
offsets are removed (tombstones in `__consumer_offsets`, replicated before the answer).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.delete_groups import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)

from . import register
from ._context import groups_of

if TYPE_CHECKING:
    from ._context import RequestContext


async def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    results = await groups_of(ctx.app).delete_groups(request.groups_names)
    return DeleteGroupsResponse(results=[
        DeletableGroupResult(group_id=group_id, error_code=error)
        for group_id, error in results.items()])


register(ApiKey.DELETE_GROUPS, 0, 2, handle)
