"""EndTxn (key 26): versions 0-3, flexible from v3.

A transactional producer asks its coordinator to commit (committed=true) or abort the open
transaction. v1 only changes throttling (the answer goes out before the throttle); v2 allows
the PRODUCER_FENCED error; v3 is flexible. (v4 only allows a new error, v5 returns a bumped
producer id and epoch; neither is declared.)
"""

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, i16, i32, i64


class EndTxnRequest(Message):
    transactional_id: str = ""
    producer_id: i64 = 0
    producer_epoch: i16 = 0
    committed: bool = False


class EndTxnResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0


API = Api(key=ApiKey.END_TXN, name="EndTxn",
          min_version=0, max_version=3, flexible_from=3,
          request=EndTxnRequest, response=EndTxnResponse)
