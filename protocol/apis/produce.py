"""Produce (key 0): versions 3-10, flexible from v9.

v3 adds transactional_id and is the first version that carries RecordBatch v2 (the only
format epochlog accepts); v9 is flexible; v10 (KIP-951, leader discovery) answers a partition
refused with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH with the leader the broker knows
(`current_leader`, tagged 0) and that leader's endpoint in the response's `node_endpoints`
(tagged 0), so a client moves without a metadata round trip.

KIP-359: from v9 each partition entry may carry `current_leader_epoch` as tagged field 359
(epochlog's extension; Kafka's own schema has no such field, so clients that do not send it are
unaffected). A leader fences it as it fences Fetch.
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


class LeaderIdAndEpoch(Message, frozen=True):  # type: ignore[misc]
    leader_id: Annotated[i32, V("10+")] = -1
    leader_epoch: Annotated[i32, V("10+")] = -1


class PartitionProduceResponse(Message):
    index: i32 = 0
    error_code: i16 = 0
    base_offset: i64 = 0
    log_append_time_ms: i64 = -1
    log_start_offset: Annotated[i64, V("5+")] = -1
    record_errors: Annotated[list[BatchIndexAndErrorMessage], V("8+")] = []
    error_message: Annotated[str | None, V("8+", nullable="8+")] = None
    current_leader: Annotated[LeaderIdAndEpoch, V("10+", tag=0, tagged="10+")] = \
        LeaderIdAndEpoch()


class TopicProduceResponse(Message):
    name: str = ""
    partition_responses: list[PartitionProduceResponse] = []


class NodeEndpoint(Message):
    node_id: Annotated[i32, V("10+")] = 0
    host: Annotated[str, V("10+")] = ""
    port: Annotated[i32, V("10+")] = 0
    rack: Annotated[str | None, V("10+", nullable="10+")] = None


class ProduceResponse(Message):
    responses: list[TopicProduceResponse] = []
    throttle_time_ms: i32 = 0
    node_endpoints: Annotated[list[NodeEndpoint], V("10+", tag=0, tagged="10+")] = []


API = Api(key=ApiKey.PRODUCE, name="Produce",
          min_version=3, max_version=10, flexible_from=9,
          request=ProduceRequest, response=ProduceResponse)
