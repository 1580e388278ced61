"""BrokerHeartbeat (key 63): version 0, flexible. Broker to controller.

Keeps a broker's session alive for the generation (broker_epoch) it names; a heartbeat for an old
generation is refused with STALE_BROKER_EPOCH. want_shut_down starts a controlled shutdown; the
answer says whether the broker is fenced and whether it may now stop.
"""

from ..api import Api
from ..schema import Message, i16, i32, i64


class BrokerHeartbeatRequest(Message):
    broker_id: i32 = 0
    broker_epoch: i64 = -1
    current_metadata_offset: i64 = 0
    want_fence: bool = False
    want_shut_down: bool = False


class BrokerHeartbeatResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False


API = Api(key=63, name="BrokerHeartbeat", min_version=0, max_version=0, flexible_from=0,
          request=BrokerHeartbeatRequest, response=BrokerHeartbeatResponse)
