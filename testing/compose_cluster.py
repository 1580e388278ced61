"""`ComposeCluster`: the controller and three brokers of a docker-compose.yml as containers on the
Docker Engine, broken with the same fault API as the local `Cluster`.

    with ComposeCluster(settings={"min.insync.replicas": 2}, on_fault=history.record_fault) as c:
        c.create_topic("orders", partitions=3, replication_factor=3)
        c.bootstrap_servers                  # "localhost:P1,localhost:P2,localhost:P3"
        c.kill(c.coordinator_of("g"))        # docker kill; c.restart(n) is docker start
        c.partition({1}, {2, 3, "controller"}); c.heal()

Theory of operation
-------------------
`start()` builds the images when the compose file has the repository's `docker/build.sh` beside
it (base image, wheelhouse, project image; each cached on the machine, once per process here),
then runs `compose up -d` under a project name unique to the run (compose_project.py), with the
brokers' published ports chosen free on this machine through the file's own variables
(`EPOCHLOG_BROKER{1,2,3}_PORT`, which also set the advertised addresses), and returns once every
service is healthy (each health check a real Kafka request) and every broker knows the others.
`racks` and `settings` go into a generated override file (a second `--file`), as the
`EPOCHLOG_*` variables the brokers and the controller read; nothing else of the file changes.
`override_files` are the caller's own compose overrides, given after those (a volume bound to a
folder of the host, a resource limit, ...).
Services are `controller` and `broker1`..`broker3`, broker ids 1..3, as in the repository's file;
the broker count is the file's (3), so `brokers` must be 3.

Faults map onto the engine's operations, each reported to `on_fault(kind, targets, detail)`
after it took effect, as Cluster does:
- `kill(n)`: `docker kill` (SIGKILL). The engine counts it as stopped by hand, so the restart
  policy leaves it down until `restart(n)`. `crash(n)`: SIGKILL to the container's process from
  the host, which the engine sees as a crash: `restart: unless-stopped` brings it back itself.
- `stop(n)`: `docker stop` (SIGTERM: a controlled shutdown; SIGKILL after the grace period).
- `restart(n)`: `docker start` of the same container, with its volume's data (a running one is
  stopped first, a paused one unpaused); with wait, until healthy and registered again.
- `pause(n)` / `resume(n)`: `docker pause` / `unpause` (the cgroup freezer: SIGSTOP's effect).
- `partition`, `isolate`, `heal`: iptables rules inside the containers' network namespaces
  (compose_network.py); "clients" is the host, whose traffic reaches the published ports from
  the project network's gateway. `slow` needs `tc netem`; a kernel without it raises
  NetworkFaultUnsupported, naming the limitation (no proxy fallback here, unlike Cluster).
  A container started again has a new namespace (and maybe a new address): the rules are made
  again after every start the harness does; a crash restarted by the engine loses them until
  the next fault or `restart` (`crash` reapplies them once the container is back).

Queries (leader_of, coordinator_of, create_topic, wait_fully_replicated, ...) are Cluster's own
(cluster_base.py), asked of the brokers through their published ports: the compose file does not
publish the controller's port. Log marks are line counts of `docker logs`, which keeps every run
of a container.

`close()` heals, stops the services (`compose stop`: controlled shutdowns), fails if a running
broker or the controller did not exit 0, and always ends with `compose down -v` and the removal
by label of anything of the project left (then reported). An `atexit` hook removes by force any
project still open, so nothing outlives the interpreter.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import signal
import tempfile
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from .cluster import NodeStatus
from .cluster_base import ClusterBase, FaultRecorder
from .compose_network import Container, ContainerNetwork
from .compose_project import (
    COMMAND_S_MAX,
    HEALTHY_S_MAX,
    ComposeError,
    ComposeProject,
    build_images,
    engine_version,
    unique_name,
)
from .network import free_port
from .nodes import CONTROLLER, NodeId
from .processes import STOP_S
from .requests import until
from .settings_routing import route_names

__all__ = ["BROKERS", "ComposeCluster", "ComposeError", "default_compose_file"]

BROKERS = 3  # the compose file's brokers: broker1..broker3
COMPOSE_FILE = "docker-compose.yml"
BUILD_SCRIPT = Path("docker") / "build.sh"
INTERNAL_PORT = 9091  # each broker's INTERNAL listener on the compose network
CONTROLLER_PORT = 9190  # the controller's, on the compose network only
HOST = "127.0.0.1"  # where the harness asks the published ports
RESTARTED_S_MAX = 90.0  # the engine restarting a crashed container
_LISTENING = re.compile(r"broker \d+ \(rack .*\) listening on .* generation (\d+)")
_CONTROLLER_LISTENING = re.compile(r"listening on .* with controller epoch (\d+)")

_open: weakref.WeakSet[ComposeCluster] = weakref.WeakSet()
_built: dict[Path, dict[str, str]] = {}  # build script -> its images, once per process
_built_lock = threading.Lock()


def default_compose_file() -> Path:
    """./docker-compose.yml, else the one of the checkout epochlog runs from; ValueError if
    neither exists."""
    for candidate in (Path.cwd() / COMPOSE_FILE,
                      Path(__file__).resolve().parents[1] / COMPOSE_FILE):
        if candidate.is_file():
            return candidate
    raise ValueError(f"no {COMPOSE_FILE} in {Path.cwd()} nor in epochlog's checkout: pass "
                     "compose_file=")


def service_of(node: NodeId) -> str:
    return "controller" if node == CONTROLLER else f"broker{node}"


class ComposeCluster(ClusterBase):
    """A Compose project's controller and brokers, and the faults a test applies (see the
    module's notes)."""

    def __init__(self, brokers: int = BROKERS, *, racks: str | None = None,
                 settings: Mapping[str, object] | None = None,
                 on_fault: FaultRecorder | None = None,
                 compose_file: Path | str | None = None, project: str = "epochlog",
                 images: Mapping[str, str] | None = None, build: bool = True,
                 base_dir: Path | str | None = None, network: bool = True,
                 start_timeout_s: float = HEALTHY_S_MAX,
                 override_files: Sequence[Path | str] = ()) -> None:
        if brokers != BROKERS:
            raise ValueError(f"brokers={brokers}: a compose cluster has the compose file's "
                             f"{BROKERS} brokers (broker1..broker{BROKERS})")
        if not isinstance(network, bool):
            raise ValueError(f"network={network!r}: a compose cluster has one kind of network, "
                             "the project's (True or False; faults are made in the containers)")
        if racks is not None and not racks:
            raise ValueError("racks='' : the compose file gives every broker a rack; "
                             "pass None to keep them (a, b, c) or letters to change them")
        super().__init__(on_fault)
        self.compose_file = Path(compose_file or default_compose_file()).resolve()
        if not self.compose_file.is_file():
            raise ValueError(f"compose_file {self.compose_file} does not exist")
        self.override_files = [Path(f).resolve() for f in override_files]
        for f in self.override_files:
            if not f.is_file():
                raise ValueError(f"override file {f} does not exist")
        self.broker_settings, self.controller_settings = route_names(settings)
        self.racks = racks
        self.name = unique_name(project)
        self.images = dict(images) if images is not None else None
        self.build = build
        self._temp = base_dir is None
        self.base_dir = Path(tempfile.mkdtemp(prefix="epochlog-compose-") if base_dir is None
                             else base_dir).resolve()
        self.start_timeout_s = start_timeout_s
        self.ports = {i: free_port() for i in range(1, BROKERS + 1)}
        self._intent: dict[NodeId, str] = {n: "not started" for n in self.node_ids()}
        self._net = ContainerNetwork()
        self._project: ComposeProject | None = None
        self._closed = False

    # ------------------------------------------------------------------------ lifecycle
    @property
    def project(self) -> ComposeProject:
        if self._project is None:
            raise ComposeError(f"compose cluster {self.name} is not started")
        return self._project

    def start(self) -> ComposeCluster:
        """Build the images (cached), `compose up -d`, then every service healthy and every
        broker knowing the others; on failure everything of the project is removed."""
        assert self._project is None, "a compose cluster starts once (restart(n) for a node)"
        engine_version()
        env = {**os.environ, **self._images(),
               **{f"EPOCHLOG_BROKER{i}_PORT": str(p) for i, p in self.ports.items()}}
        files = [self.compose_file, *self._override(), *self.override_files]
        self._project = ComposeProject(self.name, files, env)
        _open.add(self)
        try:
            missing = set(map(service_of, self.node_ids())) - set(self.project.services())
            if missing:
                raise ValueError(f"{self.compose_file} has no service {sorted(missing)}: a "
                                 "compose cluster needs controller and broker1..broker3")
            self.up()
        except BaseException:
            self._remove()
            raise
        return self

    def up(self) -> None:
        """`compose up -d`, then every service healthy and every broker knowing the others.
        After `down()`, new containers find the data of the volumes kept."""
        self.project.up()
        for node in self.node_ids():
            self._intent[node] = "running"
        self.project.wait_healthy(self.services(), self.start_timeout_s)
        self.wait_brokers_known(self.start_timeout_s)

    def down(self, volumes: bool = False) -> None:
        """`compose down`: containers and the network go; the volumes too with volumes=True."""
        self._heal_quietly()
        self.project.down(volumes=volumes)
        for node in self.node_ids():
            self._intent[node] = "stopped"

    def _images(self) -> dict[str, str]:
        if self.images is not None:
            return self.images
        script = self.compose_file.parent / BUILD_SCRIPT
        if not (self.build and script.is_file()):
            return {}  # the compose file's own image names (a registry, or built before)
        with _built_lock:
            if script not in _built:
                _built[script] = build_images(script)
            return _built[script]

    def _override(self) -> list[Path]:
        """The generated override file with racks and settings as EPOCHLOG_* variables (JSON
        is YAML); none when neither was asked for."""
        services: dict[str, dict[str, dict[str, str]]] = {}

        def put(service: str, name: str, value: str) -> None:
            services.setdefault(service, {"environment": {}})["environment"][
                f"EPOCHLOG_{name.upper()}"] = value
        for name, value in self.controller_settings.items():
            put("controller", name, value)
        for i in range(1, BROKERS + 1):
            for name, value in self.broker_settings.items():
                put(service_of(i), name, value)
            if self.racks is not None:
                put(service_of(i), "rack", self.racks[(i - 1) % len(self.racks)])
        if not services:
            return []
        path = self.base_dir / f"{self.name}.override.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"services": services}, indent=2))
        return [path]

    def close(self) -> None:
        """Heal, `compose stop` (controlled shutdowns), `compose down -v`, and remove anything
        of the project left. Raises ComposeError, after cleaning up, if a running service did
        not exit 0 on SIGTERM or something of the project was left behind."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._project is None:
            self._remove()
            return
        errors: list[str] = []
        try:
            self._heal_quietly()
            running = [n for n in self.node_ids() if self._intent[n] == "running"]
            for n in self.node_ids():
                if self._intent[n] == "paused":
                    self.project.docker("unpause", service=service_of(n))
            self.project.compose("stop", timeout_s=COMMAND_S_MAX)
            for n in running:
                code = int(self.project.inspect(service_of(n))["State"]["ExitCode"])
                if code != 0:
                    errors.append(f"{service_of(n)} exited {code} on SIGTERM; its log ends:\n"
                                  + self.project.logs_tail([service_of(n)]))
            self.project.down(volumes=True)
        except ComposeError as exc:
            errors.append(str(exc))
        finally:
            left = self._remove()
        if left:
            errors.append(f"`down -v` left {left} behind (removed by force)")
        if errors:
            raise ComposeError("; ".join(errors))

    def _remove(self) -> dict[str, list[str]]:
        """The fast way out: remove the project's containers, network and volumes by force."""
        self._closed = True
        left: dict[str, list[str]] = {}
        try:
            if self._project is not None:
                left = self._project.remove()
        finally:
            if self._temp:
                shutil.rmtree(self.base_dir, ignore_errors=True)
            _open.discard(self)
        return left

    def _heal_quietly(self) -> None:
        """Heal without recording a fault (on the way out)."""
        with self._lock:
            if self._cuts or self._slow:
                self._cuts.clear()
                self._slow.clear()
                self._apply_network()

    def __enter__(self) -> ComposeCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------- nodes
    def services(self) -> list[str]:
        return [service_of(n) for n in self.node_ids()]

    def container(self, node: NodeId) -> str:
        """The id of the node's container."""
        return self.project.container(service_of(self.resolve(node)))

    @property
    def bootstrap_servers(self) -> str:
        """"localhost:PORT,..." of every broker's published port, for clients on the host."""
        return ",".join(f"localhost:{p}" for p in self.ports.values())

    @property
    def internal_bootstrap_servers(self) -> str:
        """"brokerN:9091,..." for clients in a container on the project's network."""
        return ",".join(f"{service_of(i)}:{INTERNAL_PORT}" for i in self.ports)

    @property
    def network_name(self) -> str:
        """The project's network, for client containers (`docker run --network`)."""
        return self.project.network

    def logs(self, node: NodeId) -> str:
        """Everything the node's container logged, over all its runs."""
        return self.project.logs(service_of(self.resolve(node)))

    def logs_tail(self) -> str:
        """The last lines of every service's log, for a failure's report."""
        return self.project.logs_tail(self.services())

    def engine_state(self, node: NodeId) -> str:
        """The engine's state of the node's container: running, paused, exited, ..."""
        state: str = self.project.inspect(service_of(self.resolve(node)))["State"]["Status"]
        return state

    # --------------------------------------------------------------------- process faults
    def kill(self, node: NodeId) -> None:
        """`docker kill` (SIGKILL); returns once the engine has it stopped. It stays down (the
        engine counts it as stopped by hand) until restart()."""
        with self._lock:
            n = self.resolve(node)
            cid = self.project.docker("kill", service=service_of(n)).strip()
            self._intent[n] = "killed"
            self._record("kill", (n,), f"docker kill (SIGKILL) of container {cid[:12]}")

    def crash(self, node: NodeId, *, wait: bool = True) -> int:
        """SIGKILL to the container's process from the host: a crash, which the restart policy
        (`unless-stopped`) answers by starting it again. With wait, returns once the engine
        restarted it and it is healthy, its network faults made again. The restart count
        before the crash."""
        with self._lock:
            n = self.resolve(node)
            service = service_of(n)
            state = self.project.inspect(service)
            pid, restarts = int(state["State"]["Pid"]), int(state["RestartCount"])
            if pid <= 0:
                raise ComposeError(f"cannot crash {service}: it is {state['State']['Status']}")
            os.kill(pid, signal.SIGKILL)
            self._record("crash", (n,), f"SIGKILL to its process {pid} from the host "
                         "(the restart policy brings it back)")
        if wait:
            until(lambda: int(self.project.inspect(service)["RestartCount"]) > restarts,
                  f"the engine to restart {service}", RESTARTED_S_MAX, interval_s=0.5)
            self.project.wait_healthy([service], self.start_timeout_s)
            with self._lock:
                self._apply_network()
        return restarts

    def stop(self, node: NodeId, timeout_s: float = STOP_S) -> int:
        """`docker stop` (SIGTERM: a controlled shutdown; SIGKILL after timeout_s); waits for
        the exit; its exit code."""
        with self._lock:
            n = self.resolve(node)
            service = service_of(n)
            self._intent[n] = "stopped"
            if self.engine_state(n) == "paused":
                self.project.docker("unpause", service=service)
            self.project.docker("stop", "--time", str(int(timeout_s)), service=service,
                                timeout_s=timeout_s + COMMAND_S_MAX)
            self._record("stop", (n,), "docker stop (SIGTERM: controlled shutdown)")
            return int(self.project.inspect(service)["State"]["ExitCode"])

    def restart(self, node: NodeId, *, wait: bool = True) -> int:
        """`docker start` of the node's container, with its volume's data; a running one is
        stopped first (SIGTERM), a paused one unpaused first. With wait, returns once it is
        healthy and (a broker) registered and through its first LeaderAndIsr: its new
        generation (the controller: its epoch); -1 without wait."""
        with self._lock:
            n = self.resolve(node)
            service = service_of(n)
            before = self.engine_state(n)
            if before == "paused":
                self.project.docker("unpause", service=service)
            if before in ("running", "paused", "restarting"):
                self.project.docker("stop", "--time", str(int(STOP_S)), service=service)
            mark = len(self.logs(n).splitlines())
            self.project.docker("start", service=service)
            self._intent[n] = "running"
            self._apply_network()  # a new namespace: the cuts made again
            self._record("restart", (n,), f"docker start (was {before})")
        if not wait:
            return -1
        self.project.wait_healthy([service], self.start_timeout_s)
        return self._wait_started(n, mark)

    def _wait_started(self, n: NodeId, mark: int) -> int:
        def found(pattern: re.Pattern[str]) -> int | None:
            for line in self.logs(n).splitlines()[mark:]:
                m = pattern.search(line)
                if m:
                    return int(m.group(1))
            return None
        if n == CONTROLLER:
            return until(lambda: found(_CONTROLLER_LISTENING), "the controller listening",
                         self.start_timeout_s, interval_s=0.5)
        generation = until(lambda: found(_LISTENING), f"broker {n} listening",
                           self.start_timeout_s, interval_s=0.5)
        until(lambda: self._logged(int(n), f"generation {generation}: first LeaderAndIsr",
                                   mark),
              f"broker {n}'s first LeaderAndIsr", self.start_timeout_s, interval_s=0.5)
        return generation

    def pause(self, node: NodeId) -> None:
        """`docker pause` (the cgroup freezer stops every process of the container)."""
        with self._lock:
            n = self.resolve(node)
            self.project.docker("pause", service=service_of(n))
            self._intent[n] = "paused"
            self._record("pause", (n,), "docker pause (cgroup freezer)")

    def resume(self, node: NodeId) -> None:
        """`docker unpause`."""
        with self._lock:
            n = self.resolve(node)
            self.project.docker("unpause", service=service_of(n))
            self._intent[n] = "running"
            self._record("resume", (n,), "docker unpause")

    # --------------------------------------------------------------- backend's part
    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, BROKERS + 1))

    def _endpoint(self, node: NodeId) -> tuple[str, int]:
        if node == CONTROLLER:
            raise ConnectionError("the compose file does not publish the controller's port; "
                                  "ask a broker")
        return HOST, self.ports[int(node)]

    def _running(self, node: NodeId) -> bool:
        return self._intent[self.resolve(node)] == "running"

    def _askable(self) -> list[NodeId]:
        return list(self.broker_ids)

    def _log_mark(self, broker: int) -> int:
        return len(self.logs(broker).splitlines())

    def _logged(self, broker: int, text: str, start: int) -> bool:
        return any(text in line for line in self.logs(broker).splitlines()[start:])

    def _apply_network(self) -> None:
        if self._project is None:
            return
        by_id, gateway = self.project.addresses()
        containers = []
        for n in self.node_ids():
            cid = self.container(n)
            if cid in by_id:  # running or paused: it has a namespace
                pid = int(self.project.inspect(service_of(n))["State"]["Pid"])
                if pid > 0:
                    containers.append(Container("c" if n == CONTROLLER else str(n), pid,
                                                by_id[cid]))
        self._net.apply(containers, gateway, self._cuts, self._slow)

    # --------------------------------------------------------------------------- status
    def status(self) -> list[NodeStatus]:
        """A row per node: the engine's state, address, rack, partitions it leads."""
        leaders: dict[int, int] | None = None
        try:
            md = self._metadata(timeout_s=2.0)
            leaders = {}
            for t in md.topics:
                for p in t.partitions:
                    leaders[p.leader_id] = leaders.get(p.leader_id, 0) + 1
        except (OSError, TimeoutError, ConnectionError):
            pass
        rows = []
        for n in self.node_ids():
            state = self.project.inspect(service_of(n))["State"]
            shown = str(state["Status"])
            if shown == "exited":
                intent = self._intent[n]
                shown = intent if intent in ("killed", "stopped") else \
                    f"exited {state['ExitCode']}"
            rows.append(NodeStatus(
                node=n, role="controller" if n == CONTROLLER else "broker",
                pid=int(state["Pid"]) or None, state=shown,
                address=f"controller:{CONTROLLER_PORT}" if n == CONTROLLER else
                f"localhost:{self.ports[int(n)]}",
                rack="" if n == CONTROLLER else self._rack(int(n)), generation=-1,
                leaders=None if leaders is None or n == CONTROLLER else leaders.get(int(n), 0),
                network=self.network_faults(n)))
        return rows

    def _rack(self, broker: int) -> str:
        racks = self.racks if self.racks is not None else "abc"  # the compose file's
        return racks[(broker - 1) % len(racks)]

    def __repr__(self) -> str:
        return f"<ComposeCluster {self.name} from {self.compose_file}>"


def _remove_all_at_exit() -> None:
    for cluster in list(_open):
        try:
            cluster._remove()
        except ComposeError:
            pass  # the engine is gone too: nothing left to remove


atexit.register(_remove_all_at_exit)
