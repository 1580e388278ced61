"""File descriptors as a bounded resource: the process's open-files limit, how the broker spends
it, and what running out of it means.

The budget. At start the broker raises its soft RLIMIT_NOFILE to the hard one (`raise_soft_limit`:
an unprivileged process may, and Kafka's documentation asks operators for a high limit anyway)
and splits it (`budget`): a share for sockets (`connections_max`, at most a quarter of the
limit), a fixed reserve for everything else that opens a file for a moment (listeners, the
controller link, replica fetchers, checkpoint writes, a flush's duplicated descriptors, the
cleaner, folder fsyncs), and the rest for the log files (`OpenFiles`, open_files.py: segments and
indexes open on use, least recently used closed first). The replica capacity the broker reports
at registration is that same number: one descriptor per hosted replica, Kafka's rule of thumb
(each partition's active segment), so that the active segments of every replica it hosts fit
the cache at once; the controller places no more replicas on it than that (controller/
topic_checks.py).

Running out (EMFILE: this process's limit; ENFILE: the system's table) is an operating limit,
not a disk failure: the data dir stays healthy and nothing stops. The operation that needed the
descriptor fails with `DescriptorsExhausted` (retriable, KAFKA_STORAGE_ERROR on the wire), and
one log line at most every EXHAUSTED_LOG_INTERVAL_MS says why, with the limit and how many were
suppressed since the last.
"""

from __future__ import annotations

import errno
import logging
import resource
from typing import NamedTuple

from ..clock import monotonic_ms
from .errors import DescriptorsExhausted

log = logging.getLogger("epochlog.storage")

EXHAUSTION_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE})
EXHAUSTED_LOG_INTERVAL_MS = 10_000
# Descriptors kept for what opens files for a moment (see the module notes), besides sockets.
RESERVED_FIXED = 128
SOCKETS_SHARE_MAX = 4  # sockets get at most limit // SOCKETS_SHARE_MAX
FILES_MIN = 16  # the log file cache never gets fewer, however low the limit


def is_exhaustion(exc: BaseException) -> bool:
    """Whether exc says the process (or system) is out of file descriptors."""
    return isinstance(exc, OSError) and exc.errno in EXHAUSTION_ERRNOS


def open_files_limit() -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE; RLIM_INFINITY as -1."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return _finite(soft), _finite(hard)


def _finite(value: int) -> int:
    return -1 if value == resource.RLIM_INFINITY else value


def raise_soft_limit() -> tuple[int, int, int]:
    """Raise the soft open-files limit to the hard one; (soft before, soft now, hard). A hard
    limit without bound leaves the soft one as it is (no number to raise it to)."""
    before, hard = open_files_limit()
    if hard != -1 and before != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (OSError, ValueError) as exc:  # a sandbox that forbids it: keep what we have
            log.warning("could not raise the open-files limit from %d to %d: %s", before, hard,
                        exc)
    now, hard = open_files_limit()
    return before, now, hard


class Budget(NamedTuple):
    """How a limit of `limit` descriptors is spent (module notes)."""
    limit: int
    sockets: int  # kept for connections
    reserved: int  # kept for files opened for a moment
    files_max: int  # the log file cache's size

    @property
    def replica_capacity(self) -> int:
        """Replicas this broker can host: one descriptor each (module notes)."""
        return self.files_max


def budget(limit: int, connections_max: int) -> Budget:
    """The split of a soft limit of `limit` descriptors (-1: none); see the module notes."""
    if limit < 0:
        limit = 1 << 20  # no limit: a number far above any broker's partitions
    sockets = min(connections_max, limit // SOCKETS_SHARE_MAX)
    files_max = max(FILES_MIN, limit - sockets - RESERVED_FIXED)
    return Budget(limit, sockets, RESERVED_FIXED, files_max)


def describe_limit() -> str:
    soft, hard = open_files_limit()
    return f"open-files limit {_text(soft)} (hard {_text(hard)})"


def _text(value: int) -> str:
    return "unlimited" if value == -1 else str(value)


class _Reporter:
    """One log line per EXHAUSTED_LOG_INTERVAL_MS at most, for the whole process (the limit is
    the process's)."""

    def __init__(self) -> None:
        self.last_logged_ms: int | None = None
        self.suppressed = 0
        self.total = 0

    def report(self, what: str, exc: OSError) -> DescriptorsExhausted:
        error = DescriptorsExhausted(what, exc, describe_limit())
        self.total += 1
        now_ms = monotonic_ms()
        if self.last_logged_ms is not None and \
                now_ms - self.last_logged_ms < EXHAUSTED_LOG_INTERVAL_MS:
            self.suppressed += 1
            return error
        log.error("%s: answered with KAFKA_STORAGE_ERROR (retriable); not a disk failure, the "
                  "broker and its data dir go on%s", error,
                  f" ({self.suppressed} more since the last such line)" if self.suppressed else "")
        self.last_logged_ms, self.suppressed = now_ms, 0
        return error


REPORTER = _Reporter()


def exhausted(what: str, exc: OSError) -> DescriptorsExhausted:
    """The error for an operation on `what` that failed for want of a descriptor (logged at
    most every EXHAUSTED_LOG_INTERVAL_MS)."""
    return REPORTER.report(what, exc)
