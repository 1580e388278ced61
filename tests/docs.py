"""The documentation's Python examples, found by page and heading, so that tests run them as
written. The pages are docs/*.md (the site, `mkdocs.yml`) and README.md, whose Python blocks must
each be a copy of one of the examples below (tests/test_docs_site.py).

A page is read as Markdown is: a heading is a line starting with '#' outside a fenced block, and a
section runs to the next heading of the same or a higher level; an example is the first
```python block of its section. A section without one fails the test that asks for it, naming the
page and heading, so an example that is moved or removed fails its test rather than being skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"

# Every Python example of the documentation: (page under docs/, heading) and the test that runs it.
RUN_BY = {
    ("client.md", "# The client library"): "tests/test_docs_examples.py",
    ("client.md", "## Transactions"): "tests/test_docs_examples.py",
    ("client.md", "## Consumer groups"): "tests/test_docs_examples.py",
    ("testing.md", "# Testing your application"): "tests/testing/test_plugin.py",
    ("chaos.md", "## In a test of your own application"): "tests/testing/test_user_project.py",
    ("spark.md", "# Spark"): "tests/pipeline/test_spark_source.py",
    ("spark.md", "## Exactly once"): "tests/pipeline/test_spark_exactly_once.py",
    ("security.md", "## The client library"): "tests/interop/test_tls.py",
}

_FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)")
_HEADING = re.compile(r"^(#{1,6}) \S")


@dataclass(frozen=True)
class Block:
    language: str
    code: str  # the lines between the fences, each ending in a newline
    line: int  # 1-based line of the opening fence


def parse(path: Path) -> tuple[list[tuple[int, str, int]], list[Block]]:
    """A page's headings, as (level, text, line), and its fenced blocks."""
    headings: list[tuple[int, str, int]] = []
    blocks: list[Block] = []
    fence: tuple[str, str, int] | None = None  # (marker, language, line)
    body: list[str] = []
    for number, line in enumerate(path.read_text().splitlines(keepends=True), start=1):
        if fence is None:
            if opened := _FENCE.match(line):
                fence, body = (opened.group(1), opened.group(2), number), []
            elif heading := _HEADING.match(line):
                headings.append((len(heading.group(1)), line.rstrip("\n"), number))
        elif line.strip() == fence[0]:
            blocks.append(Block(fence[1], "".join(body), fence[2]))
            fence = None
        else:
            body.append(line)
    assert fence is None, f"{path}: the block opened at line {fence[2]} is never closed"
    return headings, blocks


def python_blocks(path: Path) -> list[Block]:
    return [b for b in parse(path)[1] if b.language == "python"]


def doc_example(page: str, heading: str) -> str:
    """The first Python block of the section `heading` (the whole line, '#'s included) of
    docs/`page`."""
    assert (page, heading) in RUN_BY, f"{page} {heading!r} is not in tests/docs.py's RUN_BY"
    path = DOCS / page
    headings, blocks = parse(path)
    starts = [(level, line) for level, text, line in headings if text == heading]
    assert len(starts) == 1, f"docs/{page}: {len(starts)} headings {heading!r}, expected one"
    level, start = starts[0]
    end = min((line for lv, _, line in headings if line > start and lv <= level), default=10**9)
    inside = [b for b in blocks if b.language == "python" and start < b.line < end]
    assert inside, f"docs/{page}: no ```python block under {heading!r}"
    return inside[0].code


def examples() -> dict[tuple[str, str], str]:
    """Every registered example's code, by (page, heading)."""
    return {key: doc_example(*key) for key in RUN_BY}
