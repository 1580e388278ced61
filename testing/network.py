"""Where a cluster's processes listen, and how its network faults are made: three modes.

- `loopback` (the default, `network=False`): every process on 127.0.0.1 with ports of its own.
  Fastest to start; no network faults (asking for one raises NetworkFaultUnsupported, naming
  `network=True`).
- `netns` (`network=True` as root): each process in its own network namespace with its own
  address (netns.py). Cuts are packets silently dropped by the kernel between chosen processes
  or between clients (the root namespace) and a process, while the processes run on; slowness is
  `tc netem` on the slowed process's link. Where the kernel has no netem, the harness says so
  once and puts a proxy (proxy.py) inside each namespace, in front of each listener, to delay
  bytes instead: the cuts stay kernel drops; loss cannot be made (NetworkFaultUnsupported).
- `proxy` (`network=True` when not root or namespaces are unavailable, said once; or asked for
  with `network="proxy"`): every process on 127.0.0.1 behind a TCP proxy per listener, which
  recognises the connecting process by its socket (through /proc) and holds or delays bytes.
  Weaker than namespaces, exactly so:
  * it works on connections, not packets: a cut holds bytes in the proxy (they flow again on
    heal) instead of dropping packets, and a new connection across a cut is accepted, then
    never answered, where a real partition would leave it unconnected;
  * a connection to a process that is down is accepted, then closed, where the kernel would
    refuse it;
  * `slow` delays whole reads and cannot lose anything (`loss_pct` is refused), and it delays
    only traffic through a proxy: a process's connections to itself are not slowed;
  * traffic that does not go through an advertised address (none in epochlog today) would
    pass uncut.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import logging
import os
import random
import socket
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from . import netns
from .ports import free_port as free_port  # its home is ports.py; callers import it here too
from .ports import free_port_base as free_port_base
from .ports import port_span as port_span
from .proxy import Peer, ProxyHub, socket_owner

log = logging.getLogger("epochlog.testing")

CLIENTS = "clients"  # the root namespace: the test's own clients, kcat, anything not a node
LOOPBACK = "127.0.0.1"
_CLONE_NEWNET = 0x40000000
CONNECT_S = 5.0  # a proxy reaching the listener behind it
_said: set[str] = set()  # fallbacks already announced in this process

ConnectFn = Callable[[], socket.socket]
IdentifyFn = Callable[[Peer], str]


class NetworkFaultUnsupported(RuntimeError):
    """This cluster's network cannot make the fault asked for; the message says why."""


def say_once(key: str, message: str) -> None:
    """A fallback is announced once per process, on stderr and in the log."""
    if key not in _said:
        _said.add(key)
        print(f"epochlog.testing: {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Slow:
    delay_ms: int
    jitter_ms: int = 0
    loss_pct: float = 0.0

    def sample_s(self) -> float:
        jitter = random.uniform(-self.jitter_ms, self.jitter_ms) if self.jitter_ms else 0.0
        return max(self.delay_ms + jitter, 0.0) / 1000


@dataclass(frozen=True)
class Bind:
    """One listener of a process: where it binds, and what it advertises (None: the same)."""
    listen: str
    advertised: str | None


class Network:
    """Loopback: no namespaces, no proxies, no faults."""
    mode = "loopback"

    def __init__(self) -> None:
        self.nodes: list[str] = []

    def start(self, ports: Mapping[str, Iterable[int]]) -> None:
        self.nodes = list(ports)

    def bind(self, node: str, port: int) -> Bind:
        return Bind(f"{LOOPBACK}:{port}", None)

    def host(self, node: str) -> str:
        """The address clients reach node at."""
        return LOOPBACK

    def command_prefix(self, node: str) -> list[str]:
        return []

    def started(self, node: str, pid: int) -> None:
        """A process of node runs as pid (the proxy mode recognises its sockets)."""

    def apply(self, cuts: set[tuple[str, str]], slow: Mapping[str, Slow]) -> None:
        if cuts or slow:
            raise NetworkFaultUnsupported(
                "this cluster runs on loopback without network faults: create it with "
                "network=True (`epochlog cluster up --network`) to partition or slow nodes")

    def describe(self) -> str:
        return "loopback (127.0.0.1), no network faults"

    def close(self) -> None:
        pass


class _Faults:
    """The fault state the proxies read (a Policy), swapped whole under a lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.cuts: frozenset[tuple[str, str]] = frozenset()
        self.slow: dict[str, Slow] = {}

    def set(self, cuts: set[tuple[str, str]], slow: Mapping[str, Slow]) -> None:
        with self._lock:
            self.cuts, self.slow = frozenset(cuts), dict(slow)

    def held(self, src: str, dst: str) -> bool:
        return (src, dst) in self.cuts

    def delay_s(self, src: str) -> float:
        slow = self.slow.get(src)
        return slow.sample_s() if slow is not None else 0.0


class ProxyNetwork(Network):
    """Loopback behind a proxy per listener (see the module's list of what it cannot do)."""
    mode = "proxy"

    def __init__(self) -> None:
        super().__init__()
        self._faults = _Faults()
        self._hub: ProxyHub | None = None
        self._pids: dict[int, str] = {}
        self._real: dict[tuple[str, int], int] = {}  # (node, advertised port) -> real port

    def start(self, ports: Mapping[str, Iterable[int]]) -> None:
        super().start(ports)
        self._hub = ProxyHub("proxy", self._faults)
        for node, node_ports in ports.items():
            for port in node_ports:
                real = free_port()
                self._real[(node, port)] = real
                listener = socket.create_server((LOOPBACK, port))
                self._hub.add(node, listener, self._connector(real), self._identify(port))

    @staticmethod
    def _connector(real: int) -> ConnectFn:
        return lambda: socket.create_connection((LOOPBACK, real), CONNECT_S)

    def _identify(self, port: int) -> IdentifyFn:
        return lambda peer: socket_owner(peer, (LOOPBACK, port), dict(self._pids), CLIENTS)

    def bind(self, node: str, port: int) -> Bind:
        return Bind(f"{LOOPBACK}:{self._real[(node, port)]}", f"{LOOPBACK}:{port}")

    def started(self, node: str, pid: int) -> None:
        self._pids = {p: n for p, n in self._pids.items() if n != node} | {pid: node}

    def apply(self, cuts: set[tuple[str, str]], slow: Mapping[str, Slow]) -> None:
        if any(s.loss_pct for s in slow.values()):
            raise NetworkFaultUnsupported(
                "loss_pct needs packets to drop; this cluster's network is a TCP proxy "
                "(not root, or network namespaces unavailable), which can delay bytes but not "
                "lose them without breaking the stream")
        self._faults.set(cuts, slow)
        if self._hub is not None:
            self._hub.changed()

    def describe(self) -> str:
        return "127.0.0.1 behind a TCP proxy per listener (connection-level faults)"

    def close(self) -> None:
        if self._hub is not None:
            self._hub.close()
            self._hub = None


class NamespaceNetwork(Network):
    """A namespace, an address and a veth per process (netns.py); kernel drops and netem."""
    mode = "netns"

    def __init__(self) -> None:
        super().__init__()
        self.ns: netns.Namespaces | None = None
        self.netem = True
        self._faults = _Faults()
        self._hub: ProxyHub | None = None
        self._executors: dict[str, concurrent.futures.ThreadPoolExecutor] = {}

    def start(self, ports: Mapping[str, Iterable[int]]) -> None:
        super().start(ports)
        removed = netns.sweep_stale()
        if removed:
            log.warning("removed leftovers of clusters whose owner died: %s", ", ".join(removed))
        for attempt in range(3):
            self.ns = netns.Namespaces(self.nodes)
            try:
                self.ns.create()
                break
            except netns.NetnsError as exc:
                if "subnet" not in str(exc) or attempt == 2:
                    raise
        assert self.ns is not None
        self.netem = self.ns.has_netem()
        if not self.netem:
            say_once("netem", "this kernel has no tc netem (CONFIG_NET_SCH_NETEM): slow() "
                     "delays bytes in a proxy inside each broker's namespace instead, and "
                     "cannot lose packets (loss_pct); partitions are still kernel drops")
            self._start_proxies(ports)

    def _start_proxies(self, ports: Mapping[str, Iterable[int]]) -> None:
        assert self.ns is not None
        self._hub = ProxyHub(f"delay-{self.ns.tag}", self._faults)
        by_address = {link.address: node for node, link in self.ns.links.items()}
        for node, node_ports in ports.items():
            link = self.ns.links[node]
            executor = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"epochlog-{link.netns}", initializer=_enter_netns,
                initargs=(link.netns,))
            self._executors[node] = executor
            for port in node_ports:
                listener = executor.submit(socket.create_server, (link.address, port)).result()
                self._hub.add(node, listener, _connector_to(port), _by_address(by_address),
                              executor)

    def bind(self, node: str, port: int) -> Bind:
        host = self.host(node)
        if self.netem:
            return Bind(f"{host}:{port}", None)
        return Bind(f"{LOOPBACK}:{port}", f"{host}:{port}")  # the proxy listens on host:port

    def host(self, node: str) -> str:
        assert self.ns is not None, "the network is not started"
        return self.ns.address(node)

    def command_prefix(self, node: str) -> list[str]:
        assert self.ns is not None, "the network is not started"
        return ["ip", "netns", "exec", self.ns.links[node].netns]

    def apply(self, cuts: set[tuple[str, str]], slow: Mapping[str, Slow]) -> None:
        assert self.ns is not None, "the network is not started"
        if not self.netem and any(s.loss_pct for s in slow.values()):
            raise NetworkFaultUnsupported(
                "loss_pct needs tc netem, which this kernel lacks (CONFIG_NET_SCH_NETEM); "
                "delay and jitter work through the proxies")
        kernel_slow = {n: (s.delay_ms, s.jitter_ms, s.loss_pct) for n, s in slow.items()} \
            if self.netem else {}
        self.ns.apply(cuts, kernel_slow)
        self._faults.set(set(), slow)  # the proxies (if any) only delay; cuts are drops
        if self._hub is not None:
            self._hub.changed()

    def describe(self) -> str:
        if self.ns is None:
            return "network namespaces (not started)"
        how = "tc netem" if self.netem else "a proxy in each namespace (no netem here)"
        return (f"network namespaces {self.ns.tag}-*, subnet {self.ns.subnet} (clients from "
                f"{self.ns.gateway}); cuts are kernel drops, slowness is {how}")

    def close(self) -> None:
        if self._hub is not None:
            self._hub.close()
            self._hub = None
        for executor in self._executors.values():
            executor.shutdown(wait=False)
        self._executors.clear()
        if self.ns is not None:
            self.ns.close()


def _enter_netns(name: str) -> None:
    """Move the calling thread (only it) into namespace `name`; sockets it makes live there."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


def _connector_to(port: int) -> ConnectFn:
    # Called on the namespace's own thread, so the socket is made inside the namespace.
    return lambda: socket.create_connection((LOOPBACK, port), CONNECT_S)


def _by_address(by_address: Mapping[str, str]) -> IdentifyFn:
    return lambda peer: by_address.get(peer[0], CLIENTS)


def make(network: bool | str) -> Network:
    """The network a cluster asked for: False/"loopback", True (namespaces where possible,
    else the proxy, said once), "netns" (namespaces or an error), "proxy"."""
    if network is False or network == "loopback":
        return Network()
    if network == "proxy":
        return ProxyNetwork()
    if network is True or network == "netns":
        why = netns.available()
        if why is None:
            return NamespaceNetwork()
        if network == "netns":
            raise NetworkFaultUnsupported(f"network namespaces unavailable: {why}")
        say_once("proxy", f"network faults through TCP proxies, not namespaces ({why}); "
                 "weaker: faults act on connections, not packets (epochlog.testing.network)")
        return ProxyNetwork()
    raise ValueError(f"network={network!r}: expected False, True, 'netns' or 'proxy'")
