"""AddPartitionsToTxn (key 24): versions 0-3, flexible from v3.

A transactional producer names the partitions it is about to write to, so the coordinator can
put them in the transaction before the first batch lands. v1 only changes throttling (the
answer goes out before the throttle); v2 allows the PRODUCER_FENCED error; v3 is flexible.
v4+ (KIP-890) turn it into a broker-to-broker call batching several transactions; those
versions are not declared here, so the fields keep Kafka's "v3_and_below" names.
"""

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, i16, i32, i64


class AddPartitionsToTxnTopic(Message):
    name: str = ""
    partitions: list[i32] = []


class AddPartitionsToTxnRequest(Message):
    v3_and_below_transactional_id: str = ""
    v3_and_below_producer_id: i64 = 0
    v3_and_below_producer_epoch: i16 = 0
    v3_and_below_topics: list[AddPartitionsToTxnTopic] = []


class AddPartitionsToTxnPartitionResult(Message):
    partition_index: i32 = 0
    partition_error_code: i16 = 0


class AddPartitionsToTxnTopicResult(Message):
    name: str = ""
    results_by_partition: list[AddPartitionsToTxnPartitionResult] = []


class AddPartitionsToTxnResponse(Message):
    throttle_time_ms: i32 = 0
    results_by_topic_v3_and_below: list[AddPartitionsToTxnTopicResult] = []


API = Api(key=ApiKey.ADD_PARTITIONS_TO_TXN, name="AddPartitionsToTxn",
          min_version=0, max_version=3, flexible_from=3,
          request=AddPartitionsToTxnRequest, response=AddPartitionsToTxnResponse)
