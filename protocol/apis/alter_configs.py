"""AlterConfigs (key 33): versions 0-2, flexible from v2.

Replaces a resource's settings with those given (a null value: back to the default). v1 only
changes throttling; v2 is flexible.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i8, i16, i32


class AlterableConfig(Message):
    name: str = ""
    value: Annotated[str | None, V(nullable="0+")] = None


class AlterConfigsResource(Message):
    resource_type: i8 = 0
    resource_name: str = ""
    configs: list[AlterableConfig] = []


class AlterConfigsRequest(Message):
    resources: list[AlterConfigsResource] = []
    validate_only: bool = False


class AlterConfigsResourceResponse(Message):
    error_code: i16 = 0
    error_message: Annotated[str | None, V(nullable="0+")] = None
    resource_type: i8 = 0
    resource_name: str = ""


class AlterConfigsResponse(Message):
    throttle_time_ms: i32 = 0
    responses: list[AlterConfigsResourceResponse] = []


API = Api(key=ApiKey.ALTER_CONFIGS, name="AlterConfigs",
          min_version=0, max_version=2, flexible_from=2,
          request=AlterConfigsRequest, response=AlterConfigsResponse)
