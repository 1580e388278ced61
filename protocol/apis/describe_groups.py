"""DescribeGroups (key 15): versions 0-5, flexible from v5.

v3 adds authorized operations; v4 group_instance_id of members; v5 is flexible.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32


class DescribeGroupsRequest(Message):
    groups: list[str] = []
    include_authorized_operations: Annotated[bool, V("3+")] = False


class DescribedGroupMember(Message):
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("4+", nullable="4+")] = None
    client_id: str = ""
    client_host: str = ""
    member_metadata: bytes = b""
    member_assignment: bytes = b""


class DescribedGroup(Message):
    error_code: i16 = 0
    group_id: str = ""
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedGroupMember] = []
    authorized_operations: Annotated[i32, V("3+")] = -2147483648


class DescribeGroupsResponse(Message):
    throttle_time_ms: Annotated[i32, V("1+")] = 0
    groups: list[DescribedGroup] = []


API = Api(key=ApiKey.DESCRIBE_GROUPS, name="DescribeGroups",
          min_version=0, max_version=5, flexible_from=5,
          request=DescribeGroupsRequest, response=DescribeGroupsResponse)
