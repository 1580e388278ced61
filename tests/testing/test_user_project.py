"""A user project outside this repository: an empty folder with one test file (the example of
docs/chaos.md, docs/examples/test_orders_chaos.py) and no conftest of ours, run with
`python -m pytest` there. The `epochlog_cluster` fixture comes through the installed
distribution's pytest11 entry point; the test kills a confluent-kafka group's coordinator
mid-rebalance and cuts a leader off, records its clients in a History and asserts check() is
clean."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from tests.docs import doc_example

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "test_orders_chaos.py"
RUN_S = 240.0


def test_a_user_project_runs_the_docs_example_and_passes(tmp_path: Path) -> None:
    project = tmp_path / "my-app"
    project.mkdir()
    shutil.copy(EXAMPLE, project / "test_orders.py")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "test_orders.py"], cwd=project, capture_output=True, text=True,
                          timeout=RUN_S)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "1 passed" in done.stdout
    assert not (project / "conftest.py").exists()


def test_the_docs_show_the_example_as_it_is_run() -> None:
    code = EXAMPLE.read_text()
    code = code[code.index("import threading"):]
    shown = doc_example("chaos.md", "## In a test of your own application")
    assert shown == code, "docs/chaos.md's example differs from docs/examples/test_orders_chaos.py"
