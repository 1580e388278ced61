"""The client library's examples in docs/client.md, run as written against a real three-broker
cluster (only the bootstrap address is changed to the test cluster's), so the documentation
cannot drift from the API. The README shows the first of them (tests/test_docs_site.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.broker.cluster import Cluster
from tests.docs import ROOT, doc_example


def run_example(code: str, cluster: Cluster, tmp_path: Path, name: str) -> list[str]:
    assert "127.0.0.1:9092" in code
    script = tmp_path / name
    script.write_text(code.replace("127.0.0.1:9092", cluster.bootstrap))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.splitlines()


def test_client_examples_run(tmp_path: Path) -> None:
    """The client example, the consumer-group example that continues it, then the
    transactions example (it reads what the first wrote, exactly once, into "invoices")."""
    with Cluster(tmp_path, brokers=3) as cluster:
        lines = run_example(doc_example("client.md", "# The client library"), cluster, tmp_path,
                            "example.py")
        group_lines = run_example(doc_example("client.md", "## Consumer groups"), cluster,
                                  tmp_path, "group_example.py")
        txn_lines = run_example(doc_example("client.md", "## Transactions"), cluster, tmp_path,
                                "txn_example.py")
    assert sum(int(line.split()[0]) for line in txn_lines) >= 1, txn_lines
    topic, partition, offset, epoch = lines[0].split()
    assert topic == "orders" and offset == "0" and int(epoch) >= 0, lines
    assert lines[1] == f"0 {epoch} b'k' b'first'", lines
    assert lines[2] == f"{{TopicPartition(topic='orders', partition={partition}): (1, {epoch})}}", \
        lines
    # one member: it is assigned every partition, reads the one record from the beginning, and
    # its commit comes back with the record's leader epoch
    assert group_lines[0] == "assigned [0, 1, 2]", group_lines
    assert group_lines[1] == f"{partition} 0 b'first'", group_lines
    assert f"TopicPartition(topic='orders', partition={partition}): (1, {epoch})" in \
        group_lines[2], group_lines
