"""FindCoordinator (key 10): versions 0-4, flexible from v3.

v1 adds key_type (group or transaction); v3 is flexible; v4 batches coordinator keys.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i8, i16, i32


class FindCoordinatorRequest(Message):
    key: Annotated[str, V("0-3")] = ""
    key_type: Annotated[i8, V("1+")] = 0
    coordinator_keys: Annotated[list[str], V("4+")] = []


class Coordinator(Message):
    key: Annotated[str, V("4+")] = ""
    node_id: Annotated[i32, V("4+")] = 0
    host: Annotated[str, V("4+")] = ""
    port: Annotated[i32, V("4+")] = 0
    error_code: Annotated[i16, V("4+")] = 0
    error_message: Annotated[str | None, V("4+", nullable="4+")] = ""


class FindCoordinatorResponse(Message):
    throttle_time_ms: Annotated[i32, V("1+")] = 0
    error_code: Annotated[i16, V("0-3")] = 0
    error_message: Annotated[str | None, V("1-3", nullable="1-3")] = ""
    node_id: Annotated[i32, V("0-3")] = 0
    host: Annotated[str, V("0-3")] = ""
    port: Annotated[i32, V("0-3")] = 0
    coordinators: Annotated[list[Coordinator], V("4+")] = []


API = Api(key=ApiKey.FIND_COORDINATOR, name="FindCoordinator",
          min_version=0, max_version=4, flexible_from=3,
          request=FindCoordinatorRequest, response=FindCoordinatorResponse)
