"""What must hold of a consumer group whatever the faults.

While the simulation runs:
- no partition is owned by two live members of one generation (after every member event: the
  partitions each live member's application holds, keyed by the member's generation);
- no committed offset goes backwards (at the coordinator, as each commit is applied);
- a member starts a partition at its committed offset (checked where the committed offset is
  read back).
At the end, after the faults are healed and a quiet period has passed (`final`, liveness):
- every partition is assigned to a live member that consumed from it during the quiet period,
  and the live members agree on one generation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.client.group_member import NO_GENERATION

if TYPE_CHECKING:
    from epochlog.client.types import TopicPartition

    from .group_member_node import MemberNode

TP = tuple[str, int]
VIOLATIONS_MAX = 20


class GroupCheckers:
    def __init__(self) -> None:
        self.violations: list[str] = []
        self.liveness: list[str] = []
        self.members: list[MemberNode] = []
        self.clock = lambda: 0
        self.last_consumed: dict[TP, int] = {}
        self.generations_seen: set[int] = set()
        self.commits_checked = 0
        self.ownership_checks = 0
        self.fatal_errors: list[str] = []
        self.counts: dict[str, int] = {}  # what happened, to show the runs exercise it

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def _violation(self, text: str) -> None:
        if len(self.violations) < VIOLATIONS_MAX:
            self.violations.append(f"@{self.clock()}ms {text}")

    # ------------------------------------------------------------------ while running
    def member_changed(self) -> None:
        """No partition owned by two live members of one generation."""
        self.ownership_checks += 1
        owners: dict[tuple[int, TopicPartition], str] = {}
        for m in self.members:
            # The generation whose SyncGroup gave the application its partitions (a round cut
            # short by a coordinator move leaves a JoinGroup's generation in the machine, which
            # the new coordinator, loading the last stored one, may hand out again)
            generation = m.app.generation
            if not m.live or generation == NO_GENERATION:
                continue
            self.generations_seen.add(generation)
            for tp in m.app.assignment:
                other = owners.setdefault((generation, tp), m.name)
                if other != m.name:
                    self._violation(f"{tp[0]}-{tp[1]} owned by {other} and {m.name} in "
                                    f"generation {generation}")

    def committed(self, tp: TP, before: int | None, offset: int, member_id: str,
                  generation: int) -> None:
        """No committed offset goes backwards."""
        self.commits_checked += 1
        if before is not None and offset < before:
            self._violation(f"committed offset of {tp[0]}-{tp[1]} went back from {before} to "
                            f"{offset} (member {member_id}, generation {generation})")

    def consumed(self, member: MemberNode, tp: TopicPartition) -> None:
        self.last_consumed[(tp.topic, tp.partition)] = self.clock()

    def started(self, member: MemberNode, tp: TopicPartition, offset: int) -> None:
        pass

    def fatal(self, member: MemberNode, why: str) -> None:
        self.fatal_errors.append(f"{member.name}: {why}")

    # ------------------------------------------------------------------ at the end
    def final(self, topic: str, partitions: int, quiet_since_ms: int) -> None:
        live = [m for m in self.members if m.live]
        if not live:
            self.liveness.append("no live member at the end")
            return
        generations = {m.machine.generation for m in live}
        if len(generations) != 1 or generations == {NO_GENERATION}:
            self.liveness.append(f"live members in generations {sorted(generations)}: "
                                 + ", ".join(f"{m.name} {m.machine.waiting_for()}"
                                             for m in live))
        owned = {(tp.topic, tp.partition) for m in live for tp in m.app.assignment}
        for p in range(partitions):
            tp = (topic, p)
            if tp not in owned:
                self.liveness.append(f"{topic}-{p} assigned to no live member")
            elif self.last_consumed.get(tp, -1) < quiet_since_ms:
                self.liveness.append(f"{topic}-{p} not consumed since {quiet_since_ms} ms")
