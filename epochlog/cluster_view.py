"""The cluster's status as a `rich` table: `epochlog cluster status`, and the live view of
`epochlog cluster up` on a terminal. Rows are `NodeStatus` fields as dicts (as the control
socket carries them).

Theory of operation
-------------------
The table is laid out when it is drawn, for the width it is drawn in (a terminal resized under
the live view gets a new layout at its next refresh). node, state and address are always shown
whole: an address is of no use without its port. The other columns are dropped, as the width
shrinks, in DROP_ORDER (pid first, leads last), and the caption names what is not shown. When
even the three do not fit inside borders, the borders go; when they do not fit at all, they
fold onto more lines rather than end in an ellipsis (the address last).

Every cell is `rich` Text, never markup: a state, an address or a fault's description is shown
as it is, whatever the console's markup setting (a console without markup once showed a state
as `[green]r…`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

_STATE_STYLE = {"running": "green", "paused": "yellow", "stopped": "blue", "killed": "red"}
# every column, in the order shown, with its justification
COLUMNS: tuple[tuple[str, Literal["left", "right"]], ...] = (
    ("node", "right"), ("pid", "right"), ("state", "left"), ("address", "left"),
    ("rack", "left"), ("generation", "right"), ("leads", "right"), ("network", "left"))
REQUIRED = ("node", "state", "address")  # never dropped, never cut
DROP_ORDER = ("pid", "rack", "generation", "network", "leads")  # the first goes first
NETWORK_WIDTH_MIN = 12  # network wraps onto more lines; it is kept when this much fits

# Width a layout adds to its columns' text, as (per table, per column): a bordered table has a
# rule between and around its columns and a space either side of each text; a borderless one
# has one space either side of each text but none at the table's edges.
_BORDERED = (1, 3)
_BORDERLESS = (-2, 2)
_FOLDED_EXTRA = -2 + 3 * 2 + 2  # borderless, and node and state one cell wide


def status_table(rows: Sequence[Mapping[str, Any]], title: str = "") -> StatusView:
    """The status rows as a renderable that fits whatever width it is drawn in."""
    return StatusView(rows, title)


class StatusView:
    """The status table, laid out at render time for the width it gets (see the module)."""

    def __init__(self, rows: Sequence[Mapping[str, Any]], title: str = "") -> None:
        self.title = title
        self.rows = [_cells(row) for row in rows]
        self.widths = {name: max([cell_len(name)] + [row[name].cell_len for row in self.rows])
                       for name, _ in COLUMNS}

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)

    def columns(self, width: int) -> tuple[list[str], bool]:
        """The columns shown at width, and whether inside borders; ([], False) when the required
        columns do not fit even without borders (they fold)."""
        for bordered, (table_extra, column_extra) in ((True, _BORDERED), (False, _BORDERLESS)):
            used = table_extra + sum(self.widths[c] + column_extra for c in REQUIRED)
            if used > width:
                continue
            shown = list(REQUIRED)
            for name in reversed(DROP_ORDER):  # the most wanted first, while they fit
                need = self.widths[name]
                if name == "network":
                    need = min(need, NETWORK_WIDTH_MIN)
                if used + need + column_extra > width:
                    break
                shown.append(name)
                used += need + column_extra
            return shown, bordered
        return [], False

    def table(self, width: int) -> Table:
        """The table laid out for width."""
        shown, bordered = self.columns(width)
        fold = not shown
        shown = shown or list(REQUIRED)
        # folding: the address stays on one line while node and state keep a cell each
        whole = {"address"} if self.widths["address"] + _FOLDED_EXTRA <= width else set()
        hidden = [name for name, _ in COLUMNS if name not in shown]
        table = Table(title=Text(self.title) if self.title else None, title_justify="left",
                      caption=Text(f"not shown at this width: {', '.join(hidden)}")
                      if hidden else None, caption_justify="left")
        if not bordered:
            table.box, table.show_edge, table.pad_edge = None, False, False
        for name, justify in COLUMNS:
            if name not in shown:
                continue
            if name == "network":
                table.add_column(name, justify=justify, overflow="fold",
                                 min_width=min(self.widths[name], NETWORK_WIDTH_MIN))
            elif fold and name not in whole:
                table.add_column(name, justify=justify, overflow="fold")
            else:
                table.add_column(name, justify=justify, no_wrap=True,
                                 min_width=self.widths[name])
        for row in self.rows:
            table.add_row(*(row[name] for name, _ in COLUMNS if name in shown))
        return table


def _cells(row: Mapping[str, Any]) -> dict[str, Text]:
    """One status row as a Text per column."""
    state = str(row["state"])
    generation = row["generation"]
    return {
        "node": Text(str(row["node"]) if row["role"] == "broker" else "controller"),
        "pid": Text(str(row["pid"]) if row["pid"] is not None else "-"),
        "state": Text(state, style=_STATE_STYLE.get(state, "red bold")),
        "address": Text(str(row["address"])),
        "rack": Text(str(row["rack"] or "-")),
        "generation": Text((f"epoch {generation}" if row["role"] == "controller"
                            else str(generation))
                           if generation is not None and generation >= 0 else "-"),
        "leads": Text("-" if row["leaders"] is None else str(row["leaders"])),
        "network": Text(str(row["network"] or "-")),
    }
