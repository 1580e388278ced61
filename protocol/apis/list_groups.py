"""ListGroups (key 16): versions 0-4, flexible from v3.

v3 is flexible; v4 filters by state.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32


class ListGroupsRequest(Message):
    states_filter: Annotated[list[str], V("4+")] = []


class ListedGroup(Message):
    group_id: str = ""
    protocol_type: str = ""
    group_state: Annotated[str, V("4+")] = ""


class ListGroupsResponse(Message):
    throttle_time_ms: Annotated[i32, V("1+")] = 0
    error_code: i16 = 0
    groups: list[ListedGroup] = []


API = Api(key=ApiKey.LIST_GROUPS, name="ListGroups",
          min_version=0, max_version=4, flexible_from=3,
          request=ListGroupsRequest, response=ListGroupsResponse)
