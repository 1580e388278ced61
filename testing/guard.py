"""Finding epochlog processes that outlived the test session that started them.

A session marks its environment: `EPOCHLOG_TEST_SESSIONS` gets a token of its own (appended, so
a session started inside another, pytester's or a subprocess's, is seen by both). Every process
started during the session inherits the mark, whoever started it and wherever it was re-parented
later (a broker whose `cluster up` was killed still carries it), and `/proc/PID/environ` shows a
process's environment as it started. At the end, any live process carrying the token whose
command is `epochlog broker|controller|cluster|consume|produce|chaos` outlived the session: it
is killed (SIGKILL, its process group too) and reported with its command line. Processes of
other sessions or other users are never touched: they do not carry the token.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

SESSION_ENV = "EPOCHLOG_TEST_SESSIONS"
COMMANDS = frozenset({"broker", "controller", "cluster", "consume", "produce", "chaos"})
KILL_WAIT_S = 10.0


@dataclass(frozen=True)
class Leftover:
    pid: int
    command: str


def begin() -> str:
    """Mark this process's environment (and so its children's) with a new session token."""
    token = uuid.uuid4().hex[:16]
    os.environ[SESSION_ENV] = " ".join([*os.environ.get(SESSION_ENV, "").split(), token])
    return token


def end(token: str) -> None:
    """Take the token off this process's environment."""
    kept = [t for t in os.environ.get(SESSION_ENV, "").split() if t != token]
    if kept:
        os.environ[SESSION_ENV] = " ".join(kept)
    else:
        os.environ.pop(SESSION_ENV, None)


def is_epochlog_command(argv: list[str]) -> bool:
    """`epochlog X ...` or `python -m epochlog X ...` with X one of COMMANDS."""
    for i, arg in enumerate(argv[:-1]):
        name = os.path.basename(arg)
        if name == "epochlog" and (i == 0 or argv[i - 1] == "-m" or
                                   os.path.basename(argv[i - 1]).startswith("python")):
            return argv[i + 1] in COMMANDS
    return False


def _environ_tokens(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    for item in raw.split(b"\0"):
        if item.startswith(SESSION_ENV.encode() + b"="):
            return item.split(b"=", 1)[1].decode(errors="replace").split()
    return []


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


def leftovers(token: str) -> list[Leftover]:
    """Live epochlog processes carrying the token (not this process, not zombies)."""
    found: list[Leftover] = []
    if not os.path.isdir("/proc"):  # not Linux: nothing to look through
        return found
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace") \
                .rstrip("\0").split("\0")
            if not is_epochlog_command(argv) or token not in _environ_tokens(pid) \
                    or _state(pid) == "Z":
                continue
        except (OSError, ValueError):
            continue  # gone meanwhile, or not ours to read
        found.append(Leftover(pid, " ".join(argv)))
    return found


def kill(processes: list[Leftover]) -> None:
    """SIGKILL each (and its process group, if it leads one); wait until gone (bounded), and
    reap any that is our own child."""
    for p in processes:
        try:
            if os.getpgid(p.pid) == p.pid:  # it leads a group: whatever it started goes too
                os.killpg(p.pid, signal.SIGKILL)
            os.kill(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + KILL_WAIT_S
    for p in processes:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(p.pid, os.WNOHANG)[0] == p.pid:
                    break
            except ChildProcessError:  # not our child: wait until it is gone or a zombie
                try:
                    if _state(p.pid) == "Z":
                        break
                except OSError:
                    break
            time.sleep(0.01)
