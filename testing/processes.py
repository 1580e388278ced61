"""Child processes of a test cluster: started as a user starts them, watched, and always reaped.

Theory of operation
-------------------
A `Process` runs one command (`python -m epochlog broker ...`) as a child in its own session, so
it has its own process group: a Ctrl-C in the terminal reaches the harness alone, and a kill
reaches the child and anything it started. A thread per child reads its stderr line by line into
memory (and into a log file, when one is given); waits are on those lines, under a condition
variable, each bounded (`WAIT_S` unless told), never a sleep followed by a look.

Reaping, on every path out:
- the owner stops or kills its children (tests: the fixture's teardown, also after a failure);
- an `atexit` hook SIGKILLs every child still alive (an interrupted run, a forgotten cluster);
- where util-linux's `setpriv` exists, every child gets `--pdeathsig KILL`, so the kernel kills
  it if the harness process itself dies without running any hook (SIGKILL, a crash). The parent
  death signal fires when the *thread* that forked the child ends, so all children are forked
  from one long-lived spawner thread, never from a caller's short-lived thread.

Signals go to the child's process group (the child leads it: `start_new_session`), and `kill`
returns only once the child is reaped, so a test that killed a broker sees its pid gone.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO

WAIT_S = 20.0  # default bound of every wait on a child
STOP_S = 30.0  # a controlled shutdown may take the broker's controlled_shutdown_ms_max (15 s)
LINES_MAX = 200_000  # lines kept in memory per child; the oldest half goes past this
LOG_TAIL_LINES = 60  # lines of a child's log shown when a wait on it fails

_SETPRIV = shutil.which("setpriv")
_live: weakref.WeakSet[Process] = weakref.WeakSet()
_live_lock = threading.Lock()


class ProcessError(AssertionError):
    """A child did not do what a wait expected (no such line in time, did not stop, exited).
    An AssertionError, so pytest shows it as a failed expectation with the child's log."""


# ------------------------------------------------------------------------------- spawning
class _Spawner:
    """One long-lived thread forks every child (see the module's note on --pdeathsig)."""

    def __init__(self) -> None:
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def popen(self, argv: Sequence[str], **kwargs: object) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    1, thread_name_prefix="epochlog-spawner")
            pool = self._pool
        future = pool.submit(lambda: subprocess.Popen(argv, **kwargs))  # type: ignore[call-overload]
        return future.result()  # type: ignore[no-any-return]


_spawner = _Spawner()



def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists (another user's counts: it cannot be signalled,
    but it is there)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

def command_prefix() -> list[str]:
    """What goes before every child's command: the parent-death signal, where available."""
    return [_SETPRIV, "--pdeathsig", "KILL", "--"] if _SETPRIV else []


def _kill_all_at_exit() -> None:
    with _live_lock:
        children = list(_live)
    for child in children:
        child.kill()


atexit.register(_kill_all_at_exit)


def process_state(pid: int) -> str:
    """The kernel's one-letter state of a process ('R', 'S', 'T' stopped, 'Z' zombie, ...), or
    '' when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return ""
    return stat[stat.rindex(")") + 2]  # the name (in parentheses) may hold spaces


# --------------------------------------------------------------------------------- Process
class Process:
    """One child process; a thread collects its stderr lines (and its stdout's, with
    stdout_too) for waits and assertions."""

    def __init__(self, name: str, *, log_path: Path | None = None,
                 on_exit: Callable[[Process], None] | None = None,
                 stdout_too: bool = False) -> None:
        self.name = name
        self.log_path = log_path
        self.stdout_too = stdout_too  # read stdout into the lines as well (a CLI's output)
        self.on_exit = on_exit
        self.argv: list[str] = []
        self.proc: subprocess.Popen[bytes] | None = None
        self._lines: list[str] = []
        self._dropped = 0  # lines let go past LINES_MAX, so marks stay absolute
        self._changed = threading.Condition()
        self._reader: threading.Thread | None = None
        self._signalled = False  # SIGTERM sent since the last start (sent once: see terminate)

    # ------------------------------------------------------------------------- lifecycle
    def start(self, argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
        assert not self.alive, f"{self.name} is already running (pid {self.pid})"
        self.argv = list(argv)
        with self._changed:
            self._dropped += len(self._lines)
            self._lines = []
        self._signalled = False
        log = self._open_log()
        self.proc = _spawner.popen(
            [*command_prefix(), *self.argv], stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if self.stdout_too else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if self.stdout_too else subprocess.PIPE,
            start_new_session=True,
            env={**(os.environ if env is None else env), "PYTHONUNBUFFERED": "1"})
        with _live_lock:
            _live.add(self)
        self._reader = threading.Thread(target=self._read, args=(self.proc, log),
                                        name=f"epochlog-log-{self.name}", daemon=True)
        self._reader.start()

    def _open_log(self) -> IO[str] | None:
        if self.log_path is None:
            return None
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "a", encoding="utf-8")  # noqa: SIM115 (the reader closes it)
        log.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting: {' '.join(self.argv)}\n")
        log.flush()
        return log

    def _read(self, proc: subprocess.Popen[bytes], log: IO[str] | None) -> None:
        stream = proc.stdout if self.stdout_too else proc.stderr
        assert stream is not None
        try:
            for raw in stream:
                line = raw.decode(errors="replace").rstrip()
                if log is not None:
                    log.write(line + "\n")
                    log.flush()
                with self._changed:
                    self._lines.append(line)
                    if len(self._lines) > LINES_MAX:
                        half = LINES_MAX // 2
                        del self._lines[:half]
                        self._dropped += half
                    self._changed.notify_all()
        finally:
            stream.close()
            if log is not None:
                log.close()
            proc.wait()  # stderr closes when the process exits (or closes it; then we wait)
            with self._changed:
                self._changed.notify_all()
            if self.on_exit is not None and self.proc is proc:
                self.on_exit(self)

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else -1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc is not None else None

    @property
    def paused(self) -> bool:
        return self.alive and process_state(self.pid) == "T"

    # ----------------------------------------------------------------------------- lines
    @property
    def lines(self) -> list[str]:
        """The lines read so far (since the last start); the oldest go past LINES_MAX."""
        with self._changed:
            return list(self._lines)

    def mark(self) -> int:
        """A position in the log: wait_line(start=mark) looks only at lines after it."""
        with self._changed:
            return self._dropped + len(self._lines)

    def wait_line(self, pattern: str | re.Pattern[str], start: int = 0,
                  timeout_s: float = WAIT_S) -> re.Match[str]:
        """The first line from mark `start` on matching pattern, waiting for it (bounded)."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for line in self._lines[max(start - self._dropped, 0):]:
                    found = regex.search(line)
                    if found:
                        return found
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (not self.alive and self._reader_done()):
                    raise ProcessError(self._gave_up(regex, remaining <= 0))
                self._changed.wait(min(remaining, 1.0))

    def _gave_up(self, regex: re.Pattern[str], timed_out: bool) -> str:
        """Why a wait_line ended without its line: the process's own last error first (what a
        person needs: "address already in use"), then what was waited for, then its log."""
        if timed_out:
            head = f"{self.name}: no line matching {regex.pattern!r} (timed out)"
        else:
            errors = [line for line in self._lines if " ERROR " in line or " CRITICAL " in line]
            said = errors[-1].split(": ", 1)[-1] if errors else "no error logged"
            head = (f"{self.name} exited with code {self.returncode} before it was ready: "
                    f"{said} (waited for a line matching {regex.pattern!r})")
        return f"{head}; log:\n" + self.tail()

    def has_line(self, text: str, start: int = 0) -> bool:
        """Whether a line containing text was read already. Only for lines the child printed
        before one already waited for (its lines arrive in order); otherwise use wait_line."""
        with self._changed:
            return any(text in line for line in self._lines[max(start - self._dropped, 0):])

    def tail(self, lines: int = LOG_TAIL_LINES) -> str:
        with self._changed:
            return "\n".join(self._lines[-lines:])

    def _reader_done(self) -> bool:
        return self._reader is None or not self._reader.is_alive()

    # --------------------------------------------------------------------------- signals
    def send_signal(self, sig: int) -> None:
        """To the child's process group (it leads it), if it still runs."""
        if self.alive:
            try:
                os.killpg(self.pid, sig)
            except ProcessLookupError:
                pass

    def pause(self, timeout_s: float = WAIT_S) -> None:
        """SIGSTOP, returning once the kernel shows the process stopped (state T)."""
        self.send_signal(signal.SIGSTOP)
        self._until(lambda: process_state(self.pid) in ("T", ""), "to stop (state T)", timeout_s)

    def resume(self, timeout_s: float = WAIT_S) -> None:
        """SIGCONT, returning once the process is no longer stopped."""
        self.send_signal(signal.SIGCONT)
        self._until(lambda: process_state(self.pid) != "T", "to continue", timeout_s)

    def kill(self) -> int | None:
        """SIGKILL and reap: on return the pid is gone. The exit code (None if never started)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.send_signal(signal.SIGKILL)
            self.proc.wait()
        self._join_reader(WAIT_S)
        return self.proc.returncode

    def terminate(self, sig: int = signal.SIGTERM) -> None:
        """Send sig once per start: a second SIGTERM could land after the child removed its
        handler on the way out and kill it. A stopped child is continued first (it could not
        handle the signal otherwise)."""
        if self.alive and not self._signalled:
            self._signalled = True
            self.send_signal(signal.SIGCONT)
            self.send_signal(sig)

    def wait_exit(self, timeout_s: float = WAIT_S) -> int:
        """The exit code, waiting for it (bounded; ProcessError past the bound)."""
        assert self.proc is not None, f"{self.name} was never started"
        try:
            rc = self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise ProcessError(f"{self.name} (pid {self.pid}) still runs after {timeout_s}s; "
                               "its log ends:\n" + self.tail()) from None
        self._join_reader(timeout_s)
        return rc

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = STOP_S) -> int:
        """terminate(sig), then wait for the exit; the exit code. One that does not stop in
        time is asked for its tasks' stacks (SIGUSR1: a broker logs them), killed, and the
        failure raised with its log."""
        if self.proc is None:
            return 0
        self.terminate(sig)
        try:
            return self.wait_exit(timeout_s)
        except ProcessError:
            mark = self.mark()
            self.send_signal(signal.SIGUSR1)
            try:
                self.wait_line("SIGUSR1", start=mark, timeout_s=2.0)
            except ProcessError:
                pass
            self.kill()
            raise ProcessError(f"{self.name} did not stop within {timeout_s}s; its log ends:\n"
                               + self.tail(120)) from None

    def _join_reader(self, timeout_s: float) -> None:
        if self._reader is not None and self._reader is not threading.current_thread():
            self._reader.join(timeout_s)

    def _until(self, check: Callable[[], bool], what: str, timeout_s: float) -> None:
        """For kernel state that has no event to wait on (a stop takes microseconds): look
        again every millisecond or so, bounded."""
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise ProcessError(f"{self.name} (pid {self.pid}) did not {what} in {timeout_s}s")
            time.sleep(0.001)
