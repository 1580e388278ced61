"""DeleteGroups (key 42): versions 0-2, flexible from v2.

v1 is v0 with throttling after the response (KIP-219); v2 is flexible.
"""

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, i16, i32


class DeleteGroupsRequest(Message):
    groups_names: list[str] = []


class DeletableGroupResult(Message):
    group_id: str = ""
    error_code: i16 = 0


class DeleteGroupsResponse(Message):
    throttle_time_ms: i32 = 0
    results: list[DeletableGroupResult] = []


API = Api(key=ApiKey.DELETE_GROUPS, name="DeleteGroups",
          min_version=0, max_version=2, flexible_from=2,
          request=DeleteGroupsRequest, response=DeleteGroupsResponse)
