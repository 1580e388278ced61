"""JoinGroup (key 11): versions 0-7, flexible from v6.

v1 adds rebalance_timeout_ms; v4 MEMBER_ID_REQUIRED for new members; v5 group_instance_id
(static membership); v6 is flexible; v7 protocol_type and protocol_name in the answer.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32


class JoinGroupRequestProtocol(Message):
    name: str = ""
    metadata: bytes = b""


class JoinGroupRequest(Message):
    group_id: str = ""
    session_timeout_ms: i32 = 0
    rebalance_timeout_ms: Annotated[i32, V("1+")] = -1
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("5+", nullable="5+")] = None
    protocol_type: str = ""
    protocols: list[JoinGroupRequestProtocol] = []


class JoinGroupResponseMember(Message):
    member_id: str = ""
    group_instance_id: Annotated[str | None, V("5+", nullable="5+")] = None
    metadata: bytes = b""


class JoinGroupResponse(Message):
    throttle_time_ms: Annotated[i32, V("2+")] = 0
    error_code: i16 = 0
    generation_id: i32 = -1
    protocol_type: Annotated[str | None, V("7+", nullable="7+")] = None
    protocol_name: Annotated[str | None, V(nullable="7+")] = ""
    leader: str = ""
    member_id: str = ""
    members: list[JoinGroupResponseMember] = []


API = Api(key=ApiKey.JOIN_GROUP, name="JoinGroup",
          min_version=0, max_version=7, flexible_from=6,
          request=JoinGroupRequest, response=JoinGroupResponse)
