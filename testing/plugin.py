"""The pytest plugin of the epochlog distribution (entry point `pytest11`, name `epochlog`).

Fixture:

    def test_failover(epochlog_cluster):
        c = epochlog_cluster(brokers=3, racks="abc", settings={"min.insync.replicas": 2})
        c.create_topic("orders", partitions=6, replication_factor=3)
        c.kill(c.leader_of("orders", 0))

`epochlog_cluster(...)` takes Cluster's arguments (brokers, racks, settings, network, on_fault,
request_hooks for `c.inject(...)`, ...), starts a cluster with its data under the test's
temporary folder and returns it; a test may make several. After the test, pass or fail, each
is closed (healed, stopped, network removed); a process that did not stop cleanly fails the
test's teardown.

Targets: `epochlog_cluster(target="compose", ...)` (or `--epochlog-target=compose`, which
changes the default for every call) gives a ComposeCluster instead (compose_cluster.py): the
containers of ./docker-compose.yml (else the checkout's) on the Docker Engine, with the same
fault API. It takes brokers (3 only: the compose file's), racks, settings, on_fault, and its own
compose_file, project (a name prefix), images, build and start_timeout_s; `slow` needs netem in
the kernel. Closing it stops the services and ends with `compose down -v`.

Guard: the session marks its environment (guard.py); at its end, any epochlog process (broker,
controller, cluster, consume, produce, chaos) started during the session that still runs is
killed, reported with its command line, and the session fails. `-p no:epochlog` turns the
plugin off.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from . import guard
from .ports import PORT_RANGE_ENV, parse_port_range

if TYPE_CHECKING:
    from .cluster import Cluster
    from .compose_cluster import ComposeCluster

_TOKEN = pytest.StashKey[str]()
_LEFT = pytest.StashKey[list[guard.Leftover]]()


TARGETS = ("local", "compose")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("epochlog").addoption(
        "--epochlog-target", choices=TARGETS, default="local",
        help="the default backend of the epochlog_cluster fixture: local (child processes) "
             "or compose (containers of docker-compose.yml on the Docker Engine)")
    parser.getgroup("epochlog").addoption(
        "--epochlog-port-range", metavar="LOW-HIGH", default=None,
        help="the ports the clusters of this session listen on (sets EPOCHLOG_PORT_RANGE; "
             "default: outside the kernel's ephemeral range); ports another session holds "
             "are skipped either way")


def pytest_configure(config: pytest.Config) -> None:
    given = config.getoption("epochlog_port_range", None)
    if given:
        try:
            parse_port_range(given)
        except ValueError as exc:
            raise pytest.UsageError(f"--epochlog-port-range: {exc}") from None
        os.environ[PORT_RANGE_ENV] = given  # xdist workers are configured with it too
    config.stash[_TOKEN] = guard.begin()
    _interrupt_on_sigterm()


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _interrupt_on_sigterm() -> None:
    """A SIGTERM to the test run (a CI timeout) ends it as Ctrl-C does, so fixtures' teardown
    and atexit hooks run and clusters are stopped, instead of dying on the spot. Left alone
    if someone else handles SIGTERM already."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


@pytest.fixture
def epochlog_cluster(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
                     ) -> Iterator[Callable[..., Cluster | ComposeCluster]]:
    """A factory of started clusters, each closed after the test (see the module's notes)."""
    made: list[Cluster | ComposeCluster] = []
    default = str(pytestconfig.getoption("epochlog_target", "local"))

    def make(brokers: int = 3, *, target: str | None = None,
             **kwargs: Any) -> Cluster | ComposeCluster:
        chosen = target or default
        kwargs.setdefault("base_dir", tmp_path_factory.mktemp("epochlog-cluster"))
        cluster: Cluster | ComposeCluster
        if chosen == "local":
            from .cluster import Cluster
            cluster = Cluster(brokers, **kwargs)
        elif chosen == "compose":
            from .compose_cluster import ComposeCluster
            cluster = ComposeCluster(brokers, **kwargs)
        else:
            raise ValueError(f"target={chosen!r}: one of {', '.join(TARGETS)}")
        made.append(cluster)
        return cluster.start()

    yield make
    errors: list[str] = []
    for cluster in reversed(made):
        try:
            cluster.close()
        except Exception as exc:  # close them all, then report
            errors.append(str(exc))
    if errors:
        pytest.fail("closing epochlog clusters: " + "\n".join(errors), pytrace=False)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    token = session.config.stash.get(_TOKEN, None)
    if token is None:
        return
    left = guard.leftovers(token)
    if not left:
        return
    guard.kill(left)
    session.config.stash[_LEFT] = left
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config
                            ) -> None:
    left = config.stash.get(_LEFT, [])
    if left:
        terminalreporter.write_sep("=", "epochlog processes outlived the test session",
                                   red=True, bold=True)
        for p in left:
            terminalreporter.write_line(f"killed pid {p.pid}: {p.command}")


def pytest_unconfigure(config: pytest.Config) -> None:
    token = config.stash.get(_TOKEN, None)
    if token is not None:
        guard.end(token)
