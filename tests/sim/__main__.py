"""Replay seeds: `python -m tests.sim [--group|--txn] SEED [SEED...] [--verbose] [--SETTING=V ...]`.

`--group`: the consumer group simulation (group_harness.py, settings GroupSimSettings) instead of
the cluster's; `--txn`: the transaction simulation (txn_harness.py, settings TxnSimSettings).

A seed with the same settings replays exactly (same events, same faults, same verdict).
`--verbose` prints the simulation's trace interleaved with the real code's log lines, each
stamped with simulated time. `--range=START:COUNT` runs many seeds and prints the failures.
Settings are the fields of harness.Settings, e.g. `--brokers=5 --broken=no_truncation`.
Exit status 1 if any seed failed.
"""

from __future__ import annotations

import dataclasses
import sys

from .group_harness import GroupResult, GroupSimSettings, group_settings_for, run_group_seed
from .harness import Result, Settings, run_seed, settings_for
from .txn_harness import TxnResult, TxnSimSettings, run_txn_seed, txn_settings_for


def _parse(argv: list[str]) -> tuple[list[int], dict[str, object], bool, bool]:
    seeds: list[int] = []
    overrides: dict[str, object] = {}
    verbose = liveness = False
    kind: type = GroupSimSettings if "--group" in argv else \
        TxnSimSettings if "--txn" in argv else Settings
    fields = {f.name: f for f in dataclasses.fields(kind)}
    for arg in argv:
        if arg in ("--group", "--txn"):
            continue
        if arg in ("-v", "--verbose"):
            verbose = True
        elif arg == "--liveness":
            liveness = True
        elif arg.startswith("--range="):
            start, count = arg.split("=", 1)[1].split(":")
            seeds += range(int(start), int(start) + int(count))
        elif arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            name = name.replace("-", "_")
            if name not in fields:
                raise SystemExit(f"unknown setting {name!r}; known: {', '.join(fields)}")
            default = getattr(kind(), name)
            if isinstance(default, bool):
                overrides[name] = value.lower() in ("1", "true", "yes")
            elif isinstance(default, int):
                overrides[name] = int(value)
            else:
                overrides[name] = value
        elif arg.lstrip("-").isdigit():
            seeds.append(int(arg))
        else:
            raise SystemExit(__doc__)
    if not seeds:
        raise SystemExit(__doc__)
    return seeds, overrides, verbose, liveness


def main(argv: list[str]) -> int:
    seeds, overrides, verbose, liveness = _parse(argv)
    failed = 0
    for seed in seeds:
        result: GroupResult | TxnResult | Result
        if "--group" in argv:
            result = run_group_seed(seed, group_settings_for(seed, **overrides), verbose)
        elif "--txn" in argv:
            result = run_txn_seed(seed, txn_settings_for(seed, **overrides), verbose)
        else:
            result = run_seed(seed, settings_for(seed, **overrides), verbose=verbose)
        if verbose:
            print("\n".join(result.trace))
        bad = not result.ok or ((liveness or "--group" in argv) and bool(result.liveness))
        failed += bad
        if bad or len(seeds) == 1 or verbose:
            print(result.describe())
    if len(seeds) > 1:
        print(f"{len(seeds) - failed}/{len(seeds)} seeds passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
