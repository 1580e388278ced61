"""DescribeTransactions (key 65): version 0, flexible (KIP-664).

What a transaction coordinator knows of each named transactional id: its state, timeout,
start time, producer id and epoch, and the partitions in the open transaction.
"""

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, i16, i32, i64


class DescribeTransactionsRequest(Message):
    transactional_ids: list[str] = []


class TopicData(Message):
    topic: str = ""
    partitions: list[i32] = []


class TransactionState(Message):
    error_code: i16 = 0
    transactional_id: str = ""
    transaction_state: str = ""
    transaction_timeout_ms: i32 = 0
    transaction_start_time_ms: i64 = 0
    producer_id: i64 = 0
    producer_epoch: i16 = 0
    topics: list[TopicData] = []


class DescribeTransactionsResponse(Message):
    throttle_time_ms: i32 = 0
    transaction_states: list[TransactionState] = []


API = Api(key=ApiKey.DESCRIBE_TRANSACTIONS, name="DescribeTransactions",
          min_version=0, max_version=0, flexible_from=0,
          request=DescribeTransactionsRequest, response=DescribeTransactionsResponse)
