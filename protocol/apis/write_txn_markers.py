"""WriteTxnMarkers (key 27): versions 0-1, flexible from v1.

The transaction coordinator asks partition leaders to append commit or abort markers
(transaction_result true = commit) for a producer's transaction; each leader answers per
partition. v1 is flexible and otherwise the same as v0 (Kafka 4.0 dropped v0 and kept the
same fields). v2 adds a per-marker transaction_version; it is not declared.
"""

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, i16, i32, i64


class WritableTxnMarkerTopic(Message):
    name: str = ""
    partition_indexes: list[i32] = []


class WritableTxnMarker(Message):
    producer_id: i64 = 0
    producer_epoch: i16 = 0
    transaction_result: bool = False
    topics: list[WritableTxnMarkerTopic] = []
    coordinator_epoch: i32 = 0


class WriteTxnMarkersRequest(Message):
    markers: list[WritableTxnMarker] = []


class WritableTxnMarkerPartitionResult(Message):
    partition_index: i32 = 0
    error_code: i16 = 0


class WritableTxnMarkerTopicResult(Message):
    name: str = ""
    partitions: list[WritableTxnMarkerPartitionResult] = []


class WritableTxnMarkerResult(Message):
    producer_id: i64 = 0
    topics: list[WritableTxnMarkerTopicResult] = []


class WriteTxnMarkersResponse(Message):
    markers: list[WritableTxnMarkerResult] = []


API = Api(key=ApiKey.WRITE_TXN_MARKERS, name="WriteTxnMarkers",
          min_version=0, max_version=1, flexible_from=1,
          request=WriteTxnMarkersRequest, response=WriteTxnMarkersResponse)
