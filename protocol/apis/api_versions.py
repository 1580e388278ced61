"""ApiVersions (key 18): versions 0-3, flexible from v3.

v1 adds throttle_time_ms; v3 is flexible and sends the client's software name and version.
The answer always uses response header v0, and a broker answers a version it does not know with
UNSUPPORTED_VERSION and its ranges in a v0 body (KIP-511).
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class ApiVersionsRequest(Message):
    client_software_name: Annotated[str, V("3+")] = ""
    client_software_version: Annotated[str, V("3+")] = ""


class ApiVersion(Message):
    api_key: i16 = 0
    min_version: i16 = 0
    max_version: i16 = 0


class SupportedFeatureKey(Message):
    name: Annotated[str, V("3+")] = ""
    min_version: Annotated[i16, V("3+")] = 0
    max_version: Annotated[i16, V("3+")] = 0


class FinalizedFeatureKey(Message):
    name: Annotated[str, V("3+")] = ""
    max_version_level: Annotated[i16, V("3+")] = 0
    min_version_level: Annotated[i16, V("3+")] = 0


class ApiVersionsResponse(Message):
    error_code: i16 = 0
    api_keys: list[ApiVersion] = []
    throttle_time_ms: Annotated[i32, V("1+")] = 0
    supported_features: Annotated[list[SupportedFeatureKey], V("3+", tag=0, tagged="3+")] = []
    finalized_features_epoch: Annotated[i64, V("3+", tag=1, tagged="3+")] = -1
    finalized_features: Annotated[list[FinalizedFeatureKey], V("3+", tag=2, tagged="3+")] = []
    zk_migration_ready: Annotated[bool, V("3+", tag=3, tagged="3+")] = False


API = Api(key=ApiKey.API_VERSIONS, name="ApiVersions",
          min_version=0, max_version=3, flexible_from=3,
          request=ApiVersionsRequest, response=ApiVersionsResponse)
