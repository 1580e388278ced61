"""Heartbeat (key 12): versions 0-4, flexible from v4.

v3 adds group_instance_id; v4 is flexible.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32


class HeartbeatRequest(Message):
    group_id: str = ""
    generation_id: i32 = 0
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("3+", nullable="3+")] = None


class HeartbeatResponse(Message):
    throttle_time_ms: Annotated[i32, V("1+")] = 0
    error_code: i16 = 0


API = Api(key=ApiKey.HEARTBEAT, name="Heartbeat",
          min_version=0, max_version=4, flexible_from=4,
          request=HeartbeatRequest, response=HeartbeatResponse)
