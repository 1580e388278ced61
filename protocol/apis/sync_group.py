"""SyncGroup (key 14): versions 0-5, flexible from v4.

v3 adds group_instance_id; v4 is flexible; v5 protocol_type and protocol_name.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32


class SyncGroupRequestAssignment(Message):
    member_id: str = ""
    assignment: bytes = b""


class SyncGroupRequest(Message):
    group_id: str = ""
    generation_id: i32 = 0
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("3+", nullable="3+")] = None
    protocol_type: Annotated[str | None, V("5+", nullable="5+")] = None
    protocol_name: Annotated[str | None, V("5+", nullable="5+")] = None
    assignments: list[SyncGroupRequestAssignment] = []


class SyncGroupResponse(Message):
    throttle_time_ms: Annotated[i32, V("1+")] = 0
    error_code: i16 = 0
    protocol_type: Annotated[str | None, V("5+", nullable="5+")] = None
    protocol_name: Annotated[str | None, V("5+", nullable="5+")] = None
    assignment: bytes = b""


API = Api(key=ApiKey.SYNC_GROUP, name="SyncGroup",
          min_version=0, max_version=5, flexible_from=4,
          request=SyncGroupRequest, response=SyncGroupResponse)
