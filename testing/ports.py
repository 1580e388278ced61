"""Which ports the toolkit's clusters listen on: one range, and never a port another test session
on this machine holds.

Where from: `EPOCHLOG_PORT_RANGE=LOW-HIGH` when set (the pytest plugin's
`--epochlog-port-range` and `epochlog chaos run --port-range` set it), else every port outside the
kernel's ephemeral range from 10000 up. A port the kernel chose (bind to 0) comes from the range it
also gives to outgoing connections: once a broker holding it is killed, a client's connection can
take it as its local port and the restarted broker fails with "address already in use"; ports
outside that range are never taken that way. A given range that overlaps the ephemeral one is
used as given, and said once.

Unique three ways: each port is handed out once per process; a pytest-xdist worker draws from its
own slice of the range (one worker's broker, down for a restart, keeps its port); and each port
handed out is claimed machine-wide by a file named for it under PORTS_DIR holding this process's
pid, valid until this process exits (then removed; a dead owner's file is taken over), so two
test sessions (or a session and a chaos run) on one machine never hand out the same port,
whatever their seeds. A port is also checked free by
binding it: something outside the toolkit listening there is skipped.

Bounds: a range must hold at least PORTS_MIN ports; when a given range has no free port left,
RangeExhausted names it (outside a given range the kernel's choice is the last resort, as before).
"""

from __future__ import annotations

import atexit
import os
import random
import socket
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from .processes import pid_alive

PORT_RANGE_ENV = "EPOCHLOG_PORT_RANGE"
PORTS_DIR = Path(tempfile.gettempdir()) / "epochlog-ports"
PORTS_MIN = 8  # a range smaller than this cannot hold one cluster (3 brokers x 2 + controller)
PORT_LOW_MIN = 1024
TRIES_MAX = 200
LOOPBACK = "127.0.0.1"

_handed_out: set[int] = set()  # ports this process gave out
_claims: dict[int, str] = {}  # ports this process claimed machine-wide (its pid in the file)
_said: set[str] = set()


class RangeExhausted(RuntimeError):
    """The given port range has no port left that is free and unclaimed."""


def parse_port_range(text: str) -> tuple[int, int]:
    """LOW-HIGH, inclusive; ValueError naming what is wrong."""
    low, sep, high = text.strip().partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        first = last = -1
    if not sep or first < 0:
        raise ValueError(f"port range {text!r}: expected LOW-HIGH, e.g. 42000-42999")
    if not PORT_LOW_MIN <= first < last <= 65535:
        raise ValueError(f"port range {text!r}: LOW and HIGH must be ports from {PORT_LOW_MIN} "
                         f"to 65535, LOW below HIGH")
    if last - first + 1 < PORTS_MIN:
        raise ValueError(f"port range {text!r} holds {last - first + 1} ports: at least "
                         f"{PORTS_MIN} are needed")
    return first, last


def given_range() -> tuple[int, int] | None:
    """EPOCHLOG_PORT_RANGE, parsed (ValueError naming the variable when it is wrong)."""
    text = os.environ.get(PORT_RANGE_ENV, "").strip()
    if not text:
        return None
    try:
        chosen = parse_port_range(text)
    except ValueError as exc:
        raise ValueError(f"{PORT_RANGE_ENV}: {exc}") from None
    low, high = _ephemeral_range()
    if chosen[0] <= high and low <= chosen[1]:
        _say_once("ephemeral", f"{PORT_RANGE_ENV}={text} overlaps the kernel's ephemeral ports "
                  f"({low}-{high}): a restarted broker may find its port taken by a client")
    return chosen


def _ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands to outgoing connections (Linux's default when unreadable)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def _worker_share(start: int, end: int) -> tuple[int, int]:
    """This pytest-xdist worker's slice of ports start..end (all of them outside xdist)."""
    try:
        index = int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw"))
        count = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    except (KeyError, ValueError):
        return start, end
    size = (end - start + 1) // max(count, 1)
    return start + index * size, start + (index + 1) * size - 1


def _ranges() -> list[tuple[int, int]]:
    """Where ports are drawn from in this process (its worker's share of each range)."""
    chosen = given_range()
    if chosen is not None:
        return [_worker_share(*chosen)]
    low, high = _ephemeral_range()
    ranges = [(10000, low - 1)] if low > 11000 else []
    if high < 64535:
        ranges.append((high + 1, 65535))
    return [_worker_share(start, end) for start, end in ranges]


def port_span() -> tuple[int, int]:
    """The first range free_port draws from in this process (for callers that need a run of
    consecutive ports)."""
    ranges = _ranges()
    if not ranges:
        raise RangeExhausted("no ports outside the kernel's ephemeral range: set "
                             f"{PORT_RANGE_ENV}")
    return ranges[0]


def _say_once(key: str, message: str) -> None:
    if key not in _said:
        _said.add(key)
        print(f"epochlog.testing: {message}", file=sys.stderr, flush=True)


def _claim(port: int) -> bool:
    """Take port machine-wide for as long as this process lives; False if a live process
    holds it. The claim is a file named for the port holding its owner's pid: no descriptor is
    kept (a session hands out thousands of ports), a file whose owner has died is taken over,
    and this process's files are removed when it exits."""
    if port in _claims:
        return True
    path = PORTS_DIR / str(port)
    mine = str(os.getpid())
    spare = PORTS_DIR / f"{port}.{mine}"  # written whole first: a claim is never seen empty
    try:
        PORTS_DIR.mkdir(mode=0o777, exist_ok=True)
        spare.write_text(mine)
        try:
            os.link(spare, path)  # fails if the port is claimed
        except FileExistsError:
            if _alive(path.read_text().strip()):
                return False
            os.replace(spare, path)  # its owner died: taken over
            if path.read_text().strip() != mine:  # another took it over at the same moment
                return False
        finally:
            spare.unlink(missing_ok=True)
    except OSError as exc:
        _say_once("claims", f"ports are not claimed machine-wide ({PORTS_DIR}: {exc}); two test "
                  "sessions at once may collide")
        return True
    if not _claims:
        atexit.register(_release_all)
    _claims[port] = mine
    return True


def _alive(pid_text: str) -> bool:
    try:
        pid = int(pid_text)
    except ValueError:
        return False  # damaged: taken over
    return pid == os.getpid() or pid_alive(pid)


def _release(port: int) -> None:
    if _claims.pop(port, None) is not None:
        try:
            (PORTS_DIR / str(port)).unlink()
        except OSError:
            pass


def _release_all() -> None:
    for port in list(_claims):
        _release(port)


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _take(host: str, port: int) -> bool:
    """Hand port out if it is new to this process, free now and claimed for us."""
    if port in _handed_out or not _bindable(host, port) or not _claim(port):
        return False
    _handed_out.add(port)
    return True


def free_port(host: str = LOOPBACK) -> int:
    """A port nobody listens on now, in the toolkit's range, not handed out before by this
    process nor held by another (see the module's notes)."""
    ranges = _ranges()
    given = given_range() is not None
    if given:  # a given range may be small: searched whole, in random order
        start, end = ranges[0]
        candidates = random.sample(range(start, end + 1), end - start + 1)
    else:
        candidates = [random.randint(*random.choice(ranges)) for _ in range(TRIES_MAX)
                      ] if ranges else []
    for port in candidates:
        if _take(host, port):
            return port
    if given:
        raise RangeExhausted(f"no free port left in {PORT_RANGE_ENV}={start}-{end} (this "
                             "process's share): widen it, or stop what holds its ports")
    with socket.socket() as s:  # no room outside the ephemeral range: the kernel's choice
        s.bind((host, 0))
        chosen: int = s.getsockname()[1]
        return chosen


def free_port_base(offsets: Iterable[int] = (0, 1, 2, 100), tries_max: int = 50) -> int:
    """A base P with P + each offset free on 127.0.0.1 now and claimed, in this process's range
    (`epochlog cluster up --port-base P` takes P, P+1, P+2 for three brokers and P+100 for the
    controller)."""
    start, end = port_span()
    wanted = sorted(set(offsets))
    reach = wanted[-1]
    if end - reach < start:
        raise RangeExhausted(f"ports {start}-{end} cannot hold offsets {wanted}")
    for _ in range(tries_max):
        base = random.randrange(start, end - reach + 1)
        ports = [base + offset for offset in wanted]
        if any(p in _handed_out or not _bindable(LOOPBACK, p) for p in ports):
            continue
        claimed = [p for p in ports if p not in _claims]
        if all(_claim(p) for p in ports):
            _handed_out.update(ports)
            return base
        for p in claimed:
            _release(p)
    raise RangeExhausted(f"no free run of ports for offsets {wanted} in {start}-{end}")
