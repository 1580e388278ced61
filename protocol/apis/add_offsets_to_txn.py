"""AddOffsetsToTxn (key 25): versions 0-3, flexible from v3.

A transactional producer about to commit a group's offsets in its transaction tells its
coordinator which group, so the group's offsets partition joins the transaction. v1 only
changes throttling (the answer goes out before the throttle); v2 allows the PRODUCER_FENCED
error; v3 is flexible.
"""

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, i16, i32, i64


class AddOffsetsToTxnRequest(Message):
    transactional_id: str = ""
    producer_id: i64 = 0
    producer_epoch: i16 = 0
    group_id: str = ""


class AddOffsetsToTxnResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0


API = Api(key=ApiKey.ADD_OFFSETS_TO_TXN, name="AddOffsetsToTxn",
          min_version=0, max_version=3, flexible_from=3,
          request=AddOffsetsToTxnRequest, response=AddOffsetsToTxnResponse)
