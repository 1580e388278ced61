"""The README's client-library example, run as written against a real three-broker cluster (only
the bootstrap address is changed to the test cluster's), so the README cannot drift from the API."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.broker.cluster import Cluster

README = Path(__file__).resolve().parent.parent / "README.md"


def readme_example() -> str:
    text = README.read_text()
    section = text[text.index("## The client library"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)  # type: ignore[union-attr]


def test_readme_client_example_runs(tmp_path: Path) -> None:
    code = readme_example()
    assert "127.0.0.1:9092" in code
    with Cluster(tmp_path, brokers=3) as cluster:
        script = tmp_path / "example.py"
        script.write_text(code.replace("127.0.0.1:9092", cluster.bootstrap))
        out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             timeout=120, cwd=README.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    topic, partition, offset, epoch = lines[0].split()
    assert topic == "orders" and offset == "0" and int(epoch) >= 0, lines
    assert lines[1] == f"0 {epoch} b'k' b'first'", lines
    assert lines[2] == f"{{TopicPartition(topic='orders', partition={partition}): (1, {epoch})}}", \
        lines
