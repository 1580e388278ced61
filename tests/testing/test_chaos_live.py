"""What a chaos run shows while it runs: a line per fault when stderr is no terminal, and on a
terminal a rich panel with the elapsed time, ops/s, the faults so far and the fault now active."""

from __future__ import annotations

import io
import sys

import pytest
from rich.console import Console

from epochlog.testing.chaos import live
from epochlog.testing.chaos.runner import RunConfig
from epochlog.testing.chaos.scenarios import get
from epochlog.testing.history import History


def config() -> RunConfig:
    return RunConfig(scenario=get("kill-leader"), seed=3, duration_s=20.0)


def test_without_a_terminal_each_fault_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with live.display(config(), []) as observer:
        assert type(observer) is live.Lines
        observer.phase("running the workload")
        observer.fault("kill", (2,), "SIGKILL to pid 123")
        observer.fault("restart", (2,), "pid 456 (was killed)")
    lines = err.getvalue().splitlines()
    assert len(lines) == 3 and lines[1].endswith("fault 1: kill 2: SIGKILL to pid 123"), lines
    assert "fault 2: restart 2" in lines[2]


def test_on_a_terminal_the_panel_shows_time_rate_faults_and_the_current_one() -> None:
    schedule = get("kill-leader").schedule(3, 20.0)
    panel = live.Panel(config(), schedule)
    history = History()
    panel.started(history)
    for i in range(5):
        history.record_fault("heal", (), f"{i}")
    panel.phase("running the workload")
    panel.fault("kill", (1,), "SIGKILL to pid 9")
    panel.window(schedule[0])
    out = io.StringIO()
    Console(file=out, width=120).print(panel.render())
    text = out.getvalue()
    for expected in ("kill-leader (seed 3, client ours)", "the workload runs 20s under faults",
                     "running the workload", "(5 recorded)", "1 applied; last: kill 1: SIGKILL",
                     schedule[0].describe()):
        assert expected in text, text
    panel.window(None)
    out = io.StringIO()
    Console(file=out, width=120).print(panel.render())
    assert "no fault active" in out.getvalue()


def test_console_lines_count_from_the_workloads_start_as_the_report_does() -> None:
    """The console's times share the schedule's and the report's origin, the workload's start;
    what comes before it is setup. (They once counted from the display's start, 6 s earlier
    than the report's fault list on a local cluster.)"""
    err = io.StringIO()
    now = [100.0]
    lines = live.Lines(err, clock=lambda: now[0])
    lines.phase("starting the cluster")
    now[0] = 106.0
    lines.workload_started(106.0)
    lines.phase("running the workload")
    now[0] = 108.3
    lines.fault("kill", (3,), "SIGKILL to pid 9")
    assert err.getvalue().splitlines() == ["[   setup] starting the cluster",
                                           "[    0.0s] running the workload",
                                           "[    2.3s] fault 1: kill 3: SIGKILL to pid 9"]
