"""The chaos report folder from a small history made by hand: the files, a real PNG inside the
page, and without matplotlib a page that says how to get the picture (and no PNG)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from epochlog.testing.chaos import report
from epochlog.testing.chaos.runner import Applied, Outcome, RunConfig
from epochlog.testing.chaos.scenarios import get
from epochlog.testing.checker import check
from epochlog.testing.history import History, Polled

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def outcome() -> Outcome:
    clock = iter(range(0, 10_000_000_000, 50_000_000))  # 50 ms a step
    history = History(monotonic_ns=lambda: next(clock))
    for i in range(40):
        op = history.send_started("p", "chaos", f"v{i}")
        if i == 20:
            history.record_fault("kill", (2,), "SIGKILL to pid 1")
        history.send_acked(op, 0, i)
        history.record_poll("c", [Polled(topic="chaos", partition=0, offset=i, leader_epoch=0,
                                         key=None, value=f"v{i}".encode())])
    scenario = get("kill-leader")
    schedule = scenario.schedule(1, 10.0)
    return Outcome(config=RunConfig(scenario=scenario, seed=1, duration_s=10.0),
                   schedule=schedule, history=history, verdict=check(history),
                   applied=[Applied(window=schedule[0], start_ms=2000.0, end_ms=3000.0,
                                    victims=[2])],
                   problems=[], errors=[], error_count=0, final_values=40, lost_acked=0,
                   elapsed_s=12.0)


def test_the_report_folder_has_the_history_the_verdict_and_a_png_in_its_page(
        tmp_path: Path) -> None:
    page = report.write(outcome(), tmp_path / "r")
    assert page == tmp_path / "r" / "report.html"
    assert (tmp_path / "r" / "timeline.png").read_bytes().startswith(PNG_SIGNATURE)
    assert '<img src="timeline.png"' in page.read_text()
    verdict = json.loads((tmp_path / "r" / "verdict.json").read_text())
    assert verdict["ok"] and verdict["seed"] == 1 and verdict["applied"][0]["victims"] == [2]
    assert len(History.load(tmp_path / "r" / "history.jsonl")) == 40 * 2 + 1


def test_without_matplotlib_the_report_says_how_to_get_the_picture(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    page = report.write(outcome(), tmp_path / "r").read_text()
    assert not (tmp_path / "r" / "timeline.png").exists()
    assert "matplotlib is not installed" in page and "epochlog[chaos]" in page
    assert "<img" not in page
