"""BrokerRegistration (key 62): version 0, flexible. Broker to controller.

A broker (re)joining sends its id, rack, listeners and an incarnation id new at every process
start; the controller answers with the broker's generation (broker_epoch, KIP-380), which strictly
increases at every registration, also across controller restarts.
"""

import uuid
from typing import Annotated

from ..api import Api
from ..schema import ZERO_UUID, Message, V, i16, i32, i64, u16


class BrokerRegistrationListener(Message):
    name: str = ""
    host: str = ""
    port: u16 = 0
    security_protocol: i16 = 0


class BrokerRegistrationFeature(Message):
    name: str = ""
    min_supported_version: i16 = 0
    max_supported_version: i16 = 0


class BrokerRegistrationRequest(Message):
    broker_id: i32 = 0
    cluster_id: str = ""
    incarnation_id: uuid.UUID = ZERO_UUID
    listeners: list[BrokerRegistrationListener] = []
    features: list[BrokerRegistrationFeature] = []
    rack: Annotated[str | None, V(nullable="0+")] = None


class BrokerRegistrationResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0
    broker_epoch: i64 = -1


API = Api(key=62, name="BrokerRegistration", min_version=0, max_version=0, flexible_from=0,
          request=BrokerRegistrationRequest, response=BrokerRegistrationResponse)
