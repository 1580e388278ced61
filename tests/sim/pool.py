"""Seeds run on a pool of worker processes, started so that they cannot inherit a held lock.

The workers come from a fork server (a fresh interpreter that has no threads), never forked
straight from the test session: by the time the simulation runs, the session holds other threads
(PySpark's py4j gateway and accumulator server, from tests/pipeline/), and a child forked from a
threaded process can start with one of their locks held and block for ever. A CI run hung for
its whole 90 minutes that way. The wait for the results is bounded too.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from typing import TypeVar

Job = TypeVar("Job")
Out = TypeVar("Out")

POOL_PROCESSES = 2  # the CI machine has 2 cores
# The results' bound: 1,000 seeds take one to three minutes on 2 busy cores; far beyond is a hang.
MIN_WAIT_S = 900.0
WAIT_PER_SEED_S = 2.0


def run_in_pool(run: Callable[[Job], Out], jobs: Sequence[Job], chunksize: int) -> list[Out]:
    """`run` over `jobs` on POOL_PROCESSES workers, results in the jobs' order. `run` must be a
    module-level function (the workers import it by name)."""
    ctx = multiprocessing.get_context("forkserver")
    with ctx.Pool(POOL_PROCESSES) as pool:
        pending = pool.map_async(run, jobs, chunksize=chunksize)
        bound = max(MIN_WAIT_S, WAIT_PER_SEED_S * len(jobs))
        try:
            return pending.get(timeout=bound)
        except multiprocessing.TimeoutError:
            raise AssertionError(f"{len(jobs)} simulation seeds gave no results within "
                                 f"{bound:.0f} s: a worker hangs") from None
