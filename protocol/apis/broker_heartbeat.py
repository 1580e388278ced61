"""BrokerHeartbeat (key 63): versions 0-1, flexible. Broker to controller.

Keeps a broker's session alive for the generation (broker_epoch) it names; a heartbeat for an old
generation is refused with STALE_BROKER_EPOCH. want_shut_down starts a controlled shutdown; the
answer says whether the broker is fenced and whether it may now stop.

v1 adds offline_log_dirs (tagged, tag 0): the broker's log directories that failed. epochlog
takes a replica offline per partition, not per directory (KIP-858's directories, one for each
partition here): each partition's log directory is named by `replica_dir_id(topic, partition)`,
which the controller computes the same way, and every heartbeat lists all that are offline.
"""

import uuid
from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64

# The namespace of partition directory ids (uuid5, so that broker and controller agree).
_REPLICA_DIRS = uuid.UUID("7b0c6d0e-5f37-4e0a-9a4c-2f1f3c1e8d51")


def replica_dir_id(topic: str, partition: int) -> uuid.UUID:
    """The id a heartbeat's offline_log_dirs names the log of topic-partition by."""
    return uuid.uuid5(_REPLICA_DIRS, f"{topic}\x00{partition}")


class BrokerHeartbeatRequest(Message):
    broker_id: i32 = 0
    broker_epoch: i64 = -1
    current_metadata_offset: i64 = 0
    want_fence: bool = False
    want_shut_down: bool = False
    offline_log_dirs: Annotated[list[uuid.UUID], V("1+", tag=0, tagged="1+")] = []


class BrokerHeartbeatResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


API = Api(key=ApiKey.BROKER_HEARTBEAT, name="BrokerHeartbeat",
          min_version=0, max_version=1, flexible_from=0,
          request=BrokerHeartbeatRequest, response=BrokerHeartbeatResponse)
