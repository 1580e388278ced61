"""Produce (key 0): versions 3-9, flexible from v9.

v3 adds transactional_id and is the first version that carries RecordBatch v2 (the only
format epochlog accepts); v9 is flexible. KIP-359: from v9 each partition entry may carry
`current_leader_epoch` as tagged field 359 (epochlog's extension; Kafka's own schema has no such
field, so clients that do not send it are unaffected). A leader fences it as it fences Fetch.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, Records, V, i16, i32, i64

# Tag number of epochlog's KIP-359 field. High on purpose: Kafka assigns its own tags upwards
# from 0.
CURRENT_LEADER_EPOCH_TAG = 359


class PartitionProduceData(Message):
    index: i32 = 0
    records: Records = None
    # KIP-359: the leader epoch the producer believes current; -1 (absent) skips the check.
    current_leader_epoch: Annotated[i32, V("9+", tag=CURRENT_LEADER_EPOCH_TAG, tagged="9+")] = -1


class TopicProduceData(Message):
    name: str = ""
    partition_data: list[PartitionProduceData] = []


class ProduceRequest(Message):
    transactional_id: Annotated[str | None, V(nullable="0+")] = None
    acks: i16 = 0
    timeout_ms: i32 = 0
    topic_data: list[TopicProduceData] = []


class BatchIndexAndErrorMessage(Message):
    batch_index: Annotated[i32, V("8+")] = 0
    batch_index_error_message: Annotated[str | None, V("8+", nullable="8+")] = None


class PartitionProduceResponse(Message):
    index: i32 = 0
    error_code: i16 = 0
    base_offset: i64 = 0
    log_append_time_ms: i64 = -1
    log_start_offset: Annotated[i64, V("5+")] = -1
    record_errors: Annotated[list[BatchIndexAndErrorMessage], V("8+")] = []
    error_message: Annotated[str | None, V("8+", nullable="8+")] = None


class TopicProduceResponse(Message):
    name: str = ""
    partition_responses: list[PartitionProduceResponse] = []


class ProduceResponse(Message):
    responses: list[TopicProduceResponse] = []
    throttle_time_ms: i32 = 0


API = Api(key=ApiKey.PRODUCE, name="Produce",
          min_version=3, max_version=9, flexible_from=9,
          request=ProduceRequest, response=ProduceResponse)
