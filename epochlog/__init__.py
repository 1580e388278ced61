"""epochlog: a Kafka-compatible broker cluster and asyncio client library.

The everyday client names are importable from here:

    from epochlog import Producer, Consumer, Admin, TopicPartition, LogTruncationError

The packages live under this namespace: `epochlog.client` (the library), `epochlog.protocol` (the
wire codec), `epochlog.broker`, `epochlog.controller`, `epochlog.settings`, and the `epochlog`
command line (`epochlog.cli`). The client's names load on first use (see epochlog.client).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from epochlog.client import Admin as Admin
    from epochlog.client import CommitFailedError as CommitFailedError
    from epochlog.client import Consumer as Consumer
    from epochlog.client import KafkaError as KafkaError
    from epochlog.client import LogTruncationError as LogTruncationError
    from epochlog.client import NewTopic as NewTopic
    from epochlog.client import Producer as Producer
    from epochlog.client import RebalanceListener as RebalanceListener
    from epochlog.client import RecordMetadata as RecordMetadata
    from epochlog.client import TopicPartition as TopicPartition
    from epochlog.client import create_ssl_context as create_ssl_context

_CLIENT_NAMES = ("Admin", "CommitFailedError", "Consumer", "KafkaError", "LogTruncationError",
                 "NewTopic", "Producer", "RebalanceListener", "RecordMetadata", "TopicPartition",
                 "create_ssl_context")

__all__ = sorted(_CLIENT_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _CLIENT_NAMES:
        raise AttributeError(f"module 'epochlog' has no attribute {name!r}")
    return getattr(importlib.import_module("epochlog.client"), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_CLIENT_NAMES})
