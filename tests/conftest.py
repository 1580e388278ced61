"""Test-run switches shared by every suite, and the epochlog pytest plugin.

The plugin (epochlog.testing.plugin: the `epochlog_cluster` fixture and the guard that fails the
session when an epochlog process outlives it) comes with the installed distribution through its
pytest11 entry point; it is loaded here too when plugin autoloading is off
(PYTEST_DISABLE_PLUGIN_AUTOLOAD), so the project's own runs always have the guard.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run long tests (chaos, soak, full kill runs) marked slow")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    manager = config.pluginmanager
    if not manager.has_plugin("epochlog") and not manager.is_blocked("epochlog"):
        from epochlog.testing import plugin

        manager.register(plugin, "epochlog")  # pytest_configure is historic: it runs for it


SLOW_TIMEOUT_S = 4 * 3600  # a long run's bound, in place of the ini's `timeout`


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        for item in items:
            if "slow" in item.keywords and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(SLOW_TIMEOUT_S))
        return
    skip = pytest.mark.skip(reason="long run: pass --run-slow to include it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
