"""`epochlog chaos list` and `epochlog chaos run --scenario NAME --seed S --duration 60s
--report DIR [--client ours|confluent|kafka-python|aiokafka] [--target local|compose]`.

run prints the schedule, shows the run live (live.py), writes the report folder when asked
(report.py), prints the verdict, and exits 0 when the history checks clean (expected loss
included), 1 on any failing anomaly or problem or on a run that tested nothing (no acknowledged
send, no record read), 2 on bad arguments or a client library that is not installed.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..history import History
from ..ports import PORT_RANGE_ENV, parse_port_range
from ..targets import TARGETS, TargetUnavailable
from .scenarios import DURATION_S_MIN, SCENARIOS, get
from .workload import CLIENTS, ClientUnavailable, require_client

DURATION_S_MAX = 24 * 3600.0
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")


def parse_duration(text: str) -> float:
    """Seconds in "60s", "2m", "1h", "500ms" or a bare number of seconds."""
    found = _DURATION.match(text)
    if found is None:
        raise argparse.ArgumentTypeError(f"duration {text!r}: a number with ms, s, m or h "
                                         "(e.g. 60s, 2m)")
    seconds = float(found.group(1)) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[
        found.group(2)]
    if not DURATION_S_MIN <= seconds <= DURATION_S_MAX:  # a schedule needs room for a fault
        raise argparse.ArgumentTypeError(f"duration {text!r}: at least {DURATION_S_MIN:g}s and "
                                         "at most 24h")
    return seconds


def add_parser(subparsers: Any) -> None:
    chaos = subparsers.add_parser("chaos", help="fault scenarios against a real cluster, "
                                  "checked for lost and reordered records")
    actions = chaos.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="the scenarios")
    listing.set_defaults(func=list_command)
    run = actions.add_parser("run", help="run one scenario")
    run.add_argument("--scenario", required=True, choices=sorted(SCENARIOS), metavar="NAME")
    run.add_argument("--seed", type=int, default=1, help="the schedule's seed (default 1)")
    run.add_argument("--duration", type=parse_duration, default=60.0,
                     help="how long the workload runs under faults (default 60s)")
    run.add_argument("--report", type=Path, help="write the report folder here")
    run.add_argument("--client", choices=CLIENTS, default="ours",
                     help="the client library of the workload (default ours)")
    run.add_argument("--target", choices=TARGETS, default="local",
                     help="where the cluster runs (default local processes)")
    run.add_argument("--rate", type=float, default=50.0,
                     help="records a second per producer (default 50)")
    run.add_argument("--port-range", type=_port_range, metavar="LOW-HIGH",
                     help="the ports the local cluster listens on (default: outside the "
                          "kernel's ephemeral range; also EPOCHLOG_PORT_RANGE)")
    run.set_defaults(func=run_command)


def _port_range(text: str) -> str:
    try:
        parse_port_range(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def list_command(args: argparse.Namespace) -> int:
    for s in SCENARIOS.values():
        needs = " [network faults]" if s.network else ""
        loss = " [loss expected]" if s.loss_expected else ""
        local = " [local target only]" if s.local_only else ""
        print(f"{s.name:18} {s.summary}{needs}{loss}{local}")
    return 0


def run_command(args: argparse.Namespace,
                tamper: Callable[[History], None] | None = None) -> int:
    from . import live, report
    from .runner import RunConfig, run

    scenario = get(args.scenario)
    if scenario.local_only and args.target != "local":
        print(f"epochlog chaos: scenario {scenario.name} runs on the local target only: it "
              f"writes into the brokers' data dirs", file=sys.stderr)
        return 2
    try:
        require_client(args.client)
    except ClientUnavailable as exc:
        print(f"epochlog chaos: {exc}", file=sys.stderr)
        return 2
    if args.port_range is not None:
        os.environ[PORT_RANGE_ENV] = args.port_range
    config = RunConfig(scenario=scenario, seed=args.seed, duration_s=args.duration,
                       client=args.client, target=args.target, rate_per_s=args.rate)
    schedule = scenario.schedule(args.seed, args.duration)
    print(f"scenario {scenario.name}, seed {args.seed}, {args.duration:g}s, client "
          f"{args.client}, target {args.target}; schedule (seconds since the workload "
          f"starts):", file=sys.stderr)
    for w in schedule:
        print(f"  {w.describe()}", file=sys.stderr)
    try:
        with live.display(config, schedule) as observer:
            outcome = run(config, observer, tamper=tamper)
    except TargetUnavailable as exc:
        print(f"epochlog chaos: {exc}", file=sys.stderr)
        return 2
    if args.report is not None:
        written = report.write(outcome, args.report)
        print(f"report: {written}", file=sys.stderr)
    print(report.summary(outcome))
    return 0 if outcome.ok else 1
