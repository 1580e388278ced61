"""The fault schedule: what goes wrong, when, and for how long, all drawn from the seed.

Faults start at random gaps during the chaos phase; each one ends by itself (a restart, a
resume, a healed link) after a random time that may outlast the chaos phase, and `heal_all()` at
the end of the chaos phase ends whatever is still going on (restarting crashed nodes, resuming
paused ones, healing the network) so the quiet phase can converge.

Broker faults mostly hit a broker that currently leads a partition (LEADER_BIAS), so that
leader changes, truncations and zombies are frequent. Kinds (weights in KINDS): crash and later
restart a broker or the controller (files survive; the controller's metadata log survives);
pause one (SIGSTOP), sometimes past the session timeout, which makes a zombie; partition the
servers into two random groups; cut one broker off from the other brokers only (replication
stops, heartbeats go on: ISR shrink) or from the controller only (session expiry while
replication goes on); make every link lossy for a while.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .scheduler import Node, Scheduler

if TYPE_CHECKING:
    from .harness import Settings
    from .network import Network

LEADER_BIAS = 0.6  # the share of broker faults aimed at a current leader
KINDS = {"crash_broker": 4, "pause_broker": 3, "crash_controller": 1, "pause_controller": 1,
         "partition": 2, "cut_replication": 1, "cut_controller": 1, "lossy": 1}


class FaultInjector:
    def __init__(self, sim: Scheduler, net: Network, settings: Settings, controller: Node,
                 brokers: list[Node]) -> None:
        self.sim = sim
        self.rng = sim.rng
        self.net = net
        self.settings = settings
        self.controller = controller
        self.brokers = brokers
        self.injected: dict[str, int] = {}

    def plan(self, start_ms: int, end_ms: int) -> None:
        t = start_ms
        while True:
            t += self.rng.randint(self.settings.fault_gap_ms_min, self.settings.fault_gap_ms_max)
            if t >= end_ms:
                return
            self.sim.at(t, self._inject)

    def _duration(self) -> int:
        s = self.settings
        if self.rng.random() < 0.3:  # long enough for sessions to expire
            return self.rng.randint(s.session_timeout_ms, s.session_timeout_ms * 3)
        return self.rng.randint(20, s.session_timeout_ms)

    def _inject(self) -> None:
        kinds = list(KINDS)
        kind = self.rng.choices(kinds, weights=[KINDS[k] for k in kinds])[0]
        self.injected[kind] = self.injected.get(kind, 0) + 1
        duration = self._duration()
        servers = [self.controller, *self.brokers]
        if kind in ("crash_broker", "crash_controller"):
            node = self._pick_broker() if kind == "crash_broker" else self.controller
            node.crash()
            self.sim.after(duration, self._restart, node)
        elif kind in ("pause_broker", "pause_controller"):
            node = self._pick_broker() if kind == "pause_broker" else self.controller
            node.pause(duration)
        elif kind == "partition":
            ids = [n.node_id for n in servers]
            self.rng.shuffle(ids)
            cut = self.rng.randint(1, len(ids) - 1)
            self.net.partition([ids[:cut], ids[cut:]])
            self.sim.after(duration, self._heal_links)
        elif kind == "cut_replication":
            victim = self._pick_broker().node_id
            others = [b.node_id for b in self.brokers if b.node_id != victim]
            self.net.partition([[victim], others])
            self.sim.after(duration, self._heal_links)
        elif kind == "cut_controller":
            victim = self._pick_broker().node_id
            self.net.partition([[victim], [self.controller.node_id]])
            self.sim.after(duration, self._heal_links)
        elif kind == "lossy":
            self.net.loss = self.rng.choice([0.05, 0.1, 0.3])
            self.sim.log(f"network: LOSSY {self.net.loss}")
            self.sim.after(duration, self._heal_links)

    def _pick_broker(self) -> Node:
        """Mostly a broker the controller holds as a leader: that is where faults hurt."""
        state = getattr(self.controller, "state", None)
        if state is not None and self.rng.random() < LEADER_BIAS:
            leaders = sorted({p.leader for t in state.topics.values()
                              for p in t.partitions.values() if p.leader >= 0})
            chosen = [b for b in self.brokers if b.node_id in leaders]
            if chosen:
                return self.rng.choice(chosen)
        return self.rng.choice(self.brokers)

    def _restart(self, node: Node) -> None:
        if not node.up:
            node.boot()

    def _heal_links(self) -> None:
        self.net.heal()

    def heal_all(self) -> None:
        self.sim.log("faults: HEAL ALL")
        self.net.heal()
        for node in [self.controller, *self.brokers]:
            node.resume_now()
            if not node.up:
                node.boot()
