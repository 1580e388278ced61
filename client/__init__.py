"""epochlog's asyncio client library: Producer, Consumer and Admin, against epochlog or any Kafka.

    from client import Producer, Consumer, Admin, TopicPartition, LogTruncationError

Its connection layer (client.connection) is also shared with brokers and the controller.
"""

from .admin import Admin
from .consumer import Consumer
from .group import CommitFailedError, RebalanceListener
from .errors import (BufferFullError, FencedLeaderEpochError, KafkaConnectionError, KafkaError,
                     KafkaTimeoutError, LogTruncationError, NotLeaderOrFollowerError,
                     ProducerClosedError, RecordTooLargeError, UnknownLeaderEpochError,
                     error_class)
from .producer import DeliveryFuture, Producer
from .types import RecordMetadata, TopicPartition

__all__ = ["Admin", "BufferFullError", "CommitFailedError", "Consumer", "DeliveryFuture", "FencedLeaderEpochError",
           "KafkaConnectionError", "KafkaError", "KafkaTimeoutError", "LogTruncationError",
           "NotLeaderOrFollowerError", "Producer", "ProducerClosedError", "RebalanceListener", "RecordMetadata",
           "RecordTooLargeError", "TopicPartition", "UnknownLeaderEpochError", "error_class"]
