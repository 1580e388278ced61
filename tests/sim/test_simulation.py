"""The deterministic simulation in CI: many seeds, each a small cluster under faults, checked for
the safety guarantees of docs/design.md (no acknowledged write lost, replicas identical up to the
high watermark, the high watermark never going back, one leader per epoch). See
docs/simulation.md.

Seeds: `EPOCHLOG_SIM_SEEDS=START:COUNT` picks the range (default 0:1000); a failure prints, per
seed, what broke and the one command that replays it with a trace (`python -m tests.sim SEED
--verbose`). Runs on a pool of 2 processes (the CI machine has 2 cores).

The checkers are shown able to fail: the same runs with a deliberately broken harness
(followers that never truncate; acks=all answered on the leader's append) must be caught; and
the broker's hold of control requests until its registration answer (the fix of seeds 3, 847,
923) is shown to matter: without it pinned seeds lose acknowledged writes.
"""

from __future__ import annotations

import os

import pytest

from .harness import Result, run_seed, settings_for
from .pool import run_in_pool

CI_SEEDS = "0:1000"
SLOW_SEEDS = 20_000
BROKEN_SEEDS_MAX = 40  # a broken variant must be caught within this many seeds


def _run(args: tuple[int, dict[str, object]]) -> Result:
    seed, overrides = args
    result = run_seed(seed, settings_for(seed, **overrides))
    result.trace = []
    return result


def _run_many(seeds: range, **overrides: object) -> list[Result]:
    jobs = [(seed, overrides) for seed in seeds]
    return run_in_pool(_run, jobs, chunksize=8)


def _seed_range(spec: str) -> range:
    start, count = (int(x) for x in spec.split(":"))
    return range(start, start + count)


def _report(results: list[Result]) -> str:
    failed = [r for r in results if not r.ok]
    acked = sum(int(r.figures.get("acked", 0)) for r in results)
    faults = sum(int(r.figures.get("faults", 0)) for r in results)
    head = (f"{len(results) - len(failed)}/{len(results)} seeds passed ({acked} acknowledged "
            f"writes checked, {faults} faults injected)")
    return "\n".join([head, *(r.describe() for r in failed[:20])])


def test_seeds_keep_the_safety_guarantees() -> None:
    """Every seed: no acknowledged write lost, ISR members identical up to the high watermark,
    high watermarks monotonic, one leader per epoch; no exception from the real code; and once
    healed, every partition leads again and takes writes (liveness)."""
    results = _run_many(_seed_range(os.environ.get("EPOCHLOG_SIM_SEEDS", CI_SEEDS)))
    print(_report(results))
    assert all(r.ok for r in results), _report(results)
    stuck = [f"seed {r.seed}: {r.liveness}" for r in results if r.liveness]
    assert not stuck, "the cluster did not recover after the faults were healed:\n" + \
        "\n".join(stuck[:20])
    # The runs must exercise something: writes acknowledged and faults injected in every seed,
    # and across the seeds brokers back from crashes (unclean restarts, which leave ISR and ELR)
    # and leaders elected from the eligible leader replicas (KIP-966).
    assert all(int(r.figures["acked"]) > 0 and int(r.figures["faults"]) > 0 for r in results)
    for kind in ("unclean_restarts", "elr_elections"):
        assert sum(int(r.figures[kind]) for r in results) >= min(len(results), 10), kind


@pytest.mark.slow
def test_many_seeds_keep_the_safety_guarantees() -> None:
    results = _run_many(range(1_000_000, 1_000_000 + SLOW_SEEDS))
    print(_report(results))
    assert all(r.ok for r in results), _report(results)


@pytest.mark.parametrize("broken", ["no_truncation", "ack_on_append"])
def test_checkers_catch_a_broken_cluster(broken: str) -> None:
    """Proof that the checkers can fail: a harness that breaks replication on purpose is caught
    within BROKEN_SEEDS_MAX seeds."""
    results = _run_many(range(BROKEN_SEEDS_MAX), broken=broken)
    caught = [r for r in results if r.violations]
    assert caught, f"{broken}: no seed out of {BROKEN_SEEDS_MAX} was caught"


# Seeds that lose acknowledged writes when the broker judges control requests before its
# registration answer (2 of 0-999). If the harness's random draws change and this test fails
# because these seeds no longer hit that window, re-pin them from
# `python -m tests.sim --range=0:1000 --broken=admit_unconfirmed` (re-pinned when crashed
# brokers began to restart uncleanly, KIP-966, and when the broker's drivers became the machines
# the simulation drives).
UNCONFIRMED_SEEDS = (367, 850)


def test_control_requests_wait_for_the_registration_answer() -> None:
    """The bug of seeds 3, 847, 923 (docs/simulation.md) is still within the harness's reach:
    with the broker's hold disabled these seeds lose acknowledged writes; with the real rule
    (ControlEpochs.must_wait, held by the broker's ControlHold) they keep them."""
    broken = [run_seed(s, settings_for(s, broken="admit_unconfirmed")) for s in UNCONFIRMED_SEEDS]
    assert any(r.violations for r in broken), [r.describe() for r in broken]
    fixed = [run_seed(s) for s in UNCONFIRMED_SEEDS]
    assert all(r.ok for r in fixed), [r.describe() for r in fixed]


def test_a_seed_replays_exactly() -> None:
    """Same seed, same settings: the same events, faults, acknowledgements and verdict."""
    first, second = run_seed(11), run_seed(11)
    keys = ("events", "sim_ms", "acked", "produced", "faults", "messages", "lost",
            "leader_epochs", "truncations")
    assert [first.figures[k] for k in keys] == [second.figures[k] for k in keys]
    assert (first.violations, first.liveness) == (second.violations, second.liveness)
    other = run_seed(12)
    assert [other.figures[k] for k in keys] != [first.figures[k] for k in keys]
