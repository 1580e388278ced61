"""The status table of `epochlog cluster up` and `cluster status` at any terminal width: node,
state and address whole (the port never cut), other columns dropped in a fixed order and named
in the caption, and cells shown as they are, never read as markup.

Rows are `NodeStatus` rows as the control socket carries them (`asdict`), with the addresses
and five-digit ports of a local cluster; a real `cluster up` on a narrow terminal is in
test_cluster_up.py.
"""

from __future__ import annotations

import io
import re
from dataclasses import asdict
from typing import Any

import pytest
from rich.console import Console

from epochlog.cluster_view import status_table
from epochlog.testing import NodeStatus

ADDRESSES = ("127.0.0.1:40200", "127.0.0.1:40100", "127.0.0.1:40101", "127.0.0.1:40102")


def rows() -> list[dict[str, Any]]:
    nodes = [NodeStatus(node="controller", role="controller", pid=41234, state="running",
                        address=ADDRESSES[0], rack="", generation=1, leaders=None, network="")]
    nodes += [NodeStatus(node=i, role="broker", pid=41234 + i, state=state,
                         address=ADDRESSES[i], rack="abc"[i - 1], generation=i, leaders=4,
                         network=network)
              for i, state, network in ((1, "running", "cut from 2,3; slow 200±50 ms"),
                                        (2, "killed", ""), (3, "paused", ""))]
    return [asdict(node) for node in nodes]


def drawn(width: int, markup: bool = True) -> str:
    out = io.StringIO()
    Console(file=out, width=width, markup=markup, color_system=None).print(
        status_table(rows(), title="bootstrap servers 127.0.0.1:40100,127.0.0.1:40101"))
    return out.getvalue()


def header(text: str) -> list[str]:
    """The column names of a drawn table, from its header line."""
    line = next(line for line in text.splitlines() if re.search(r"\bnode\b", line))
    return re.findall(r"[a-z]+", line)


@pytest.mark.parametrize("width", [160, 100, 80, 60, 40, 36, 30, 24])
def test_the_table_fits_the_width_and_shows_every_address_whole(width: int) -> None:
    """At 80 columns the table once cut every address to `127.0.0.…`."""
    text = drawn(width)
    assert max(len(line) for line in text.splitlines()) <= width, text
    for address in ADDRESSES:
        assert address in text, text
    assert "…" not in text, text
    if width >= 36:  # narrower, node and state fold onto more lines (the address does not)
        assert all(state in text for state in ("controller", "running", "killed", "paused"))


def test_columns_are_dropped_in_one_order_and_the_caption_names_them() -> None:
    """pid goes first, then rack, generation, network, leads; node, state and address stay."""
    assert header(drawn(160)) == ["node", "pid", "state", "address", "rack", "generation",
                                  "leads", "network"]
    assert header(drawn(80)) == ["node", "state", "address", "generation", "leads", "network"]
    assert "not shown at this width: pid, rack" in drawn(80)
    assert header(drawn(60)) == ["node", "state", "address", "leads"]
    assert header(drawn(40)) == ["node", "state", "address"]
    assert "not shown at this width: pid, rack, generation, leads, network" in " ".join(
        drawn(40).split())  # the caption wraps at this width


def test_cells_are_never_read_as_markup() -> None:
    """A console without markup once showed a state as `[green]r…`; a bracket in a cell is
    text too."""
    for markup in (True, False):
        text = drawn(160, markup=markup)
        assert "[green]" not in text and "[/]" not in text, text
        assert "running" in text and "killed" in text, text
