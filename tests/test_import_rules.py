"""The packages' import rules, written once (docs/design.md, "Packages and what each may import"
and "The broker as a stack").

The packages talk over the wire, not through imports: the wire codec imports nothing of ours, the
client builds on the codec only, broker and controller build on the codec, the settings loader and
the client's connection layer (as Kafka's broker reuses its clients' network client), never on each
other; the Spark pipeline builds on the client only. The `epochlog` package (the command line)
sits on top and may use anything. Inside every package, no module imports itself back through
others (no circle), and the broker reads as one stack of floors, each importing only its own floor
and those below. Imports are read from the source (ast), relative ones resolved, including those
inside functions and under TYPE_CHECKING: a typing-only import is still a dependency a reader has
to follow.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
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
    # The Spark data source builds on the client library alone, as any user's code would; the
    # reference pipeline's command line finds the cluster as every epochlog tool does, through
    # the two modules of the command line that import nothing else of ours.
    "epochlog.pipeline": frozenset({"epochlog.client", "epochlog.bootstrap",
                                    "epochlog.cluster_socket"}),
}
# The names the folders had before the epochlog namespace: nothing may import them any more.
OLD_TOP_LEVEL = frozenset({"broker", "client", "controller", "protocol", "settings", "pipeline"})

# The broker's floors, top to bottom (docs/design.md, "The broker as a stack"): a module of the
# broker (by its path under broker/, a folder meaning all of it) imports only from its own floor
# and the floors below. A module on no floor fails the test, so a new one has to be placed.
BROKER_FLOORS: list[tuple[str, frozenset[str]]] = [
    ("command line", frozenset({"cli", "tools"})),
    ("app", frozenset({"app"})),
    ("server", frozenset({"server", "request_hooks", "metrics"})),
    ("handlers", frozenset({"handlers"})),
    ("coordinators", frozenset({"groups", "txn", "internal_topics", "isr_task", "parts",
                               "coordinator_shards", "coordinator_driver"})),
    ("replication", frozenset({
        "replicas", "partition", "isr", "follower", "fetcher", "replication_wait", "purgatory",
        "fetch_sessions", "read_path", "replica_selector", "controller_link", "topic_configs",
        "metadata_cache", "fencing", "producer_ids", "config", "error_answers",
        "controller_session", "control_hold", "source_fetchers", "isr_schedule",
        "fetch_wait", "listeners", "principal", "tls", "follower_session"})),
    ("storage", frozenset({"storage", "clock"})),
]


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


def modules_of(package: str, folder: Path) -> Iterator[tuple[Path, str, bool]]:
    """(file, module name, whether it is a package's __init__) for each module under folder."""
    for path in sorted(folder.rglob("*.py")):
        rel = path.relative_to(folder).with_suffix("")
        is_package = rel.name == "__init__"
        parts = list(rel.parts[:-1] if is_package else rel.parts)
        yield path, ".".join([package, *parts]), is_package


def violations(package: str, folder: Path, allowed: frozenset[str]) -> list[str]:
    """What the package's modules import of ours that the rules forbid."""
    bad: list[str] = []
    for path, module, is_package in modules_of(package, folder):
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


def import_graph(package: str, folder: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports. `from p import x` is an arrow to
    module p.x where x is one, else to p itself (for a package, its __init__)."""
    found = list(modules_of(package, folder))
    modules = {module for _, module, _ in found}

    def nearest(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for path, module, is_package in found:
        base = module.split(".") if is_package else module.split(".")[:-1]
        targets: list[str | None] = []
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets += [nearest(alias.name) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:
                    source = ".".join(base[:len(base) - node.level + 1] + ([source] if source
                                                                           else []))
                for alias in node.names:
                    sub = f"{source}.{alias.name}"
                    targets.append(sub if sub in modules else nearest(source))
        graph[module] = {t for t in targets if t is not None and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, arrows = work[-1]
            step = next(arrows, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph.get(step, ())))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def floor_of(module: str, package: str, floors: list[tuple[str, frozenset[str]]]) -> int | None:
    """The floor's number (0 at the top) of a module of package, by its first name under it."""
    first = module.removeprefix(package + ".").split(".")[0]
    return next((n for n, (_, names) in enumerate(floors) if first in names), None)


def arrows_up(package: str, graph: dict[str, set[str]],
              floors: list[tuple[str, frozenset[str]]]) -> list[str]:
    """Imports from a floor to a higher one, and modules on no floor."""
    bad: list[str] = []
    for module, targets in sorted(graph.items()):
        if module == package:
            continue
        mine = floor_of(module, package, floors)
        if mine is None:
            bad.append(f"{module} is on no floor: add it to BROKER_FLOORS")
            continue
        for target in sorted(targets):
            theirs = floor_of(target, package, floors)
            if theirs is not None and theirs < mine:
                bad.append(f"{module} ({floors[mine][0]}) imports {target} "
                           f"({floors[theirs][0]}), a floor above it")
    return bad


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_it_may(package: str) -> None:
    bad = violations(package, package_dirs()[package], ALLOWED[package])
    allowed = sorted(ALLOWED[package]) or "nothing of ours"
    assert not bad, f"{package} may import only {allowed}:\n" + "\n".join(bad)


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_no_package_imports_itself_in_a_circle(package: str) -> None:
    found = circles(import_graph(package, package_dirs()[package]))
    assert not found, f"{package} has import circles (typing-only imports count):\n" + \
        "\n".join(" -> ".join(group) for group in found)


def test_the_broker_reads_as_one_stack() -> None:
    """cli -> app -> server -> handlers -> coordinators -> replication -> storage: no arrow
    runs back up (a lower floor that needs a higher one gets a narrow Protocol)."""
    graph = import_graph("epochlog.broker", package_dirs()["epochlog.broker"])
    bad = arrows_up("epochlog.broker", graph, BROKER_FLOORS)
    assert not bad, "the broker's floors are crossed upwards:\n" + "\n".join(bad)


# The broker's sans-IO machines (STYLE.md 3, docs/design.md): no event loop, no clock, no socket.
# Their asyncio shells (groups/coordinator.py, txn/coordinator.py, coordinator_driver.py;
# controller_link.py, app.py, fetcher.py, isr_task.py, handlers/fetch.py) and the simulations
# drive the same code.
SANS_IO = ("coordinator_shards.py", "groups/core.py", "groups/state.py", "groups/txn_offsets.py",
           "txn/core.py", "txn/state.py", "txn/markers_left.py", "controller_session.py",
           "control_hold.py", "source_fetchers.py", "isr_schedule.py", "fetch_wait.py",
           "follower_session.py")
NOT_IN_SANS_IO = frozenset({"asyncio", "socket", "selectors", "time", "threading"})


def io_imports(folder: Path, package: str, files: tuple[str, ...]) -> list[str]:
    bad: list[str] = []
    for rel in files:
        module = ".".join([package, *Path(rel).with_suffix("").parts])
        bad += [f"{rel}:{line} imports {target}"
                for line, target in imports_of(folder / rel, module, False)
                if target.split(".")[0] in NOT_IN_SANS_IO]
    return bad


def test_the_coordinators_machines_do_no_io(tmp_path: Path) -> None:
    bad = io_imports(package_dirs()["epochlog.broker"], "epochlog.broker", SANS_IO)
    assert not bad, "a sans-IO machine imports I/O or a clock:\n" + "\n".join(bad)
    (tmp_path / "core.py").write_text("def later():\n    import asyncio\n")
    assert io_imports(tmp_path, "epochlog.broker", ("core.py",)) == [
        "core.py:2 imports asyncio"]  # the check can fail


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


def test_circles_and_floors_are_caught(tmp_path: Path) -> None:
    """The circle and floor checks can fail: a typing-only import closing a loop is a circle, and
    a storage module importing the app is an arrow up; a lone module is no circle."""
    broker = tmp_path / "broker"
    (broker / "storage").mkdir(parents=True)
    (broker / "__init__.py").write_text("")
    (broker / "storage" / "__init__.py").write_text("")
    (broker / "app.py").write_text("from .storage import log\n")
    (broker / "storage" / "log.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..app import Broker\n")
    (broker / "lonely.py").write_text("import os\n")
    graph = import_graph("epochlog.broker", broker)
    assert circles(graph) == [["epochlog.broker.app", "epochlog.broker.storage.log"]]
    floors = [("app", frozenset({"app"})), ("storage", frozenset({"storage"}))]
    bad = "\n".join(arrows_up("epochlog.broker", graph, floors))
    assert "epochlog.broker.storage.log (storage) imports epochlog.broker.app (app)" in bad
    assert "epochlog.broker.lonely is on no floor" in bad
