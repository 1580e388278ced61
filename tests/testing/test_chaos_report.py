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
                   applied=[Applied(window=schedule[0], start_ms=2000.0, heal_ms=2500.0,
                                    end_ms=3000.0, victims=[2])],
                   problems=[], errors=[], error_count=0, final_values=40, lost_acked=0,
                   elapsed_s=12.0, origin_ms=0.0)


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


def two_kills() -> Outcome:
    """The workload starts 6 s into the history; broker 2 is killed at 2 s, restarted at 5 s and
    back at 8 s, when broker 3 is killed at once, restarted at 9 s and back at 10.5 s (history
    times 8-11-14 and 14-15-16.5 s): the first recovery runs into the second fault."""
    base = outcome()
    schedule = get("rolling-restart").schedule(1, 12.0)
    applied = [Applied(window=schedule[0], start_ms=8000.0, heal_ms=11_000.0, end_ms=14_000.0,
                       victims=[2]),
               Applied(window=schedule[1], start_ms=14_000.0, heal_ms=15_000.0,
                       end_ms=16_500.0, victims=[3])]
    return Outcome(config=base.config, schedule=schedule[:2], history=base.history,
                   verdict=base.verdict, applied=applied, problems=[], errors=[],
                   error_count=0, final_values=40, lost_acked=0, elapsed_s=20.0,
                   origin_ms=6000.0)


def test_every_part_of_the_report_counts_time_from_the_workloads_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fault list, the picture's axis, the console summary and verdict.json each say their
    origin, and it is the same one: a run once placed a fault at 2.0 s in its list and at 8 s in
    its picture."""
    from matplotlib.figure import Figure

    figures: list[Figure] = []
    save = Figure.savefig
    monkeypatch.setattr(Figure, "savefig",
                        lambda fig, *a, **kw: (figures.append(fig), save(fig, *a, **kw))[1])
    page = report.write(two_kills(), tmp_path / "r").read_text()
    first = "2.0-5.0s stop 2, recovered at 8.0s"
    second = "8.0-9.0s stop 3, recovered at 10.5s"
    assert "<h2>Faults (seconds since the workload started)</h2>" in page
    assert f"<li>{first} (planned: " in page and f"<li>{second} (planned: " in page, page
    console = report.summary(two_kills())
    assert "  faults (seconds since the workload started):" in console
    assert f"    {first} (planned: " in console and f"    {second}" in console, console
    verdict = json.loads((tmp_path / "r" / "verdict.json").read_text())
    assert verdict["times"] == "seconds since the workload started"
    assert verdict["workload_start_ms"] == 6000.0
    assert [(a["start_s"], a["heal_s"], a["recovered_s"]) for a in verdict["applied"]] == [
        (2.0, 5.0, 8.0), (8.0, 9.0, 10.5)]
    (figure,) = figures
    top, bottom = figure.axes
    assert bottom.get_xlabel() == "seconds since the workload started"
    assert spans(top) == spans(bottom) == [(2.0, 5.0), (5.0, 8.0), (8.0, 9.0), (9.0, 10.5)]


def spans(ax: object) -> list[tuple[float, float]]:
    """The x extent, in data units, of each shaded span of a matplotlib axis."""
    out = []
    for patch in ax.patches:  # type: ignore[attr-defined]
        xs = patch.get_path().transformed(patch.get_patch_transform()).vertices[:, 0]
        out.append((round(float(xs.min()), 3), round(float(xs.max()), 3)))
    return sorted(out)


def test_a_fault_is_shaded_apart_from_its_recovery_so_neighbours_do_not_merge() -> None:
    """Each window is two spans, the fault (injected to healed) and the recovery (healed to
    rejoined), in two shades: a recovery that runs into the next fault does not make one
    shaded block of both faults."""
    assert report.shaded(two_kills()) == [("fault", 2.0, 5.0), ("recovery", 5.0, 8.0),
                                          ("fault", 8.0, 9.0), ("recovery", 9.0, 10.5)]
