"""One port range for everything the toolkit starts, and no port shared by two sessions on one
machine (testing/ports.py): EPOCHLOG_PORT_RANGE, the pytest plugin's --epochlog-port-range and
`epochlog chaos run --port-range`, each proven in processes of their own, as two test sessions
would be."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from epochlog.testing import ports
from epochlog.testing.ports import PORT_RANGE_ENV, RangeExhausted, parse_port_range

WAIT_S = 60.0
SPAN = 8  # the smallest range the toolkit takes

TAKE_ALL = textwrap.dedent("""
    import sys
    from epochlog.testing.ports import RangeExhausted, free_port
    taken = []
    try:
        while True:
            taken.append(free_port())
    except RangeExhausted as exc:
        print(" ".join(map(str, taken)), flush=True)
        print(exc, file=sys.stderr, flush=True)
    sys.stdin.read()  # holds its ports until told to exit
""")


def a_free_range() -> tuple[int, int]:
    """SPAN consecutive ports free now, released again for the processes under test."""
    base = ports.free_port_base(offsets=range(SPAN))
    for port in range(base, base + SPAN):
        ports._release(port)
        ports._handed_out.discard(port)
    return base, base + SPAN - 1


def env_with(port_range: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    return {**env, PORT_RANGE_ENV: port_range}


def test_two_sessions_never_hand_out_the_same_port() -> None:
    low, high = a_free_range()
    env = env_with(f"{low}-{high}")
    first = subprocess.Popen([sys.executable, "-c", TAKE_ALL], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    second: subprocess.Popen[str] | None = None
    try:
        assert first.stdout is not None and first.stdin is not None
        held = [int(p) for p in first.stdout.readline().split()]
        assert sorted(held) == list(range(low, high + 1)), held  # the whole range, only it
        second = subprocess.Popen([sys.executable, "-c", TAKE_ALL], env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        out, err = second.communicate(timeout=WAIT_S)
        assert out.split() == [], f"the second session took ports the first holds: {out}"
        assert f"no free port left in {PORT_RANGE_ENV}={low}-{high}" in err, err
        first.stdin.close()  # the first session ends: its ports are free again
        first.wait(WAIT_S)
        third = subprocess.run([sys.executable, "-c", TAKE_ALL], env=env,
                               stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               timeout=WAIT_S)
        assert sorted(int(p) for p in third.stdout.split()) == list(range(low, high + 1))
    finally:
        for p in (first, second):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def test_a_cluster_listens_in_the_given_range(tmp_path: Path) -> None:
    low = ports.free_port_base(offsets=(0, 99))
    high = low + 99
    for port in (low, high):
        ports._release(port)
    script = textwrap.dedent(f"""
        from epochlog.testing import Cluster
        with Cluster(brokers=2, base_dir={str(tmp_path)!r}) as c:
            print(c.bootstrap_servers, flush=True)
    """)
    run = subprocess.run([sys.executable, "-c", script], env=env_with(f"{low}-{high}"),
                         capture_output=True, text=True, timeout=WAIT_S * 3)
    assert run.returncode == 0, run.stderr[-2000:]
    listed = [int(a.rsplit(":", 1)[1]) for a in run.stdout.strip().split(",")]
    assert len(listed) == 2 and all(low <= p <= high for p in listed), (listed, low, high)


def test_bad_ranges_are_refused_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    for text, says in [("abc", "expected LOW-HIGH"), ("80-90", "ports from 1024"),
                       ("42010-42000", "LOW below HIGH"), ("42000-42003", "at least 8")]:
        with pytest.raises(ValueError, match=says):
            parse_port_range(text)
    monkeypatch.setenv(PORT_RANGE_ENV, "42000")
    with pytest.raises(ValueError, match=f"{PORT_RANGE_ENV}: port range '42000'"):
        ports.free_port()
    chaos = subprocess.run([sys.executable, "-m", "epochlog", "chaos", "run", "--scenario",
                            "kill-leader", "--port-range", "9-5"], capture_output=True,
                           text=True, timeout=WAIT_S)
    assert chaos.returncode == 2 and "--port-range: port range '9-5'" in chaos.stderr, chaos


def test_the_pytest_option_sets_the_range_of_a_session(tmp_path: Path) -> None:
    low, high = a_free_range()
    (tmp_path / "test_user.py").write_text(textwrap.dedent(f"""
        from epochlog.testing.network import free_port
        def test_ports_in_range():
            taken = [free_port() for _ in range({SPAN})]
            assert sorted(taken) == list(range({low}, {high} + 1)), taken
    """))
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("PYTEST_XDIST") and k != PORT_RANGE_ENV}

    def pytest_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               *args, str(tmp_path)], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=WAIT_S)

    given = pytest_run(f"--epochlog-port-range={low}-{high}")
    assert given.returncode == 0 and "1 passed" in given.stdout, given.stdout[-2000:]
    bad = pytest_run("--epochlog-port-range=abc")
    assert bad.returncode != 0 and "--epochlog-port-range: port range 'abc'" in bad.stderr, bad
    without = pytest_run()  # ran, and failed only on where its ports came from
    assert without.returncode == 1 and "1 failed" in without.stdout, without.stdout[-2000:]
    assert "assert [" in without.stdout and "== [" in without.stdout, without.stdout[-2000:]


def test_exhausting_a_range_in_one_process_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    low, high = a_free_range()
    monkeypatch.setenv(PORT_RANGE_ENV, f"{low}-{high}")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    taken = [ports.free_port() for _ in range(SPAN)]
    assert sorted(taken) == list(range(low, high + 1))
    with pytest.raises(RangeExhausted, match="widen it"):
        ports.free_port()
