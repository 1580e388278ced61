"""The distribution installs every folder under the `epochlog` namespace and nothing else.

The wheel is built for real (pip, as a user's `pip install .` builds it) and its file list read:
a package folder missing from pyproject.toml's list would be left out of the wheel silently, and a
generic top-level name (`client`, `broker`) would collide with other distributions.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _setuptools_config() -> dict[str, object]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    setuptools: dict[str, object] = config["tool"]["setuptools"]
    return setuptools


def test_every_package_folder_is_listed() -> None:
    config = _setuptools_config()
    package_dir = config["package-dir"]
    assert isinstance(package_dir, dict)
    on_disk = set()
    for name, folder in package_dir.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            on_disk.add(".".join([name, *rel.parts]))
    assert set(config["packages"]) == on_disk  # type: ignore[arg-type]


def test_the_wheel_holds_only_the_epochlog_namespace(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path),
                    str(ROOT)], check=True, timeout=300, capture_output=True)
    wheel, = tmp_path.glob("epochlog-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"epochlog"}
    for module in ("epochlog/__init__.py", "epochlog/cli.py", "epochlog/client/producer.py",
                   "epochlog/broker/storage/log.py", "epochlog/controller/state.py",
                   "epochlog/protocol/apis/fetch.py", "epochlog/settings/__init__.py",
                   "epochlog/testing/cluster.py", "epochlog/testing/plugin.py"):
        assert module in names
    entry_points, = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[pytest11]\nepochlog = epochlog.testing.plugin" in text  # the pytest plugin
    sources = {p.relative_to(ROOT / "client").as_posix() for p in (ROOT / "client").rglob("*.py")}
    assert {f"epochlog/client/{s}" for s in sources} <= set(names)


def test_everyday_names_import_from_the_top() -> None:
    """`from epochlog import ...` gives the client's classes, loaded on first use: a process that
    imports only the broker does not load the client library."""
    code = ("import sys, epochlog.broker.app\n"
            "assert 'epochlog.client.producer' not in sys.modules, 'broker loaded the client'\n"
            "from epochlog import Producer, Consumer, Admin, TopicPartition, LogTruncationError\n"
            "from epochlog.client import Producer as P\n"
            "assert Producer is P\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd="/")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
