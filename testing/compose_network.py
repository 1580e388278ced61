"""Network faults between the containers of a Compose project, made inside each container's
own network namespace from the host (`nsenter --net`, as root), the containers untouched.

- A cut from A to B is an iptables rule in A's namespace, `-d <B's address> -j DROP`, in a chain
  of ours (`EPOCHLOG-FAULTS`) jumped to from INPUT and OUTPUT: A's packets to B are silently
  dropped as a partition drops them, not refused, while both run on. A cut from the clients'
  side (the host) to A is `-s <gateway> -j DROP` in A (traffic from the host's published ports
  reaches a container from the project network's gateway), and from A to the clients
  `-d <gateway> -j DROP`. A container that is not running has no namespace: its rules, and the
  rules naming its address, are made when it runs again (the owner calls `apply` after a start).
- Slowness is a `tc netem` queue on the container's interface (delay, jitter, loss of what it
  sends). A kernel built without netem (CONFIG_NET_SCH_NETEM) cannot do this: `apply` then
  raises NetworkFaultUnsupported naming the limitation. Unlike the local Cluster, which puts a
  delaying proxy in front of each process then, a compose cluster has no proxy to fall back to.
- `apply(state)` makes every running container's rules and queue what the state says (it
  flushes our chain and writes it again), so it is idempotent and heals with an empty state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .compose_project import ENGINE_S_MAX, ComposeError, run
from .network import CLIENTS, NetworkFaultUnsupported, Slow

CHAIN = "EPOCHLOG-FAULTS"
HOOKS = ("INPUT", "OUTPUT")
IPTABLES = ["iptables", "--wait", "5"]
NO_NETEM = ("qdisc kind is unknown", "Specified qdisc not found", "Unknown qdisc")


@dataclass(frozen=True)
class Container:
    """A running container as the network layer sees it."""
    key: str  # "c" or the broker id as text
    pid: int  # its init process, whose namespace its network is
    address: str  # on the project's network


def in_netns(pid: int, argv: Sequence[str], check: bool = True) -> str:
    """A command run in the network namespace of process `pid`; its output."""
    return run(["nsenter", "--target", str(pid), "--net", *argv], timeout_s=ENGINE_S_MAX,
               check=check).stdout


class ContainerNetwork:
    """The faults on one project's containers (see the module's notes)."""

    def __init__(self) -> None:
        self._netem_missing = ""  # tc's answer once a netem queue was refused
        self._slowed: dict[int, Slow] = {}  # pid -> the queue it has now

    def apply(self, containers: Sequence[Container], gateway: str,
              cuts: set[tuple[str, str]], slow: Mapping[str, Slow]) -> None:
        if slow and self._netem_missing:
            raise self._unsupported()
        address = {c.key: c.address for c in containers}
        address[CLIENTS] = gateway
        for c in containers:
            rules = [["-d", address[dst], "-j", "DROP"] for src, dst in sorted(cuts)
                     if src == c.key and dst in address]
            if (CLIENTS, c.key) in cuts:
                rules.append(["-s", gateway, "-j", "DROP"])
            self._set_slow(c, slow.get(c.key))
            self._set_rules(c.pid, rules)

    def _set_rules(self, pid: int, rules: list[list[str]]) -> None:
        in_netns(pid, [*IPTABLES, "-N", CHAIN], check=False)  # exists already: fine
        for hook in HOOKS:
            present = run(["nsenter", "--target", str(pid), "--net", *IPTABLES, "-C", hook,
                           "-j", CHAIN], check=False, timeout_s=ENGINE_S_MAX).returncode == 0
            if not present:
                in_netns(pid, [*IPTABLES, "-I", hook, "1", "-j", CHAIN])
        in_netns(pid, [*IPTABLES, "-F", CHAIN])
        for rule in rules:
            in_netns(pid, [*IPTABLES, "-A", CHAIN, *rule])

    def _set_slow(self, c: Container, wanted: Slow | None) -> None:
        if self._slowed.get(c.pid) == wanted:
            return
        device = self._device(c)
        if wanted is None:
            in_netns(c.pid, ["tc", "qdisc", "del", "dev", device, "root"], check=False)
            self._slowed.pop(c.pid, None)
            return
        netem = ["netem", "delay", f"{wanted.delay_ms}ms"]
        if wanted.jitter_ms:
            netem.append(f"{wanted.jitter_ms}ms")
        if wanted.loss_pct:
            netem += ["loss", f"{wanted.loss_pct}%"]
        try:
            in_netns(c.pid, ["tc", "qdisc", "replace", "dev", device, "root", *netem])
        except ComposeError as exc:
            if any(text in str(exc) for text in NO_NETEM):
                self._netem_missing = str(exc).strip().splitlines()[-1]
                raise self._unsupported() from exc
            raise
        self._slowed[c.pid] = wanted

    @staticmethod
    def _device(c: Container) -> str:
        """The container's interface on the project's network (eth0 with one network)."""
        for line in in_netns(c.pid, ["ip", "-o", "-4", "addr", "show"]).splitlines():
            fields = line.split()
            if len(fields) > 3 and fields[3].split("/")[0] == c.address:
                return fields[1].split("@")[0]
        raise ComposeError(f"container of node {c.key}: no interface has {c.address}")

    def _unsupported(self) -> NetworkFaultUnsupported:
        return NetworkFaultUnsupported(
            "slow() needs tc netem, and this kernel has none (CONFIG_NET_SCH_NETEM; tc said: "
            f"{self._netem_missing}). A compose cluster has no proxy to delay bytes in instead "
            "(the local Cluster with network=True falls back to one); cuts, kill, stop, pause "
            "and restart still work. Use the local target for slow followers on this machine.")
