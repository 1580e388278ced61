"""The names the project's tests were written against, on top of `epochlog.testing`.

The process handling (children in their own process group, log-line waits, reaping, the network)
is `epochlog.testing`'s alone: this module only keeps the older spellings until the tests move
onto the `epochlog_cluster` fixture (`Cluster(tmp_path, brokers=3)` with `bootstrap`,
`broker(i)`, `restart_broker`, `create_topic(..., **configs)` and `controller` as the
controller's process rather than its id).
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic
from epochlog.testing import cluster as _cluster
from epochlog.testing.network import free_port
from epochlog.testing.nodes import BrokerNode as BrokerChild
from epochlog.testing.nodes import ControllerNode as ControllerChild
from epochlog.testing.nodes import epochlog_command
from epochlog.testing.processes import WAIT_S, Process
from epochlog.testing.requests import POLL_S, call, until

__all__ = ["POLL_S", "WAIT_S", "BrokerChild", "Child", "Cluster", "ControllerChild", "call",
           "free_port"]


class Child(Process):
    """Any `epochlog ARGS` child (tests/test_docker_compose.py runs the compose file's)."""

    def __init__(self, name: str, args: Sequence[str]) -> None:
        super().__init__(name)
        self.args = list(args)

    def start(self, argv: Sequence[str] | None = None, env: Any = None) -> None:
        super().start(epochlog_command(*self.args) if argv is None else argv, env)


class Cluster(_cluster.Cluster):
    def __init__(self, base_dir: Path | str, brokers: int = 3, *,
                 controller_args: Sequence[str] = (), broker_args: Sequence[str] = ()) -> None:
        super().__init__(brokers, base_dir=base_dir, controller_args=controller_args,
                         broker_args=broker_args)

    @property  # type: ignore[override]
    def controller(self) -> ControllerChild:
        return self.controller_node

    @property
    def bootstrap(self) -> str:
        return self.bootstrap_servers

    def broker(self, broker_id: int) -> BrokerChild:
        return self.brokers[broker_id]

    def any_broker(self) -> BrokerChild:
        return next(b for b in self.brokers.values() if b.alive)

    def stop(self, node: Any = None, timeout_s: float = _cluster.STOP_S) -> Any:  # type: ignore[override]
        """stop(): the whole cluster, as before; stop(n): one node."""
        if node is None:
            self.close()
            return None
        return super().stop(node, timeout_s)

    def metadata(self, broker_id: int | None = None,  # type: ignore[override]
                 topics: list[str] | None = None) -> Any:
        b = self.brokers[broker_id] if broker_id is not None else self.any_broker()
        return b.call(ApiKey.METADATA, MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False))

    def create_topic(self, name: str, partitions: int = 1,  # type: ignore[override]
                     replication_factor: int = 1, broker_id: int | None = None,
                     timeout_s: float = WAIT_S, **configs: str) -> Any:
        return super().create_topic(name, partitions, replication_factor, configs,
                                    timeout_s=timeout_s)

    def leaders(self, topic: str) -> dict[int, tuple[int, int]]:
        """partition -> (leader id, leader epoch), from any broker's metadata."""
        md = self.metadata(topics=[topic])
        return {p.partition_index: (p.leader_id, p.leader_epoch)
                for t in md.topics for p in t.partitions}

    def restart_broker(self, broker_id: int, sig: int = signal.SIGTERM) -> int:
        """Stop (SIGTERM: controlled; SIGKILL: a crash) and start again; the new generation."""
        b = self.brokers[broker_id]
        rc = b.stop(sig)
        if sig == signal.SIGTERM:
            assert rc == 0 and b.has_line("closed data dir"), b.tail(20)
        b.start()
        return b.wait_started()

    def restart_controller(self, sig: int = signal.SIGTERM) -> int:
        self.controller_node.stop(sig)
        self.controller_node.start()
        return self.controller_node.wait_started()

    @staticmethod
    def _poll(check: Any, what: str, timeout_s: float = WAIT_S) -> None:
        until(lambda: bool(check()), what, timeout_s)
