"""InitProducerId (key 22): versions 0-4, flexible from v2.

v2 is flexible; v3 lets a producer bump its epoch with producer_id and producer_epoch.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class InitProducerIdRequest(Message):
    transactional_id: Annotated[str | None, V(nullable="0+")] = ""
    transaction_timeout_ms: i32 = 0
    producer_id: Annotated[i64, V("3+")] = -1
    producer_epoch: Annotated[i16, V("3+")] = -1


class InitProducerIdResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0
    producer_id: i64 = -1
    producer_epoch: i16 = 0


API = Api(key=ApiKey.INIT_PRODUCER_ID, name="InitProducerId",
          min_version=0, max_version=4, flexible_from=2,
          request=InitProducerIdRequest, response=InitProducerIdResponse)
