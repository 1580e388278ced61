"""The packages' import rules, written once (docs/design.md, "Packages and what each may import").

The packages talk over the wire, not through imports: the wire codec imports nothing of ours, the
client builds on the codec only, broker and controller build on the codec, the settings loader and
the client's connection layer (as Kafka's broker reuses its clients' network client), never on each
other; the Spark pipeline builds on the client only. The `epochlog` package (the command line)
sits on top and may use anything. Imports are read from the source (ast), relative ones resolved,
including those inside functions and under TYPE_CHECKING: a typing-only import is still a
dependency a reader has to follow.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# package -> the packages (or modules) of ours it may import, besides its own modules
ALLOWED: dict[str, frozenset[str]] = {
    "epochlog.protocol": frozenset(),
    "epochlog.settings": frozenset(),
    "epochlog.client": frozenset({"epochlog.protocol"}),
    "epochlog.broker": frozenset({"epochlog.protocol", "epochlog.settings",
                                  "epochlog.client.connection"}),
    "epochlog.controller": frozenset({"epochlog.protocol", "epochlog.settings",
                                      "epochlog.client.connection"}),
    # The test harness runs brokers and the controller as processes, never their code.
    "epochlog.testing": frozenset({"epochlog.client", "epochlog.protocol", "epochlog.settings"}),
    # The Spark data source builds on the client library alone, as any user's code would.
    "epochlog.pipeline": frozenset({"epochlog.client"}),
}
# The names the folders had before the epochlog namespace: nothing may import them any more.
OLD_TOP_LEVEL = frozenset({"broker", "client", "controller", "protocol", "settings", "pipeline"})


def package_dirs() -> dict[str, Path]:
    """epochlog's package -> folder mapping, as pyproject.toml declares it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return {name: ROOT / folder
            for name, folder in config["tool"]["setuptools"]["package-dir"].items()}


def imports_of(path: Path, module: str, is_package: bool) -> list[tuple[int, str]]:
    """(line, imported module) for every import in the file; relative ones made absolute."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    package_parts = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[:len(package_parts) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((node.lineno, target))
            # `from epochlog import client` imports the submodule epochlog.client
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names
                      if target in ("epochlog",) or target.startswith("epochlog.")]
    return found


def violations(package: str, folder: Path, allowed: frozenset[str]) -> list[str]:
    """What the package's modules import of ours that the rules forbid."""
    bad: list[str] = []
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).with_suffix("")
        is_package = rel.name == "__init__"
        parts = list(rel.parts[:-1] if is_package else rel.parts)
        module = ".".join([package, *parts])
        for line, target in imports_of(path, module, is_package):
            top = target.split(".")[0]
            if top in OLD_TOP_LEVEL:
                bad.append(f"{path.relative_to(folder.parent)}:{line} imports {target} (the "
                           "folder's old top-level name: use epochlog.*)")
                continue
            if top != "epochlog" or target == package or target.startswith(package + "."):
                continue
            if target == "epochlog" or not _is_allowed(target, allowed):
                bad.append(f"{path.relative_to(folder.parent)}:{line} imports {target}")
    return bad


def _is_allowed(target: str, allowed: frozenset[str]) -> bool:
    # An allowed package covers its modules; a module `from x import name` covers the name.
    return any(target == a or target.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str) -> None:
    bad = violations(package, package_dirs()[package], ALLOWED[package])
    allowed = sorted(ALLOWED[package]) or "nothing of ours"
    assert not bad, f"{package} may import only {allowed}:\n" + "\n".join(bad)


def test_every_package_has_a_rule() -> None:
    """A new top-level package (the Spark pipeline, say: client only) must say what it may use."""
    assert set(package_dirs()) - {"epochlog"} == set(ALLOWED)


def test_the_checker_catches_what_it_should(tmp_path: Path) -> None:
    """The rules can fail: a client module reaching into the broker, one using an old name, and
    one importing the command line are each reported; the codec importing itself is not."""
    client = tmp_path / "client"
    client.mkdir()
    (client / "__init__.py").write_text("from .producer import Producer\n")
    (client / "producer.py").write_text(
        "from epochlog.protocol.batch import x\n"
        "from epochlog.broker import app\n"
        "def later():\n    import protocol.records\n"
        "from epochlog import cli\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from epochlog.controller.state import ControllerState\n")
    bad = violations("epochlog.client", client, ALLOWED["epochlog.client"])
    text = "\n".join(bad)
    assert "imports epochlog.broker" in text
    assert "imports protocol.records (the folder's old top-level name" in text
    assert "imports epochlog.cli" in text
    assert "imports epochlog.controller.state" in text
    assert "epochlog.protocol.batch" not in text
    assert "producer" not in text.replace("producer.py", "")  # the relative import is its own
