"""The processes of a cluster: the controller and the brokers, each a `Process` that knows its
own command line (the one a user types) and the log lines that say it is up."""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.schema import Message

from .certs import ClusterCertificates
from .network import Bind
from .processes import STOP_S, Process, process_state
from .requests import call

CONTROLLER = "controller"  # the controller's node id for kill(), restart() and the rest
START_S = 60.0  # a process up and registered, on 2 busy cores
NodeId = int | str

_BROKER_LISTENING = re.compile(r"broker (\d+) \(rack .*\) listening on .* \(advertised "
                               r"([\d.]+):(\d+)\), generation (\d+)")
_CONTROLLER_LISTENING = re.compile(r"listening on ([\d.]+):(\d+) with controller epoch (\d+)")


def epochlog_command(*args: str) -> list[str]:
    """`python -m epochlog ARGS`, with this interpreter (so the venv's epochlog runs)."""
    return [sys.executable, "-m", "epochlog", *args]


class Node(Process):
    """One process of the cluster. `intent` is what the harness last did to it (running,
    paused, stopped, killed), so a process that exited on its own can be told apart."""

    role = ""

    def __init__(self, node_id: NodeId, name: str, data_dir: Path, port: int,
                 log_path: Path | None) -> None:
        super().__init__(name, log_path=log_path)
        self.node_id = node_id
        self.data_dir = data_dir
        self.port = port  # the port others reach it at (its advertised port)
        self.host = "127.0.0.1"  # the host others reach it at; set by the cluster's network
        self.settings: list[str] = []  # --set NAME=VALUE pairs from the cluster's settings
        self.extra: list[str] = []  # further arguments, as given
        self.intent = "not started"
        # Set by the cluster: the node's command line now, and what to do once it started.
        self.launcher: Callable[[Node], list[str]] | None = None
        self.on_started: Callable[[Node], None] | None = None

    def start(self, argv: Sequence[str] | None = None,
              env: Mapping[str, str] | None = None) -> None:
        """Start the process: with no argv, the command its cluster gives it (the same data
        dir, ports and settings as before)."""
        if argv is None:
            assert self.launcher is not None, f"{self.name} belongs to no cluster"
            argv = self.launcher(self)
        super().start(argv, env)
        self.intent = "running"
        if self.on_started is not None:
            self.on_started(self)

    def kill(self) -> int | None:
        if self.alive:
            self.intent = "killed"
        return super().kill()

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_S) -> int:
        if self.alive:
            self.intent = "stopped" if sig in (signal.SIGTERM, signal.SIGINT) else "killed"
        return super().stop(sig, timeout_s)

    @property
    def key(self) -> str:
        """The node's name in the network layer: "c" for the controller, else the broker id."""
        return "c" if self.node_id == CONTROLLER else str(self.node_id)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def state(self) -> str:
        """running, paused, stopped, killed, not started, or "exited N" (on its own)."""
        if self.alive:
            return "paused" if process_state(self.pid) == "T" else "running"
        if self.intent in ("stopped", "killed", "not started"):
            return self.intent
        return f"exited {self.returncode}"

    def command(self, binds: dict[int, Bind]) -> list[str]:
        raise NotImplementedError

    def wait_started(self, timeout_s: float = START_S) -> int:
        raise NotImplementedError


class ControllerNode(Node):
    role = "controller"

    def __init__(self, data_dir: Path, port: int, log_path: Path | None) -> None:
        super().__init__(CONTROLLER, "controller", data_dir, port, log_path)
        self.epoch = -1

    def command(self, binds: dict[int, Bind]) -> list[str]:
        return epochlog_command("controller", "--data-dir", str(self.data_dir), "--listen",
                                binds[self.port].listen, *self.settings, *self.extra)

    def wait_started(self, timeout_s: float = START_S) -> int:
        """Listening; the controller epoch."""
        self.epoch = int(self.wait_line(_CONTROLLER_LISTENING, timeout_s=timeout_s).group(3))
        return self.epoch


class BrokerNode(Node):
    role = "broker"

    def __init__(self, broker_id: int, rack: str, data_dir: Path, port: int,
                 log_path: Path | None, internal_port: int | None = None) -> None:
        super().__init__(broker_id, f"broker {broker_id}", data_dir, port, log_path)
        self.broker_id = broker_id
        self.rack = rack
        self.internal_port = internal_port
        # security="ssl" (cluster.py): the SSL listener's port and the certificates' files.
        self.tls_port: int | None = None
        self.tls: ClusterCertificates | None = None
        self.controller = ""  # HOST:PORT of the controller, set by the cluster
        self.generation = -1
        self.hooks_port: int | None = None  # request hooks control on host:hooks_port, if set

    @property
    def client_address(self) -> str:
        """Where clients connect: the SSL listener when there is one, else `address`."""
        return f"{self.host}:{self.tls_port}" if self.tls_port is not None else self.address

    def command(self, binds: dict[int, Bind]) -> list[str]:
        external = binds[self.port]
        args = ["broker", "--id", str(self.broker_id)]
        if self.tls_port is not None:
            args += self._tls_listeners(external, binds[self.tls_port])
        else:
            args += ["--listen", external.listen]
            if external.advertised:
                args += ["--advertised", external.advertised]
        if self.rack:
            args += ["--rack", self.rack]
        if self.internal_port is not None:
            internal = binds[self.internal_port]
            args += ["--internal-listen", internal.listen]
            if internal.advertised:
                args += ["--internal-advertised", internal.advertised]
        args += ["--controller", self.controller, "--data-dir", str(self.data_dir)]
        if self.hooks_port is not None:  # test-only request hooks, on the broker's own host
            args += ["--set", f"request_hooks_listen={self.host}:{self.hooks_port}"]
        return epochlog_command(*args, *self.settings, *self.extra)

    def _tls_listeners(self, plain: Bind, tls: Bind) -> list[str]:
        """Kafka's listener settings for security="ssl" (cluster.py SECURITY_MODES)."""
        assert self.tls is not None
        settings = {
            "listeners": f"CONTROLLER://{plain.listen},SSL://{tls.listen}",
            "listener_security_protocol_map": "CONTROLLER:PLAINTEXT,SSL:SSL",
            "inter_broker_listener_name": "SSL", "control_plane_listener_name": "CONTROLLER",
            "ssl_keystore_location": str(self.tls.broker_keystore),
            "ssl_truststore_location": str(self.tls.ca), "ssl_client_auth": "required"}
        if plain.advertised or tls.advertised:
            settings["advertised_listeners"] = (f"CONTROLLER://{plain.advertised or plain.listen},"
                                                f"SSL://{tls.advertised or tls.listen}")
        return [arg for k, v in settings.items() for arg in ("--set", f"{k}={v}")]

    def wait_started(self, timeout_s: float = START_S) -> int:
        """Registered and through the first LeaderAndIsr of its generation; the generation."""
        listening = self.wait_line(_BROKER_LISTENING, timeout_s=timeout_s)
        self.generation = int(listening.group(4))
        self.wait_line(rf"generation {self.generation}: first LeaderAndIsr", timeout_s=timeout_s)
        return self.generation

    def call(self, key: ApiKey | int, message: Message, version: int | None = None,
             timeout_s: float | None = None) -> Any:
        """One request to this broker's advertised address."""
        if timeout_s is None:
            return call(self.host, self.port, key, message, version)
        return call(self.host, self.port, key, message, version, timeout_s)
