"""ControlledShutdown (key 7): versions 1-3, flexible from v3. Broker to controller.

v2 carries broker_epoch (KIP-380): a request retried from a broker's previous generation is
refused with STALE_BROKER_EPOCH. The answer lists the partitions the broker still leads; the
broker asks again until that list is empty, then stops.
"""

from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import Message, V, i16, i32, i64


class ControlledShutdownRequest(Message):
    broker_id: i32 = 0
    broker_epoch: Annotated[i64, V("2+")] = -1


class RemainingPartition(Message):
    topic_name: str = ""
    partition_index: i32 = 0


class ControlledShutdownResponse(Message):
    error_code: i16 = 0
    remaining_partitions: list[RemainingPartition] = []


API = Api(key=ApiKey.CONTROLLED_SHUTDOWN, name="ControlledShutdown",
          min_version=1, max_version=3, flexible_from=3,
          request=ControlledShutdownRequest, response=ControlledShutdownResponse)
