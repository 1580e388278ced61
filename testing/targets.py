"""Where a chaos run's cluster lives: `open_cluster(target, brokers, ...)`.

- "local": `Cluster`, the controller and brokers as child processes of this one (cluster.py);
- "compose": `epochlog.testing.compose_cluster.ComposeCluster`, the same fault methods against
  containers of docker compose; loaded only when asked for, and a clear error where this
  installation does not have it.

Both are returned unstarted; the caller starts and closes them (`with open_cluster(...) as c`).
"""

from __future__ import annotations

import importlib
from typing import Any

TARGETS = ("local", "compose")
COMPOSE_MODULE = "epochlog.testing.compose_cluster"


class TargetUnavailable(RuntimeError):
    """The chosen target cannot run here; the message says why."""


def open_cluster(target: str, brokers: int, **kwargs: Any) -> Any:
    """An unstarted cluster of `brokers` brokers on target, made with Cluster's keyword
    arguments (settings, network, on_fault, request_hooks, ...)."""
    if target == "local":
        from .cluster import Cluster
        return Cluster(brokers, **kwargs)
    if target == "compose":
        try:
            module = importlib.import_module(COMPOSE_MODULE)
        except ModuleNotFoundError as exc:
            if exc.name != COMPOSE_MODULE:
                raise
            raise TargetUnavailable(f"the compose target needs {COMPOSE_MODULE} (ComposeCluster), "
                                    "which this installation of epochlog does not have") from None
        if kwargs.pop("request_hooks", False):
            raise TargetUnavailable("request hooks (the injected-errors scenario) are served by "
                                    "brokers the local target starts; run it with --target "
                                    "local")
        return module.ComposeCluster(brokers, **kwargs)
    raise ValueError(f"target {target!r}: one of {', '.join(TARGETS)}")
