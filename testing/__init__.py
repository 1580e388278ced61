"""epochlog.testing: test a Kafka application against a real epochlog cluster, with real faults,
and judge what its clients saw.

    from epochlog.testing import Cluster, History, check

    history = History()
    with Cluster(3, racks="abc", settings={"min.insync.replicas": 2}, network=True,
                 on_fault=history.record_fault) as c:
        c.create_topic("orders", partitions=6, replication_factor=3)
        c.kill(c.leader_of("orders", 0)); c.restart(1)
        c.partition({1}, {2, 3}); c.heal()
        ...                                  # clients record into history (adapter_* modules)
    assert check(history).ok

`ComposeCluster` (compose_cluster.py) has the same fault API over the containers of a
docker-compose.yml on the Docker Engine.

In pytest, the `epochlog_cluster` fixture (plugin.py, registered through the distribution's
pytest11 entry point) makes clusters and tears them down after the test, and the session fails
if any epochlog process outlives it (guard.py). `History` records what clients did (sends with
their acknowledgements, polls, commits, rebalances, reported truncations) and the faults applied;
`check(history)` returns the anomalies found, named as in Jepsen's Kafka workload, and
`check_transactions(history)` those of transactions (aborted and uncommitted reads, committed
transactions not wholly visible, a pipeline's records processed twice or never). Recording
adapters for epochlog's own client, confluent-kafka, kafka-python and aiokafka are in
`adapter_ours`, `adapter_confluent`, `adapter_kafka_python` and `adapter_aiokafka`; `hooks`
installs test-only request hooks on a broker started with `request_hooks_listen`. `traffic`
produces and reads a topic back, recorded in a History; `until(check, what, timeout_s)` is the
one bounded wait, raising `WaitTimeout` that names what it waited for.

This package runs brokers and the controller as processes, the commands users run; it imports
only the client library, the wire codec and the settings loader, never broker or controller code.
Names load on first use, so loading the pytest plugin costs nothing until a test asks.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .checker import Anomaly as Anomaly
    from .checker import Verdict as Verdict
    from .checker import check as check
    from .cluster import CLIENTS as CLIENTS
    from .cluster import CONTROLLER as CONTROLLER
    from .cluster import Cluster as Cluster
    from .cluster import FaultEntry as FaultEntry
    from .cluster import FaultRecorder as FaultRecorder
    from .cluster import NetworkFaultUnsupported as NetworkFaultUnsupported
    from .cluster import NodeStatus as NodeStatus
    from .compose_cluster import ComposeCluster as ComposeCluster
    from .history import History as History
    from .history import HistoryLimitError as HistoryLimitError
    from .history import HistoryLimits as HistoryLimits
    from .requests import WaitTimeout as WaitTimeout
    from .requests import until as until
    from .txn_checker import Pipeline as Pipeline
    from .txn_checker import check_transactions as check_transactions

_NAMES = {
    **{name: "epochlog.testing.cluster" for name in (
        "CLIENTS", "CONTROLLER", "Cluster", "FaultEntry", "FaultRecorder",
        "NetworkFaultUnsupported", "NodeStatus")},
    **{name: "epochlog.testing.checker" for name in ("Anomaly", "Verdict", "check")},
    "ComposeCluster": "epochlog.testing.compose_cluster",
    **{name: "epochlog.testing.history" for name in (
        "History", "HistoryLimitError", "HistoryLimits")},
    **{name: "epochlog.testing.requests" for name in ("WaitTimeout", "until")},
    **{name: "epochlog.testing.txn_checker" for name in ("Pipeline", "check_transactions")},
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'epochlog.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(_NAMES[name]), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_NAMES})
