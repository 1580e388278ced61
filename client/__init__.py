"""epochlog's asyncio client library: Producer, Consumer and Admin, against epochlog or any Kafka.

    from epochlog.client import Producer, Consumer, Admin, TopicPartition, LogTruncationError

(the same names are importable from `epochlog` itself). Its connection layer
(epochlog.client.connection) is also used by brokers and the controller, so the names here load on
first use: a broker importing the connection layer does not load the producer and consumer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .admin import Admin as Admin
    from .admin import AlterConfigOp as AlterConfigOp
    from .admin import ConfigResource as ConfigResource
    from .admin import NewTopic as NewTopic
    from .consumer import Consumer as Consumer
    from .errors import BufferFullError as BufferFullError
    from .errors import FencedLeaderEpochError as FencedLeaderEpochError
    from .errors import KafkaConnectionError as KafkaConnectionError
    from .errors import KafkaError as KafkaError
    from .errors import KafkaTimeoutError as KafkaTimeoutError
    from .errors import LogTruncationError as LogTruncationError
    from .errors import NotLeaderOrFollowerError as NotLeaderOrFollowerError
    from .errors import ProducerClosedError as ProducerClosedError
    from .errors import RecordTooLargeError as RecordTooLargeError
    from .errors import UnknownLeaderEpochError as UnknownLeaderEpochError
    from .errors import error_class as error_class
    from .group import CommitFailedError as CommitFailedError
    from .group import RebalanceListener as RebalanceListener
    from .producer import DeliveryFuture as DeliveryFuture
    from .producer import Producer as Producer
    from .security import create_ssl_context as create_ssl_context
    from .types import FetchedBatch as FetchedBatch
    from .types import RecordMetadata as RecordMetadata
    from .types import TopicPartition as TopicPartition

# name -> the module of this package that defines it
_EXPORTS = {
    "Admin": "admin", "AlterConfigOp": "admin", "ConfigResource": "admin", "NewTopic": "admin",
    "Consumer": "consumer",
    "CommitFailedError": "group", "RebalanceListener": "group",
    "DeliveryFuture": "producer", "Producer": "producer", "create_ssl_context": "security",
    "FetchedBatch": "types", "RecordMetadata": "types", "TopicPartition": "types",
    **{name: "errors" for name in (
        "BufferFullError", "FencedLeaderEpochError", "KafkaConnectionError", "KafkaError",
        "KafkaTimeoutError", "LogTruncationError", "NotLeaderOrFollowerError",
        "ProducerClosedError", "RecordTooLargeError", "UnknownLeaderEpochError", "error_class")},
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # once loaded, a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
