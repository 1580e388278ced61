"""`Cluster`: a controller and N brokers as real child processes, and the faults a test applies.

    with Cluster(3, racks="abc", settings={"min.insync.replicas": 2}) as c:
        c.create_topic("orders", partitions=6, replication_factor=3)
        c.bootstrap_servers                  # for any Kafka client
        c.kill(c.leader_of("orders", 0))     # SIGKILL; c.restart(n) starts it again
        c.wait_fully_replicated("orders", timeout_s=30)

Theory of operation
-------------------
Each process runs the command a user runs (`python -m epochlog controller|broker ...`, see
nodes.py) in its own session, with its data dir under `base_dir` (`controller/`, `broker-N/`) and
its log in `base_dir/logs/`. Nodes are named by id: brokers 1..N, the controller `"controller"`
(`Cluster.controller`), and for network faults the test's own side `"clients"`. Every wait is
bounded and waits on an event: a log line of the process (registered, first LeaderAndIsr,
became leader) or an answer to a request; `until` (requests.py) where only asking again works.

Faults: `kill` (SIGKILL, reaped before it returns), `stop` (SIGTERM: a controlled shutdown),
`restart` (start again on the same data dir and ports, whatever state the node was in), `pause`
/ `resume` (SIGSTOP / SIGCONT, returning once the kernel shows it), and on a cluster made with
`network=True` (network.py): `partition`, `isolate`, `slow`, `heal`; on a cluster made with
`request_hooks=True`, `inject` (test-only request hooks, hooks.py: drop, delay or answer with an
error the next n requests of one API on one broker; without it brokers serve no hooks at all).
Each fault is appended to `faults` (kind, targets, detail, monotonic and wall time) and reported
to `on_fault(kind, targets, detail)` when given (History.record_fault has that signature), after
it took effect.

Closing heals the network, stops the brokers (controlled shutdown, all at once), then the
controller, then removes the network; a process that does not stop in time is killed and
reported. An `atexit` hook closes any cluster still open (killing, not stopping), and children
die with the harness process (processes.py), so nothing outlives a run.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.error_codes import ErrorCode

from . import hooks
from . import network as net
from .certs import ClusterCertificates, ensure_certificates
from .cluster_base import ClusterBase, FaultEntry, FaultRecorder
from .netns import NODES_MAX
from .network import CLIENTS, NetworkFaultUnsupported
from .nodes import CONTROLLER, START_S, BrokerNode, ControllerNode, Node, NodeId
from .processes import STOP_S, Process, ProcessError
from .settings_routing import route

__all__ = ["CLIENTS", "CONTROLLER", "Cluster", "FaultEntry", "FaultRecorder",
           "NetworkFaultUnsupported", "NodeId", "NodeStatus"]

RACKS_DEFAULT = "abcdefghijklmnopqrstuvwxyz"  # a rack per broker
BROKERS_MAX = 99  # interface names hold two digits of broker id
STATUS_ASK_S = 2.0  # status() is for people watching: a frozen node must not hold it long
# Ports when a cluster gets its own addresses (namespaces): Kafka's and docker-compose's.
NETNS_BROKER_PORT, NETNS_CONTROLLER_OFFSET, INTERNAL_OFFSET = 9092, 100, 200
HOOKS_OFFSET = 300  # a broker's request hooks control: its port + this (fixed ports only)
# "plaintext": one PLAINTEXT listener per broker. "ssl": clients reach brokers' SSL listener
# (mutual TLS, certificates under base_dir/tls, certs.py), which is also the inter-broker one;
# the controller and this harness use a PLAINTEXT listener named CONTROLLER (the controller's
# link has no TLS yet), at the port the harness calls (`node.port`).
SECURITY_MODES = ("plaintext", "ssl")

_open: weakref.WeakSet[Cluster] = weakref.WeakSet()


@dataclass(frozen=True)
class NodeStatus:
    """One row of `Cluster.status()` (and of `epochlog cluster status`)."""
    node: NodeId
    role: str
    pid: int | None
    state: str  # running, paused, stopped, killed, not started, exited N
    address: str
    rack: str
    generation: int  # a broker's generation, the controller's epoch; -1 unknown
    leaders: int | None  # partitions it leads, as the controller says; None: unknown
    network: str  # its active network faults, "" if none


class Cluster(ClusterBase):
    """A controller and `brokers` brokers as child processes (see the module's notes)."""

    def __init__(self, brokers: int = 3, *, racks: str | None = None,
                 settings: Mapping[str, object] | None = None,
                 base_dir: Path | str | None = None, network: bool | str = False,
                 on_fault: FaultRecorder | None = None, port_base: int | None = None,
                 internal_listener: bool = False, broker_args: Iterable[str] = (),
                 controller_args: Iterable[str] = (), start_timeout_s: float = START_S,
                 on_exit: Callable[[Node], None] | None = None,
                 request_hooks: bool = False, security: str = "plaintext") -> None:
        if not 1 <= brokers <= BROKERS_MAX:
            raise ValueError(f"brokers={brokers}: must be 1-{BROKERS_MAX}")
        if security not in SECURITY_MODES:
            raise ValueError(f"security={security!r}: one of {', '.join(SECURITY_MODES)}")
        if security == "ssl" and internal_listener:
            raise ValueError("security='ssl' gives brokers two listeners already (CONTROLLER, "
                             "SSL); internal_listener is for plaintext clusters")
        racks = RACKS_DEFAULT if racks is None else racks
        broker_settings, controller_settings = route(settings)
        self._temp = base_dir is None
        self.base_dir = Path(tempfile.mkdtemp(prefix="epochlog-cluster-") if base_dir is None
                             else base_dir).resolve()
        super().__init__(on_fault)
        self.request_hooks = request_hooks
        self.on_exit = on_exit
        self.start_timeout_s = start_timeout_s
        self.network: net.Network = net.make(network)
        if isinstance(self.network, net.NamespaceNetwork) and brokers + 1 > NODES_MAX:
            raise ValueError(f"brokers={brokers}: a namespace network holds at most "
                             f"{NODES_MAX - 1} brokers (a link per pair of nodes)")
        self._closed = False
        self._started = False
        self.security = security
        self.tls: ClusterCertificates | None = None
        if security == "ssl":
            self.tls = ensure_certificates(self.base_dir / "tls")
        ports = self._ports(brokers, port_base, internal_listener or self.tls is not None)
        logs = self.base_dir / "logs"
        self.controller_node = ControllerNode(self.base_dir / "controller", ports["c"][0],
                                              logs / "controller.log")
        self.controller_node.settings = controller_settings
        self.controller_node.extra = list(controller_args)
        self.brokers: dict[int, BrokerNode] = {}
        for i in range(1, brokers + 1):
            b = BrokerNode(i, racks[(i - 1) % len(racks)] if racks else "",
                           self.base_dir / f"broker-{i}", ports[str(i)][0],
                           logs / f"broker-{i}.log",
                           ports[str(i)][1] if internal_listener else None)
            if self.tls is not None:
                b.tls_port, b.tls = ports[str(i)][1], self.tls
            b.settings = list(broker_settings)
            b.extra = list(broker_args)
            if request_hooks:
                b.hooks_port = self._hooks_port(i, port_base)
            self.brokers[i] = b
        for node in self.nodes():
            node.on_exit = self._exited
            node.launcher = self._command
            node.on_started = self._started_node
        _open.add(self)

    def _ports(self, brokers: int, base: int | None, internal: bool) -> dict[str, list[int]]:
        """network key -> [external port, internal port if any]: what others connect to."""
        own_addresses = isinstance(self.network, net.NamespaceNetwork)
        if own_addresses:  # every process has an address of its own: the same ports for all
            port = base or NETNS_BROKER_PORT
            plan = {str(i): [port, port + INTERNAL_OFFSET] for i in range(1, brokers + 1)}
            plan["c"] = [port + NETNS_CONTROLLER_OFFSET]
        elif base is not None:
            plan = {str(i): [base + i - 1, base + INTERNAL_OFFSET + i - 1]
                    for i in range(1, brokers + 1)}
            plan["c"] = [base + NETNS_CONTROLLER_OFFSET]
        else:
            plan = {str(i): [net.free_port(), net.free_port()] for i in range(1, brokers + 1)}
            plan["c"] = [net.free_port()]
        if not internal:
            plan = {k: v[:1] for k, v in plan.items()}
        return plan

    def _hooks_port(self, broker: int, base: int | None) -> int:
        """Where broker's request hooks control listens (on the broker's own host)."""
        if isinstance(self.network, net.NamespaceNetwork):
            return (base or NETNS_BROKER_PORT) + HOOKS_OFFSET
        if base is not None:
            return base + HOOKS_OFFSET + broker - 1
        return net.free_port()

    # ------------------------------------------------------------------------ lifecycle
    def start(self) -> Cluster:
        """Start the network, the controller, then every broker; return once each broker is
        registered, through its first LeaderAndIsr, and knows every other broker."""
        assert not self._started, "a cluster starts once (restart(n) restarts one node)"
        self._started = True
        try:
            ports = {n.key: self._node_ports(n) for n in self.nodes()}
            self.network.start(ports)
            for node in self.nodes():
                node.host = self.network.host(node.key)
            for b in self.brokers.values():
                b.controller = b.controller or self.controller_node.address
            self.controller_node.start()
            self.controller_node.wait_started(self.start_timeout_s)
            for b in self.brokers.values():
                b.start()
            for b in self.brokers.values():
                b.wait_started(self.start_timeout_s)
            self.wait_brokers_known()
        except BaseException:
            self._kill_all()
            raise
        return self

    @staticmethod
    def _node_ports(node: Node) -> list[int]:
        second = getattr(node, "internal_port", None) or getattr(node, "tls_port", None)
        return [node.port] + ([second] if second is not None else [])

    def _command(self, node: Node) -> list[str]:
        binds = {port: self.network.bind(node.key, port) for port in self._node_ports(node)}
        return [*self.network.command_prefix(node.key), *node.command(binds)]

    def _started_node(self, node: Node) -> None:
        self.network.started(node.key, node.pid)

    def close(self) -> None:
        """Heal, stop the brokers (controlled shutdown) and the controller, remove the network
        and a temporary base dir. Raises ProcessError, after cleaning up, if a running process
        did not stop cleanly (exit code 0) or in time."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        errors: list[str] = []
        try:
            if self._cuts or self._slow:
                self._cuts.clear()
                self._slow.clear()
                self._apply_network()
            brokers = list(self.brokers.values())
            running = {b.node_id for b in brokers if b.alive}
            for b in brokers:
                b.intent = "stopped"
                b.terminate()  # all at once; then wait for each
            for node in [*brokers, self.controller_node]:
                was_running = node.alive if node is self.controller_node else \
                    node.node_id in running
                node.intent = "stopped"
                try:
                    rc = node.stop(timeout_s=STOP_S)
                except ProcessError as exc:
                    errors.append(str(exc))
                    continue
                if was_running and rc != 0:
                    errors.append(f"{node.name} exited with {rc} on SIGTERM; its log ends:\n"
                                  + node.tail(20))
        finally:
            self._kill_all()
        if errors:
            raise ProcessError("; ".join(errors))

    def _kill_all(self) -> None:
        """The fast way out: SIGKILL what still runs, remove the network (idempotent)."""
        self._closed = True
        for node in self.nodes():
            node.kill()
        self.network.close()
        if self._temp:
            shutil.rmtree(self.base_dir, ignore_errors=True)
        _open.discard(self)

    def __enter__(self) -> Cluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------------------- nodes
    def nodes(self) -> list[Node]:
        return [self.controller_node, *self.brokers.values()]

    def node(self, node: NodeId) -> Node:
        """The process of a node id: a broker id or "controller"."""
        resolved = self.resolve(node)
        return self.controller_node if resolved == CONTROLLER else self.brokers[int(resolved)]

    def pid(self, node: NodeId) -> int | None:
        n = self.node(node)
        return n.pid if n.alive else None

    @property
    def bootstrap_servers(self) -> str:
        """"HOST:PORT,..." of every broker, for any Kafka client: their SSL listener in a
        cluster made with security="ssl" (`client_settings` has the rest)."""
        return ",".join(b.client_address for b in self.brokers.values())

    @property
    def plaintext_servers(self) -> str:
        """"HOST:PORT,..." of every broker's plaintext listener: `bootstrap_servers` in a
        plaintext cluster, the CONTROLLER listeners in an SSL one (what this harness and the
        command-line tools use)."""
        return ",".join(b.address for b in self.brokers.values())

    def client_settings(self) -> dict[str, str]:
        """What a client needs, in librdkafka's names (what `cluster up` writes to
        client.json): bootstrap.servers, security.protocol and, for SSL, the CA and the client
        certificate and key (mutual TLS)."""
        settings = {"bootstrap.servers": self.bootstrap_servers,
                    "security.protocol": self.security.upper()}
        if self.tls is not None:
            settings.update({"ssl.ca.location": str(self.tls.ca),
                             "ssl.certificate.location": str(self.tls.client_cert),
                             "ssl.key.location": str(self.tls.client_key)})
        return settings

    def _exited(self, node: Process) -> None:
        if self.on_exit is not None and isinstance(node, Node):
            self.on_exit(node)

    # --------------------------------------------------------------------- process faults
    def kill(self, node: NodeId) -> None:
        """SIGKILL; returns once the process is reaped (its pid gone)."""
        with self._lock:
            n = self.node(node)
            pid = n.pid
            n.kill()
            n.intent = "killed"
            self._record("kill", (n.node_id,), f"SIGKILL to pid {pid}")

    def stop(self, node: NodeId, timeout_s: float = STOP_S) -> int:
        """SIGTERM (a broker does a controlled shutdown); waits for the exit; its code."""
        with self._lock:
            n = self.node(node)
            n.intent = "stopped"
            if not n.alive:
                return n.returncode or 0
            pid = n.pid
            n.terminate()
            self._record("stop", (n.node_id,), f"SIGTERM to pid {pid} (controlled shutdown)")
            return n.stop(timeout_s=timeout_s)

    def restart(self, node: NodeId, *, wait: bool = True) -> int:
        """Start the node again with its data dir and ports; a running one is stopped first
        (SIGTERM), a paused one continued then stopped. With wait, returns once it is up
        (a broker: registered and through its first LeaderAndIsr); its new generation (the
        controller: its epoch), or -1 without wait."""
        with self._lock:
            n = self.node(node)
            before = n.state()
            if n.alive:
                n.stop()
            n.start()
            self._record("restart", (n.node_id,), f"pid {n.pid} (was {before})")
            if not wait:
                return -1
            return n.wait_started(self.start_timeout_s)

    def pause(self, node: NodeId) -> None:
        """SIGSTOP; returns once the kernel shows the process stopped (state T)."""
        with self._lock:
            n = self.node(node)
            self._require_alive(n, "pause")
            n.pause()
            n.intent = "paused"
            self._record("pause", (n.node_id,), f"SIGSTOP to pid {n.pid}")

    def resume(self, node: NodeId) -> None:
        """SIGCONT; returns once the process is no longer stopped."""
        with self._lock:
            n = self.node(node)
            self._require_alive(n, "resume")
            n.resume()
            n.intent = "running"
            self._record("resume", (n.node_id,), f"SIGCONT to pid {n.pid}")

    @staticmethod
    def _require_alive(n: Node, what: str) -> None:
        if not n.alive:
            raise ProcessError(f"cannot {what} {n.name}: it is {n.state()}")

    # ---------------------------------------------------------------------- request hooks
    def hooks_address(self, broker: int) -> str:
        """HOST:PORT of broker's request hooks control (hooks.py takes it)."""
        b = self.brokers.get(broker) if isinstance(broker, int) else None
        if b is None:
            raise KeyError(f"no broker {broker!r}: brokers are {sorted(self.brokers)}")
        if b.hooks_port is None:
            raise hooks.HookError("this cluster's brokers serve no request hooks: create it "
                                  "with request_hooks=True")
        return f"{b.host}:{b.hooks_port}"

    def inject(self, broker: int, api: ApiKey | int | str, action: hooks.Action, *,
               times: int = 1, delay_ms: int = 0, error: ErrorCode | int | str | None = None,
               client_id: str | None = None) -> hooks.Hook:
        """For the next `times` requests of `api` that broker receives (from client_id only, if
        given): "drop" them (no answer), "delay" them by delay_ms, or "error": answer `error`
        (a name such as "NOT_LEADER_OR_FOLLOWER", or a code) without handling them. Needs a
        cluster made with request_hooks=True; the broker must be running. The hook installed
        (`hooks.list_hooks(c.hooks_address(broker))` shows how often it fired)."""
        with self._lock:
            address = self.hooks_address(broker)
            hook = hooks.install_hook(address, api, action, times=times, delay_ms=delay_ms,
                                      error=error, client_id=client_id)
            self._record("inject", (broker,), hook.describe())
            return hook

    def clear_injections(self, broker: int) -> int:
        """Remove every request hook of broker (used or not); how many there were."""
        with self._lock:
            address = self.hooks_address(broker)
            fired = ", ".join(f"{h.api} {h.action} {h.fired}/{h.times}"
                              for h in hooks.list_hooks(address))
            removed = hooks.clear_hooks(address)
            self._record("clear-injections", (broker,),
                         f"{removed} hook(s) removed (fired: {fired or 'none installed'})")
            return removed

    # --------------------------------------------------------------- backend's part
    @property
    def broker_ids(self) -> list[int]:
        return list(self.brokers)

    def _endpoint(self, node: NodeId) -> tuple[str, int]:
        n = self.node(node)
        return n.host, n.port

    def _running(self, node: NodeId) -> bool:
        n = self.node(node)
        return n.alive and n.intent == "running"

    def _askable(self) -> list[NodeId]:
        """The controller first (it decides), then the brokers."""
        return self.node_ids()

    def _log_mark(self, broker: int) -> int:
        return self.brokers[broker].mark()

    def _logged(self, broker: int, text: str, start: int) -> bool:
        return self.brokers[broker].has_line(text, start=start)

    def _apply_network(self) -> None:
        self.network.apply(self._cuts, self._slow)

    def status(self) -> list[NodeStatus]:
        """A row per node: pid, state, address, rack, generation, partitions it leads."""
        leaders: dict[int, int] | None = None
        try:
            md = self._metadata(timeout_s=STATUS_ASK_S)
            leaders = {}
            for t in md.topics:
                for p in t.partitions:
                    leaders[p.leader_id] = leaders.get(p.leader_id, 0) + 1
        except (OSError, TimeoutError, ConnectionError):
            pass
        rows = []
        for n in self.nodes():
            rows.append(NodeStatus(
                node=n.node_id, role=n.role, pid=n.pid if n.alive else None, state=n.state(),
                address=n.address, rack=getattr(n, "rack", ""),
                generation=n.epoch if isinstance(n, ControllerNode) else
                getattr(n, "generation", -1),
                leaders=None if leaders is None or n.node_id == CONTROLLER else
                leaders.get(int(n.node_id), 0),
                network=self.network_faults(n.node_id)))
        return rows

    def __repr__(self) -> str:
        return (f"<Cluster {len(self.brokers)} brokers, {self.network.describe()}, "
                f"data in {self.base_dir}>")


def _close_all_at_exit() -> None:
    for cluster in list(_open):
        cluster._kill_all()


atexit.register(_close_all_at_exit)
