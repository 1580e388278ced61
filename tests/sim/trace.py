"""The real code's log lines in a simulation's trace: `real_logs(sim, trace, verbose)`.

Verbose, every line the real code logs at INFO and above goes into the trace, stamped with the
simulated time (the group and transaction coordinators' loads, unloads and transitions), and
nowhere else; otherwise nothing is logged: what a seed's faults make the real code warn about is
the run's business, not the terminal's.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from .scheduler import Scheduler


class _TraceHandler(logging.Handler):
    def __init__(self, sim: Scheduler, trace: list[str]) -> None:
        super().__init__()
        self.sim = sim
        self.trace = trace

    def emit(self, record: logging.LogRecord) -> None:
        self.trace.append(f"{self.sim.now_ms:>7}ms   [{record.name}] {record.getMessage()}")


@contextmanager
def real_logs(sim: Scheduler, trace: list[str], verbose: bool) -> Iterator[None]:
    logger = logging.getLogger("epochlog")
    old_level, old_propagate = logger.level, logger.propagate
    handler = _TraceHandler(sim, trace) if verbose else None
    if handler is not None:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    else:
        logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(old_level)
        logger.propagate = old_propagate
        if handler is not None:
            logger.removeHandler(handler)
