"""`BrokerParts`: what the broker's coordinators and background tasks are built from.

The group and transaction coordinators (groups/, txn/), the internal topics they keep their state
in (internal_topics.py) and the ISR task (isr_task.py) sit below the request handlers and above
replication (docs/design.md, "The broker as a stack"). They are given the lower parts they use,
built before them in `broker.app.Broker.start`, rather than the broker itself: so no arrow runs
back up from them to the app, and a reader sees at construction what each one may touch.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from .config import BrokerConfig
from .controller_link import ControllerLink
from .fencing import ControlEpochs
from .fetcher import Spawn
from .metadata_cache import MetadataCache
from .replicas import ReplicaManager


@dataclass(frozen=True)
class BrokerParts:
    broker_id: int
    config: BrokerConfig
    epochs: ControlEpochs  # our generation (the ISR task stamps AlterPartition with it)
    metadata: MetadataCache  # brokers, their endpoints, the cluster's partitions
    replicas: ReplicaManager  # the partitions this broker holds
    controller: ControllerLink  # admin requests (topic creation) and AlterPartition
    spawn: Spawn  # run a coroutine as one of the broker's tasks; its failure stops the broker
    # Dial other brokers' inter-broker listener with this when it is SSL (tls.py); else None.
    inter_broker_tls: ssl.SSLContext | None = None
