"""DescribeConfigs (key 32): versions 1-4, flexible from v4.

v1 adds synonyms; v3 config type and documentation; v4 is flexible.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i8, i16, i32


class DescribeConfigsResource(Message):
    resource_type: i8 = 0
    resource_name: str = ""
    configuration_keys: Annotated[list[str] | None, V(nullable="0+")] = []


class DescribeConfigsRequest(Message):
    resources: list[DescribeConfigsResource] = []
    include_synonyms: bool = False
    include_documentation: Annotated[bool, V("3+")] = False


class DescribeConfigsSynonym(Message):
    name: str = ""
    value: Annotated[str | None, V(nullable="0+")] = ""
    source: i8 = 0


class DescribeConfigsResourceResult(Message):
    name: str = ""
    value: Annotated[str | None, V(nullable="0+")] = ""
    read_only: bool = False
    config_source: i8 = -1
    is_sensitive: bool = False
    synonyms: list[DescribeConfigsSynonym] = []
    config_type: Annotated[i8, V("3+")] = 0
    documentation: Annotated[str | None, V("3+", nullable="0+")] = ""


class DescribeConfigsResult(Message):
    error_code: i16 = 0
    error_message: Annotated[str | None, V(nullable="0+")] = ""
    resource_type: i8 = 0
    resource_name: str = ""
    configs: list[DescribeConfigsResourceResult] = []


class DescribeConfigsResponse(Message):
    throttle_time_ms: i32 = 0
    results: list[DescribeConfigsResult] = []


API = Api(key=ApiKey.DESCRIBE_CONFIGS, name="DescribeConfigs",
          min_version=1, max_version=4, flexible_from=4,
          request=DescribeConfigsRequest, response=DescribeConfigsResponse)
