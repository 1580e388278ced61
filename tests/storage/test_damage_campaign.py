"""The storage-fault campaign (issue 19): `epochlog chaos`'s storage-damage scenario, seed after
seed, on real processes. Each run: 3 brokers, replication factor 3, min.insync.replicas 2, an
idempotent acks=all workload and a consumer group; brokers stopped cleanly or SIGKILLed, one
file of theirs damaged (bits flipped, a page zeroed, a segment cut short, an index or a
checkpoint broken: epochlog.testing.damage), started again. The other replicas hold intact
copies, so the verdict must be clean: no acknowledged record missing from the final log, no
corrupt batch served to any client, the group's history consistent.

Default run: SEEDS (a handful); `--run-slow`: SLOW_SEEDS more (200, one test each), with longer
runs (more damage per run); a failing seed names its replay command.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from epochlog.broker.storage.checkpoints import read_offsets
from epochlog.broker.storage.epoch_cache import read_epoch_checkpoint
from epochlog.broker.storage.errors import CorruptCheckpoint
from epochlog.testing.chaos import report
from epochlog.testing.chaos.runner import Outcome, RunConfig, run
from epochlog.testing.chaos.scenarios import get
from epochlog.testing.damage import KINDS, damage
from epochlog.testing.history import Fault

SEEDS = (1, 2, 3)
SLOW_SEEDS = range(100, 300)  # 200
RUN_S = 12.0
SLOW_RUN_S = 20.0


def story(outcome: Outcome) -> str:
    return report.summary(outcome) + f"\nclient errors: {outcome.errors[:10]}"


def damages(outcome: Outcome) -> list[str]:
    return [op.detail for op in outcome.history.ops if isinstance(op, Fault)
            and op.kind == "damage"]


def campaign_run(seed: int, duration_s: float, base: Path) -> Outcome:
    return run(RunConfig(scenario=get("storage-damage"), seed=seed, duration_s=duration_s,
                         base_dir=base / f"seed-{seed}"))


@pytest.mark.parametrize("seed", SEEDS)
def test_damaged_replicas_lose_nothing_while_an_intact_copy_exists(seed: int,
                                                                   tmp_path: Path) -> None:
    outcome = campaign_run(seed, RUN_S, tmp_path)
    assert outcome.ok, story(outcome)
    assert outcome.lost_acked == 0 and not outcome.verdict.anomalies, story(outcome)
    assert outcome.verdict.stats["sends_acked"] > 100, story(outcome)
    assert damages(outcome), story(outcome)  # damage was done, and recorded in the history


@pytest.mark.slow
@pytest.mark.parametrize("seed", SLOW_SEEDS)
def test_the_long_campaign(seed: int, tmp_path: Path) -> None:
    """One item per seed, so that `--run-slow -n 3` spreads them over the workers."""
    outcome = campaign_run(seed, SLOW_RUN_S, tmp_path)
    replay = (f"replay: epochlog chaos run --scenario storage-damage --seed {seed} "
              f"--duration {SLOW_RUN_S:.0f}")
    assert outcome.ok and outcome.lost_acked == 0, f"{replay}\n{story(outcome)}"
    assert damages(outcome), story(outcome)


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_damages_a_file_and_says_which(kind: str, tmp_path: Path) -> None:
    """damage() on a data dir laid out as a broker's: the file named in its answer changed."""
    part = tmp_path / "chaos-0"
    part.mkdir()
    segment = part / f"{0:020d}.log"
    segment.write_bytes(bytes(range(256)) * 40)
    (part / f"{0:020d}.index").write_bytes(bytes(range(8)) * 16)
    (part / f"{0:020d}.txnindex").write_bytes(bytes(34) * 3)
    (part / f"{2000:020d}.snapshot").write_bytes(bytes(range(100)))
    (part / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n3 1500\n")
    (tmp_path / "replication-offset-checkpoint").write_text("0\n1\nchaos 0 2000\n")
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    what = damage(tmp_path, "chaos", random.Random(7), kind)
    changed = [p for p, data in before.items() if p.read_bytes() != data]
    assert len(changed) == 1 and str(changed[0]) in what, (what, changed)
    if kind.endswith("checkpoint"):  # never left as other numbers that parse
        read = read_epoch_checkpoint if kind == "epoch-checkpoint" else read_offsets
        for attempt in range(50):
            changed[0].write_bytes(before[changed[0]])
            damage(tmp_path, "chaos", random.Random(attempt), kind)
            with pytest.raises(CorruptCheckpoint):
                read(str(changed[0]))
