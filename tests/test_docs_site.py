"""The documentation: the README is a front door that opens with the two commands and links to
pages that exist; every Python example in it and in docs/ is one a test runs (tests/docs.py's
RUN_BY); and the site's strict build (which .ci/lint runs) fails on a broken link, a broken
anchor, a page left out of the nav and a nav entry with no page, each shown on a copy of the
site."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs import DOCS, README, ROOT, RUN_BY, examples, parse, python_blocks

README_LINES_MAX = 200
SETUP_AND_RUN = ("python3 -m venv .venv && . .venv/bin/activate && pip install -e . "
                 "&& epochlog cluster up")
SETUP_AND_TEST = "bash .ci/run"


def test_every_python_example_is_run_by_a_test() -> None:
    shown = examples()
    for page in sorted(DOCS.rglob("*.md")):
        name = page.relative_to(DOCS).as_posix()
        run = {code for (p, _), code in shown.items() if p == name}
        for block in python_blocks(page):
            assert block.code in run, (
                f"docs/{name}:{block.line}: a Python example no test runs; register it in "
                "tests/docs.py's RUN_BY with the test that runs it")
    for block in python_blocks(README):
        assert block.code in shown.values(), (
            f"README.md:{block.line}: a Python example that is not a copy of one in docs/ "
            f"({', '.join(f'{p} {h!r}' for p, h in RUN_BY)})")


def test_the_readme_opens_with_the_two_commands_and_stays_short() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= README_LINES_MAX, f"README.md has {len(lines)} lines"
    first = parse(README)[1][0]
    commands = [line for line in first.code.splitlines() if line and not line.startswith("#")]
    assert first.language == "sh" and commands == [SETUP_AND_RUN, SETUP_AND_TEST], first
    assert (ROOT / ".ci" / "run").exists()


def test_the_readme_links_to_pages_that_exist() -> None:
    """The site's build checks the links between its pages; the README is not one of them."""
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    assert targets, "README.md links to no page"
    missing = [t for t in targets if "://" not in t and not (ROOT / t).is_file()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def build(root: Path) -> subprocess.CompletedProcess[str]:
    """.ci/lint's build, of the site at `root`. (Not --quiet: it drops warnings before strict
    mode counts them, and every case below then passes.)"""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(root / "mkdocs.yml"), "--site-dir", str(root / "site")],
                          capture_output=True, text=True, timeout=120, env=env)


def copy_of_the_site(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "mkdocs.yml", tmp_path / "mkdocs.yml")
    shutil.copytree(DOCS, tmp_path / "docs")
    return tmp_path


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    """The control for the cases below: the copy builds before anything is broken."""
    done = build(copy_of_the_site(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


BREAKAGES = {
    "a link to a page that does not exist": (
        lambda site: append(site / "docs" / "cli.md", "\nSee [nothing](no-such-page.md).\n"),
        "no-such-page.md"),
    "a link to a heading that does not exist": (
        lambda site: append(site / "docs" / "cli.md", "\nSee [it](client.md#no-such-heading).\n"),
        "no-such-heading"),
    "a page left out of the nav": (
        lambda site: (site / "docs" / "orphan.md").write_text("# Orphan\n"),
        "orphan.md"),
    "a nav entry with no page": (
        lambda site: (site / "docs" / "cli.md").unlink(),
        "cli.md"),
}


@pytest.mark.parametrize("breakage", BREAKAGES)
def test_the_strict_build_fails_on(breakage: str, tmp_path: Path) -> None:
    site = copy_of_the_site(tmp_path)
    breaks, named = BREAKAGES[breakage]
    breaks(site)
    done = build(site)
    assert done.returncode != 0, f"{breakage}: the strict build passed"
    assert named in done.stdout + done.stderr, done.stdout + done.stderr
