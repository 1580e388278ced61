"""Test-run switches shared by every suite."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run long tests (chaos, soak, full kill runs) marked slow")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="long run: pass --run-slow to include it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
