"""The consumer group simulation in CI: many seeds, each a group of real member state machines
(client/group_member.py) against the broker's real group coordinator core (broker/groups/core.py
over the group state machine, broker/groups/state.py) under faults, checked for the group's
guarantees (group_checkers.py): no partition owned by two live members of one generation, no
committed offset going back, and once healed, every partition assigned and consumed.

Seeds: `EPOCHLOG_GROUP_SIM_SEEDS=START:COUNT` picks the range (default 0:1000; about 25 s on 2
cores); a failure prints the command that replays it with a trace
(`python -m tests.sim --group SEED --verbose`). More seeds with `--run-slow`.

The checkers are shown able to fail: members broken on purpose (one that keeps consuming the
partitions it was told to revoke; one that commits offsets behind its position) are caught.
"""

from __future__ import annotations

import os

import pytest

from .group_harness import BROKEN_VARIANTS, GroupResult, group_settings_for, run_group_seed
from .pool import run_in_pool

CI_SEEDS = "0:1000"
SLOW_SEEDS = 20_000
BROKEN_SEEDS_MAX = 40  # a broken variant must be caught within this many seeds
# What the default seeds must exercise, at least this many times in all
EXERCISED = {"faults": 1000, "moves": 1000, "revoked": 100, "lost": 100,
             "CommitFailedError": 10, "fatal": 1}


def _run(args: tuple[int, str]) -> GroupResult:
    seed, broken = args
    result = run_group_seed(seed, group_settings_for(seed, broken=broken))
    result.trace = []
    return result


def _run_many(seeds: range, broken: str = "") -> list[GroupResult]:
    return run_in_pool(_run, [(seed, broken) for seed in seeds], chunksize=16)


def _seed_range(spec: str) -> range:
    start, count = (int(x) for x in spec.split(":"))
    return range(start, start + count)


def _report(results: list[GroupResult]) -> str:
    failed = [r for r in results if not r.ok or r.liveness]
    head = f"{len(results) - len(failed)}/{len(results)} group seeds passed"
    return "\n".join([head, *(r.describe() for r in failed[:20])])


def _total(results: list[GroupResult], key: str) -> int:
    return sum(int(r.figures.get(key, 0)) for r in results)


def test_group_seeds_keep_the_guarantees() -> None:
    """Every seed: one owner per partition per generation, committed offsets never back, no
    exception from the real code; once healed, every partition assigned and consumed."""
    results = _run_many(_seed_range(os.environ.get("EPOCHLOG_GROUP_SIM_SEEDS", CI_SEEDS)))
    print(_report(results))
    assert all(r.ok and not r.liveness for r in results), _report(results)
    if len(results) >= 1000:
        done = {key: _total(results, key) for key in EXERCISED}
        assert all(done[k] >= n for k, n in EXERCISED.items()), done


@pytest.mark.slow
def test_many_group_seeds_keep_the_guarantees() -> None:
    """Safety on every seed. Liveness findings are printed: a known one (seed 1002736,
    docs/simulation.md) is a gap of the protocol as Kafka has it."""
    results = _run_many(range(1_000_000, 1_000_000 + SLOW_SEEDS))
    print(_report(results))
    assert all(r.ok for r in results), _report(results)


@pytest.mark.parametrize("broken", BROKEN_VARIANTS)
def test_checkers_catch_a_broken_member(broken: str) -> None:
    """Proof that the checkers can fail: a member broken on purpose is caught within
    BROKEN_SEEDS_MAX seeds (keep_revoked: two owners in one generation; stale_commit: a
    committed offset going back)."""
    results = _run_many(range(BROKEN_SEEDS_MAX), broken)
    caught = [r for r in results if r.violations]
    assert caught, f"{broken}: no seed out of {BROKEN_SEEDS_MAX} was caught"
    wanted = {"keep_revoked": "owned by", "stale_commit": "went back"}[broken]
    assert any(wanted in v for r in caught for v in r.violations), caught[0].describe()


def test_a_group_seed_replays_exactly() -> None:
    first, second = run_group_seed(7), run_group_seed(7)
    assert first.figures == second.figures
    assert (first.violations, first.liveness) == (second.violations, second.liveness)
    assert run_group_seed(8).figures != first.figures
