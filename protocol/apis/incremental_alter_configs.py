"""IncrementalAlterConfigs (key 44): versions 0-1, flexible from v1 (KIP-339).

Each setting carries its operation: 0 SET, 1 DELETE (back to the default), 2 APPEND and 3
SUBTRACT (list settings only); settings not named keep their values. Each resource's answer has
AlterConfigs' layout, so its message is shared.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i8, i32
from .alter_configs import AlterConfigsResourceResponse


class AlterableConfig(Message):
    name: str = ""
    config_operation: i8 = 0
    value: Annotated[str | None, V(nullable="0+")] = None


class AlterConfigsResource(Message):
    resource_type: i8 = 0
    resource_name: str = ""
    configs: list[AlterableConfig] = []


class IncrementalAlterConfigsRequest(Message):
    resources: list[AlterConfigsResource] = []
    validate_only: bool = False


class IncrementalAlterConfigsResponse(Message):
    throttle_time_ms: i32 = 0
    responses: list[AlterConfigsResourceResponse] = []


API = Api(key=ApiKey.INCREMENTAL_ALTER_CONFIGS, name="IncrementalAlterConfigs",
          min_version=0, max_version=1, flexible_from=1,
          request=IncrementalAlterConfigsRequest, response=IncrementalAlterConfigsResponse)
