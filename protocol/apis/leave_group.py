"""LeaveGroup (key 13): versions 0-4, flexible from v4.

v3 leaves several members at once (with group_instance_id); v4 is flexible.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32


class MemberIdentity(Message):
    member_id: Annotated[str, V("3+")] = ""
    group_instance_id: Annotated[str | None, V("3+", nullable="3+")] = None


class LeaveGroupRequest(Message):
    group_id: str = ""
    member_id: Annotated[str, V("0-2")] = ""
    members: Annotated[list[MemberIdentity], V("3+")] = []


class MemberResponse(Message):
    member_id: Annotated[str, V("3+")] = ""
    group_instance_id: Annotated[str | None, V("3+", nullable="3+")] = ""
    error_code: Annotated[i16, V("3+")] = 0


class LeaveGroupResponse(Message):
    throttle_time_ms: Annotated[i32, V("1+")] = 0
    error_code: i16 = 0
    members: Annotated[list[MemberResponse], V("3+")] = []


API = Api(key=ApiKey.LEAVE_GROUP, name="LeaveGroup",
          min_version=0, max_version=4, flexible_from=4,
          request=LeaveGroupRequest, response=LeaveGroupResponse)
