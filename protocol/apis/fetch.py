"""Fetch (key 1): versions 4-12, flexible from v12.

v5 adds log_start_offset; v7 fetch sessions; v9 current_leader_epoch (KIP-320); v11 rack_id and
preferred_read_replica (KIP-392); v12 is flexible and adds last_fetched_epoch with the tagged
diverging_epoch answer that followers use to truncate.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, Records, V, i8, i16, i32, i64


class FetchPartition(Message):
    partition: i32 = 0
    current_leader_epoch: Annotated[i32, V("9+")] = -1
    fetch_offset: i64 = 0
    last_fetched_epoch: Annotated[i32, V("12+")] = -1
    log_start_offset: Annotated[i64, V("5+")] = -1
    partition_max_bytes: i32 = 0


class FetchTopic(Message):
    topic: str = ""
    partitions: list[FetchPartition] = []


class ForgottenTopic(Message):
    topic: Annotated[str, V("7+")] = ""
    partitions: Annotated[list[i32], V("7+")] = []


class FetchRequest(Message):
    cluster_id: Annotated[str | None, V("12+", nullable="12+", tag=0, tagged="12+")] = None
    replica_id: i32 = -1
    max_wait_ms: i32 = 0
    min_bytes: i32 = 0
    max_bytes: i32 = 2147483647
    isolation_level: i8 = 0
    session_id: Annotated[i32, V("7+")] = 0
    session_epoch: Annotated[i32, V("7+")] = -1
    topics: list[FetchTopic] = []
    forgotten_topics_data: Annotated[list[ForgottenTopic], V("7+")] = []
    rack_id: Annotated[str, V("11+")] = ""


# Frozen: these values answer tagged fields that are usually absent, so one shared default
# instance serves every partition instead of three new objects per decoded partition.
class EpochEndOffset(Message, frozen=True):  # type: ignore[misc]
    epoch: Annotated[i32, V("12+")] = -1
    end_offset: Annotated[i64, V("12+")] = -1


class LeaderIdAndEpoch(Message, frozen=True):  # type: ignore[misc]
    leader_id: Annotated[i32, V("12+")] = -1
    leader_epoch: Annotated[i32, V("12+")] = -1


class SnapshotId(Message, frozen=True):  # type: ignore[misc]
    end_offset: i64 = -1
    epoch: i32 = -1


class AbortedTransaction(Message):
    producer_id: i64 = 0
    first_offset: i64 = 0


class PartitionData(Message):
    partition_index: i32 = 0
    error_code: i16 = 0
    high_watermark: i64 = 0
    last_stable_offset: i64 = -1
    log_start_offset: Annotated[i64, V("5+")] = -1
    diverging_epoch: Annotated[EpochEndOffset, V("12+", tag=0, tagged="12+")] = EpochEndOffset()
    current_leader: Annotated[LeaderIdAndEpoch, V("12+", tag=1, tagged="12+")] = LeaderIdAndEpoch()
    snapshot_id: Annotated[SnapshotId, V("12+", tag=2, tagged="12+")] = SnapshotId()
    aborted_transactions: Annotated[list[AbortedTransaction] | None, V(nullable="0+")] = []
    preferred_read_replica: Annotated[i32, V("11+")] = -1
    records: Records = None


class FetchableTopicResponse(Message):
    topic: str = ""
    partitions: list[PartitionData] = []


class FetchResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: Annotated[i16, V("7+")] = 0
    session_id: Annotated[i32, V("7+")] = 0
    responses: list[FetchableTopicResponse] = []


API = Api(key=ApiKey.FETCH, name="Fetch",
          min_version=4, max_version=12, flexible_from=12,
          request=FetchRequest, response=FetchResponse)
