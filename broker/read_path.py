"""`ReadPath`: the fetch path's own state on one broker (handlers/fetch.py reads through it).

Fetch sessions (KIP-227, fetch_sessions.py), the replica selector that names a preferred read
replica (KIP-392, replica_selector.py) and the counters the metrics show. It sits below the
handlers so that the broker's interface for them (handlers/_context.py) can name it.
"""

from __future__ import annotations

from dataclasses import dataclass

from .fetch_sessions import FetchSessionCache
from .replica_selector import ReplicaSelector


@dataclass
class ReadPath:
    """The fetch path's own state on one broker: sessions, the replica selector, counters."""

    sessions: FetchSessionCache
    selector: ReplicaSelector
    follower_fetches_total: int = 0  # consumer fetch answers with a partition read as follower
    follower_fetch_bytes_total: int = 0
    preferred_replica_answers_total: int = 0  # partitions answered with a preferred replica
    stale_follower_answers_total: int = 0  # replica fetches answered at once for a new HW
    replica_fetches_total: int = 0  # Fetch requests from followers answered
    replica_fetch_partitions_named_total: int = 0  # partitions those requests named
    replica_fetch_partitions_answered_total: int = 0  # partitions their answers listed
