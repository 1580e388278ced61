"""A private network of Linux network namespaces for one cluster, and real faults on its links.

Theory of operation
-------------------
Every process of the cluster (each broker, the controller) runs in a network namespace of its
own, `<tag>-<node>`, with one address (on its loopback device, as a /32) from a private /24 the
harness picks (10.200.0.0-10.254.255.0, one no address or route of this machine overlaps). The
subnet's first address stands for the clients: the test process, kcat, anything in the root
namespace.

Links are veth pairs, one per pair of nodes and one from each node to the root namespace, each
with /32 routes naming its own source address. No bridge and no forwarding: a packet goes from
its sender's namespace straight into its receiver's, where it is delivered locally. (A bridge
would put the traffic through the root namespace's netfilter FORWARD chain, which Docker's
`-P FORWARD DROP` on a developer's machine blocks, and iptables is not ours to change.)

Because every link joins exactly two parties, a fault is a queue on one link's sending end
(iproute2's tc only):
- a cut from A to B (packets from A never reach B) is a `pfifo limit 0` queue on A's end of the
  A-B link (for clients, the root namespace's end of B's root link): everything A sends there
  is silently dropped, as a partition does, not refused, while the processes run on;
- slowness (delay, jitter, loss) is a `netem` queue on every link end of the slowed node: every
  packet it sends waits, so every round trip with it grows by the delay once. A kernel built
  without netem (CONFIG_NET_SCH_NETEM) cannot do this; `has_netem()` says so and the harness
  then delays in a proxy instead (network.py). A cut wins over slowness on the same link end.
- heal: each link end back to the kernel's default queue.

Names: the tag is `el` + the owner's pid (6 hex digits) + a counter (2 hex digits), so names are
unique per cluster, fit Linux's 15-character interface names (`<tag>h<node>` for a node's root
link in the root namespace; inside a namespace `root` and `to<node>`), and tell a leftover's
owner. Everything is removed on close (deleting a namespace deletes its links); `sweep_stale()`
removes what an owner that died without closing left behind (its pid no longer runs), including
processes still running inside its namespaces.
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import random
import re
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from .processes import pid_alive

IP_S = 10.0  # bound on each ip/tc command
SUBNET_TRIES_MAX = 50
TAG_RE = re.compile(r"^el([0-9a-f]{6})([0-9a-f]{2})")
NODES_MAX = 17  # a link per pair of nodes: 136 at most
_counter = itertools.count(random.randrange(256))
_counter_lock = threading.Lock()


class NetnsError(RuntimeError):
    """An ip or tc command failed; the message holds the command and its error output."""


def run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(list(argv), capture_output=True, text=True, timeout=IP_S)
    if check and out.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: {out.stderr.strip() or out.stdout.strip()}")
    return out


def available() -> str | None:
    """None when this process can build namespaces; otherwise why not, in one sentence."""
    if os.geteuid() != 0:
        return "not root: network namespaces need root (CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"`{tool}` (iproute2) is not installed"
    probe = f"{new_tag()}-probe"  # named like a cluster's, so a leftover is swept
    out = run(["ip", "netns", "add", probe], check=False)
    if out.returncode != 0:
        return f"cannot create a network namespace: {out.stderr.strip()}"
    run(["ip", "netns", "del", probe], check=False)
    return None


def new_tag() -> str:
    with _counter_lock:
        n = next(_counter) % 256
    return f"el{os.getpid() % (1 << 24):06x}{n:02x}"


def _owner_alive(tag_match: re.Match[str]) -> bool:
    pid = int(tag_match.group(1), 16)
    return pid == os.getpid() % (1 << 24) or pid_alive(pid)


def sweep_stale() -> list[str]:
    """Remove namespaces, bridges and veths whose owner no longer runs; what was removed."""
    removed: list[str] = []
    for name in run(["ip", "netns", "list"], check=False).stdout.split():
        found = TAG_RE.match(name)
        if found is None or _owner_alive(found):
            continue
        for pid in run(["ip", "netns", "pids", name], check=False).stdout.split():
            try:
                os.kill(int(pid), 9)
            except (ProcessLookupError, ValueError):
                pass
        run(["ip", "netns", "del", name], check=False)
        removed.append(f"netns {name}")
    for name in _links():
        found = TAG_RE.match(name)
        if found is not None and not _owner_alive(found):
            run(["ip", "link", "del", name], check=False)
            removed.append(f"link {name}")
    return removed


def _links() -> list[str]:
    out = run(["ip", "-o", "link", "show"], check=False).stdout
    return [m.group(1) for m in re.finditer(r"^\d+: ([^:@\s]+)", out, re.M)]


def leftovers(tag: str) -> list[str]:
    """Every namespace and link whose name starts with tag (for tests of the cleanup)."""
    names = [n for n in run(["ip", "netns", "list"], check=False).stdout.split()
             if n.startswith(tag)]
    return [f"netns {n}" for n in names] + [f"link {n}" for n in _links() if n.startswith(tag)]


def _used_networks() -> list[ipaddress.IPv4Network]:
    used: list[ipaddress.IPv4Network] = []
    for line in run(["ip", "-4", "-o", "addr", "show"], check=False).stdout.splitlines():
        found = re.search(r"inet (\S+)", line)
        if found:
            used.append(ipaddress.IPv4Interface(found.group(1)).network)
    for line in run(["ip", "-4", "route", "show", "table", "all"], check=False).stdout.splitlines():
        first = line.split()[0] if line.split() else ""
        if first in ("default", "broadcast", "local", "unreachable", "blackhole", "prohibit"):
            first = line.split()[1] if len(line.split()) > 1 else ""
        try:
            used.append(ipaddress.IPv4Network(first, strict=False))
        except ValueError:
            continue
    return [n for n in used if n.prefixlen > 0]


def pick_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.200.0.0-10.254.255.0 that no address or route of this machine overlaps."""
    used = _used_networks()
    for _ in range(SUBNET_TRIES_MAX):
        candidate = ipaddress.IPv4Network(
            f"10.{random.randrange(200, 255)}.{random.randrange(256)}.0/24")
        if not any(candidate.overlaps(n) for n in used):
            return candidate
    raise NetnsError(f"no unused /24 found in 10.200-254.x.0 after {SUBNET_TRIES_MAX} tries")


@dataclass
class Link:
    """One namespace and its address."""
    node: str  # "c" for the controller, the broker id otherwise
    netns: str
    host_dev: str  # in the root namespace: its end of the node's root link
    address: str


class Namespaces:
    """The namespaces and links of one cluster, and the tc queues that make its faults."""

    def __init__(self, nodes: Sequence[str]) -> None:
        if len(nodes) > NODES_MAX:
            raise NetnsError(f"at most {NODES_MAX} nodes on a namespace network, not "
                             f"{len(nodes)} (a link per pair of nodes)")
        self.tag = new_tag()
        self.links: dict[str, Link] = {}
        self.subnet = ipaddress.IPv4Network("0.0.0.0/32")
        self.gateway = ""  # the clients' address (the root namespace's end of every root link)
        self._nodes = list(nodes)
        self._queues: dict[tuple[str | None, str], str] = {}  # (netns, dev) -> queue applied
        self._lock = threading.Lock()

    # ------------------------------------------------------------------------------ build
    def create(self) -> None:
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    def _create(self) -> None:
        self.subnet = pick_subnet()
        hosts = list(self.subnet.hosts())
        self.gateway = str(hosts[0])
        for i, node in enumerate(self._nodes):
            link = Link(node, f"{self.tag}-{node}", f"{self.tag}h{node}", str(hosts[10 + i]))
            self.links[node] = link
            ns = ["ip", "-n", link.netns]
            run(["ip", "netns", "add", link.netns])
            run([*ns, "addr", "add", f"{link.address}/32", "dev", "lo"])
            run([*ns, "link", "set", "lo", "up"])
            run(["ip", "link", "add", link.host_dev, "type", "veth", "peer", "name", "root",
                 "netns", link.netns])
            run(["ip", "addr", "add", f"{self.gateway}/32", "dev", link.host_dev])
            run(["ip", "link", "set", link.host_dev, "up"])
            run([*ns, "link", "set", "root", "up"])
            run(["ip", "route", "add", f"{link.address}/32", "dev", link.host_dev, "src",
                 self.gateway])
            run([*ns, "route", "add", f"{self.gateway}/32", "dev", "root", "src", link.address])
        self._check_subnet_ours()
        for i, a in enumerate(self._nodes):
            for b in self._nodes[i + 1:]:
                la, lb = self.links[a], self.links[b]
                run(["ip", "link", "add", f"to{b}", "netns", la.netns, "type", "veth", "peer",
                     "name", f"to{a}", "netns", lb.netns])
                for mine, other in ((la, lb), (lb, la)):
                    ns = ["ip", "-n", mine.netns]
                    run([*ns, "link", "set", f"to{other.node}", "up"])
                    run([*ns, "route", "add", f"{other.address}/32", "dev", f"to{other.node}",
                         "src", mine.address])

    def _check_subnet_ours(self) -> None:
        """Another cluster may have picked the same subnet at the same moment: then give up
        this one (the caller retries with another)."""
        ours = {link.host_dev for link in self.links.values()}
        for line in run(["ip", "-4", "-o", "addr", "show"]).stdout.splitlines():
            dev = line.split()[1]
            found = re.search(r"inet (\S+)", line)
            if dev not in ours and found and \
                    ipaddress.IPv4Interface(found.group(1)).network.overlaps(self.subnet):
                raise NetnsError(f"subnet {self.subnet} also on {dev}")

    def close(self) -> None:
        """Remove everything this cluster made (safe to call twice, and after a failed create):
        deleting a namespace deletes the ends of links inside it, and so the pairs."""
        for link in self.links.values():
            run(["ip", "netns", "del", link.netns], check=False)
            run(["ip", "link", "del", link.host_dev], check=False)
        self._queues.clear()

    # ----------------------------------------------------------------------------- faults
    def address(self, node: str) -> str:
        return self.gateway if node == "clients" else self.links[node].address

    def _end(self, src: str, dst: str) -> tuple[str | None, str]:
        """(namespace, device) of the link end src sends to dst on (None: the root one)."""
        if src == "clients":
            return None, self.links[dst].host_dev
        return self.links[src].netns, "root" if dst == "clients" else f"to{dst}"

    def apply(self, cuts: set[tuple[str, str]], slow: dict[str, tuple[int, int, float]]) -> None:
        """Make the queues say exactly: these cuts, these slow nodes (delay ms, jitter ms,
        loss %); every other link end back to the default. Only changed ends are touched."""
        wanted: dict[tuple[str | None, str], str] = {}
        for node, (delay_ms, jitter_ms, loss_pct) in slow.items():
            netem = f"netem delay {delay_ms}ms" + (f" {jitter_ms}ms" if jitter_ms else "") \
                + (f" loss {loss_pct}%" if loss_pct else "")
            for other in [*self._nodes, "clients"]:
                if other != node:
                    wanted[self._end(node, other)] = netem
        for src, dst in cuts:
            wanted[self._end(src, dst)] = "pfifo limit 0"
        with self._lock:
            for end in set(self._queues) | set(wanted):
                queue = wanted.get(end, "")
                if self._queues.get(end, "") == queue:
                    continue
                netns, dev = end
                tc = ["tc", "-n", netns] if netns else ["tc"]
                if queue:
                    run([*tc, "qdisc", "replace", "dev", dev, "root", *queue.split()])
                    self._queues[end] = queue
                else:
                    run([*tc, "qdisc", "del", "dev", dev, "root"], check=False)
                    self._queues.pop(end, None)

    def has_netem(self) -> bool:
        """Whether this kernel has netem: try one on a link end nothing uses yet."""
        link = next(iter(self.links.values()))
        out = run(["tc", "-n", link.netns, "qdisc", "add", "dev", "lo", "root", "netem",
                   "delay", "1ms"], check=False)
        if out.returncode == 0:
            run(["tc", "-n", link.netns, "qdisc", "del", "dev", "lo", "root"], check=False)
            return True
        return False
