"""What one seed of a simulation found, shared by the three simulations (the cluster's, the
group's, the transactions'): safety violations, liveness failures (reported apart: a seed can be
safe and still stuck), an exception, figures, the trace, and the command that replays it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, TypeVar

S = TypeVar("S")


@dataclass
class SimResult(Generic[S]):
    seed: int
    settings: S
    violations: list[str] = field(default_factory=list)
    liveness: list[str] = field(default_factory=list)
    error: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    trace: list[str] = field(default_factory=list)
    # whether a liveness failure fails the seed (the transaction simulation's do)
    LIVENESS_FAILS: ClassVar[bool] = False

    @property
    def ok(self) -> bool:
        return (not self.violations and self.error is None
                and not (self.LIVENESS_FAILS and self.liveness))

    def shape(self) -> str:
        """What was simulated, for the first line ("3 brokers, 1 partitions")."""
        raise NotImplementedError

    def replay_command(self) -> str:
        raise NotImplementedError

    def describe(self) -> str:
        lines = [f"{self.seed_name()}: {'ok' if self.ok else 'FAILED'} ({self.shape()}) "
                 f"{self.figures}"]
        if self.error:
            lines.append(f"  exception: {self.error}")
        lines += [f"  violation: {v}" for v in self.violations[:10]]
        lines += [f"  liveness: {v}" for v in self.liveness[:10]]
        if not self.ok or self.liveness:
            lines.append(f"  replay: {self.replay_command()}")
        return "\n".join(lines)

    def seed_name(self) -> str:
        return f"seed {self.seed}"
