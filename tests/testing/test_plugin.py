"""The pytest plugin as a user's project gets it: inner pytest sessions run as subprocesses in a
folder of their own (the plugin comes through the installed distribution's entry point).

- a session that leaves an epochlog process running fails, names the process's command line,
  and the process is gone afterwards; one that cleans up passes;
- `epochlog_cluster` tears its clusters down after a failing test too, so nothing is left.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from epochlog.testing.processes import process_state
from tests.docs import doc_example

WAIT_S = 180.0

LEAKY = '''
import subprocess, sys

def test_leaves_a_controller_running(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "epochlog", "controller", "--data-dir",
                             str(tmp_path / "c"), "--listen", "127.0.0.1:0"],
                            stderr=subprocess.DEVNULL)
    print("LEAKED", proc.pid)

def test_cleans_up_after_itself(tmp_path):
    proc = subprocess.Popen([sys.executable, "-m", "epochlog", "controller", "--data-dir",
                             str(tmp_path / "d"), "--listen", "127.0.0.1:0"],
                            stderr=subprocess.DEVNULL)
    proc.kill()
    proc.wait()
'''

FAILING = '''
import os

def test_fails_with_a_cluster_up(epochlog_cluster):
    c = epochlog_cluster(brokers=2, racks="ab")
    c.create_topic("t", partitions=1, replication_factor=2)
    print("PIDS", *[c.pid(n) for n in (c.controller, 1, 2)])
    assert False, "the user's test fails"
'''


def run_inner(tmp_path: Path, name: str, source: str, *args: str
              ) -> subprocess.CompletedProcess[str]:
    (tmp_path / name).write_text(source)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                           name, *args], cwd=tmp_path, capture_output=True, text=True,
                          timeout=WAIT_S)


def test_a_session_that_leaves_an_epochlog_process_behind_fails(tmp_path: Path) -> None:
    out = run_inner(tmp_path, "test_leaky.py", LEAKY)
    pid = int(re.search(r"LEAKED (\d+)", out.stdout).group(1))  # type: ignore[union-attr]
    assert out.returncode == 1, out.stdout + out.stderr
    assert "2 passed" in out.stdout  # every test passed: the guard alone fails the session
    assert "epochlog processes outlived the test session" in out.stdout
    assert re.search(rf"killed pid {pid}: .*-m epochlog controller --data-dir", out.stdout)
    assert process_state(pid) in ("", "Z"), "the guard must kill what it reports"


def test_the_same_session_without_the_leak_passes(tmp_path: Path) -> None:
    out = run_inner(tmp_path, "test_leaky.py", LEAKY, "-k", "cleans_up")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "outlived" not in out.stdout


def test_clusters_are_torn_down_after_a_failing_test(tmp_path: Path) -> None:
    out = run_inner(tmp_path, "test_failing.py", FAILING)
    assert out.returncode == 1 and "1 failed" in out.stdout, out.stdout + out.stderr
    assert "the user's test fails" in out.stdout
    assert "outlived" not in out.stdout
    pids = [int(p) for p in re.search(r"PIDS ([\d ]+)", out.stdout).group(1).split()]  # type: ignore[union-attr]  # noqa: E501
    assert len(pids) == 3 and all(process_state(p) in ("", "Z") for p in pids)


def test_the_docs_example_passes_as_a_users_test(tmp_path: Path) -> None:
    """The fixture example of docs/testing.md (the README shows it too), run as written in a
    project folder of its own."""
    example = doc_example("testing.md", "# Testing your application")
    out = run_inner(tmp_path, "test_docs_example.py", example)
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout[-3000:] + out.stderr


SLEEPING = '''
import time

def test_waits_to_be_interrupted(epochlog_cluster):
    c = epochlog_cluster(brokers=1, network="proxy")
    print("PIDS", c.base_dir, *[c.pid(n) for n in (c.controller, 1)], flush=True)
    time.sleep(600)
'''


SIGINT_AS_A_TERMINAL = ("import signal, sys, pytest; "
                        "signal.signal(signal.SIGINT, signal.default_int_handler); "
                        "sys.exit(pytest.console_main())")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_session_still_stops_its_clusters(tmp_path: Path, sig: int) -> None:
    """Ctrl-C (SIGINT) or a CI timeout (SIGTERM) in the middle of a test: the fixture's
    teardown runs (the broker shuts down cleanly) and the children are gone when the session
    ends."""
    (tmp_path / "test_sleeping.py").write_text(SLEEPING)
    # The inner session takes Ctrl-C as a terminal gives it, whatever this process inherited (a
    # test run started in the background by a non-interactive shell ignores SIGINT, and Python
    # then installs no handler for it in its children). -X faulthandler: should the session
    # not end, SIGABRT makes it print every thread's stack.
    inner = subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", SIGINT_AS_A_TERMINAL,
                              "-q", "-s", "-p", "no:cacheprovider", "test_sleeping.py"],
                             cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
    try:
        assert inner.stdout is not None
        for line in inner.stdout:
            if line.startswith("PIDS"):
                base, *pids = line.split()[1:]
                break
        else:
            raise AssertionError("the inner test never started its cluster")
        inner.send_signal(sig)
        try:
            rest, _ = inner.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            inner.send_signal(signal.SIGABRT)
            stacks, _ = inner.communicate(timeout=WAIT_S)
            raise AssertionError(f"the session did not end {WAIT_S:.0f}s after signal {sig}; "
                                 f"what it printed, then its threads:\n{stacks[-20000:]}"
                                 ) from None
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait()
    assert inner.returncode == pytest.ExitCode.INTERRUPTED, rest
    assert all(process_state(int(p)) in ("", "Z") for p in pids), rest
    assert "outlived" not in rest
    # stopped by the teardown (a controlled shutdown), not merely killed with the session
    assert (Path(base) / "broker-1" / ".kafka_cleanshutdown").exists(), rest


TARGETS = '''
import pytest

def test_the_option_picks_the_compose_backend(epochlog_cluster):
    with pytest.raises(ValueError, match="compose file's 3 brokers"):
        epochlog_cluster(brokers=4)  # refused before anything starts

def test_an_unknown_target_is_refused(epochlog_cluster):
    with pytest.raises(ValueError, match="target='mars': one of local, compose"):
        epochlog_cluster(target="mars")
'''


def test_epochlog_target_option_changes_the_fixtures_backend(tmp_path: Path) -> None:
    """`--epochlog-target=compose` makes epochlog_cluster build ComposeClusters (a compose
    cluster has the file's three brokers, so brokers=4 is refused at once, no engine needed);
    a target that does not exist is refused by pytest and by the fixture."""
    out = run_inner(tmp_path, "test_targets.py", TARGETS, "--epochlog-target=compose")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "2 passed" in out.stdout, out.stdout
    wrong = run_inner(tmp_path, "test_targets.py", TARGETS, "--epochlog-target=mars")
    assert wrong.returncode != 0 and "invalid choice: 'mars'" in wrong.stderr, wrong.stderr
