"""`epochlog chaos run --target compose`: a scenario breaks a docker compose cluster the way it
breaks a local one (the fault API is the same), and the run's checker judges it; the one
scenario compose cannot run (request hooks) is refused with a clear line, not a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from .compose import ROOT

RUN_S_MAX = 600


def chaos(report: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "epochlog", "chaos", "run", "--target",
                           "compose", "--seed", "1", "--report", str(report), *args],
                          capture_output=True, text=True, timeout=RUN_S_MAX, cwd=ROOT)


def test_kill_leader_on_a_compose_cluster(images: dict[str, str], tmp_path: Path) -> None:
    done = chaos(tmp_path / "report", "--scenario", "kill-leader", "--duration", "10s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    verdict = json.loads((tmp_path / "report" / "verdict.json").read_text())
    assert verdict["scenario"] == "kill-leader" and verdict["ok"] is True, verdict
    assert verdict["schedule"], "no fault was scheduled"
    history = (tmp_path / "report" / "history.jsonl").read_text()
    assert '"kill"' in history, "no kill recorded in the history"


def test_request_hooks_are_refused_on_compose(tmp_path: Path) -> None:
    done = chaos(tmp_path / "report", "--scenario", "injected-errors", "--duration", "5s")
    assert done.returncode != 0 and "run it with --target local" in done.stderr, done
    assert "Traceback" not in done.stderr, done.stderr
