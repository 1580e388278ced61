"""The cluster's status as a `rich` table: `epochlog cluster status`, and the live view of
`epochlog cluster up` on a terminal. Rows are `NodeStatus` fields as dicts (as the control
socket carries them)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.table import Table

_STATE_STYLE = {"running": "green", "paused": "yellow", "stopped": "blue", "killed": "red"}


def status_table(rows: Sequence[Mapping[str, Any]], title: str = "") -> Table:
    table = Table(title=title or None, title_justify="left")
    for column, justify in (("node", "right"), ("pid", "right"), ("state", "left"),
                            ("address", "left"), ("rack", "left"),
                            ("generation", "right"), ("leads", "right"),
                            ("network", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for row in rows:
        state = str(row["state"])
        style = _STATE_STYLE.get(state, "red bold")
        generation = row["generation"]
        table.add_row(
            str(row["node"]) if row["role"] == "broker" else "controller",
            str(row["pid"]) if row["pid"] is not None else "-",
            f"[{style}]{state}[/]",
            str(row["address"]),
            str(row["rack"] or "-"),
            (f"epoch {generation}" if row["role"] == "controller" else str(generation))
            if generation is not None and generation >= 0 else "-",
            "-" if row["leaders"] is None else str(row["leaders"]),
            str(row["network"] or "-"))
    return table
