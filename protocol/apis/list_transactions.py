"""ListTransactions (key 66): versions 0-1, flexible (KIP-664).

The transactions a coordinator holds, optionally filtered by state and producer id; the answer
names the state filters it did not recognise. v1 adds duration_filter (KIP-994): only
transactions open longer than that many milliseconds (-1: no filter). (v2's transactional id
pattern is not declared.)
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class ListTransactionsRequest(Message):
    state_filters: list[str] = []
    producer_id_filters: list[i64] = []
    duration_filter: Annotated[i64, V("1+")] = -1


class TransactionState(Message):
    transactional_id: str = ""
    producer_id: i64 = 0
    transaction_state: str = ""


class ListTransactionsResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0
    unknown_state_filters: list[str] = []
    transaction_states: list[TransactionState] = []


API = Api(key=ApiKey.LIST_TRANSACTIONS, name="ListTransactions",
          min_version=0, max_version=1, flexible_from=0,
          request=ListTransactionsRequest, response=ListTransactionsResponse)
