"""BrokerRegistration (key 62): versions 0-2, flexible. Broker to controller.

A broker (re)joining sends its id, rack, listeners and an incarnation id new at every process
start; the controller answers with the broker's generation (broker_epoch, KIP-380), which strictly
increases at every registration, also across controller restarts. v2 adds previous_broker_epoch
(KIP-966): the generation the process shut down cleanly from, as its clean-shutdown file says,
or -1 after a crash. (v1's is_migrating_zk_broker and v3's log_dirs are declared for the layout;
epochlog sends neither.)

epochlog's extension (issue 33): `replica_capacity`, tagged field 33000 in every version, the
number of replicas the broker can host within its open-files limit (broker/storage/
descriptors.py); the controller places no more on it. -1 (absent: Kafka's brokers, older
epochlog brokers) means no bound. A high tag on purpose: Kafka assigns its own upwards from 0,
and a controller that does not know the tag skips it.
"""

import uuid
from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import ZERO_UUID, Message, V, i16, i32, i64, u16

REPLICA_CAPACITY_TAG = 33000


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
    is_migrating_zk_broker: Annotated[bool, V("1+")] = False
    log_dirs: Annotated[list[uuid.UUID], V("3+")] = []
    previous_broker_epoch: Annotated[i64, V("2+")] = -1
    replica_capacity: Annotated[i32, V("0+", tag=REPLICA_CAPACITY_TAG, tagged="0+")] = -1


class BrokerRegistrationResponse(Message):
    throttle_time_ms: i32 = 0
    error_code: i16 = 0
    broker_epoch: i64 = -1


API = Api(key=ApiKey.BROKER_REGISTRATION, name="BrokerRegistration",
          min_version=0, max_version=2, flexible_from=0,
          request=BrokerRegistrationRequest, response=BrokerRegistrationResponse)
