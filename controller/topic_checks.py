"""The checks a topic creation or partition increase passes before the controller decides it:
each answers (0, None, ...) or (error code, a message naming what was wrong, ...), and none
changes state, so `validate_only` requests run exactly the same code as real ones.

Kafka's rules: a legal name (protocol/topic_names.py), 1 to TOPIC_PARTITIONS_MAX partitions, a
replication factor the eligible (live, unfenced) brokers can hold, explicit assignments with
indexes 0..n-1 and equal, duplicate-free replica lists of known brokers, and a
min.insync.replicas no higher than the replication factor (such a topic would refuse every
acks=all write, so it is refused when set, not later). And epochlog's own (issue 33): no broker
gets more replicas than the capacity it registered (one open-files limit's worth:
broker/storage/descriptors.py), refused with POLICY_VIOLATION naming the broker and the
numbers, as Kafka's create-topic policy refuses; one request can never take brokers past what
they can open.
"""

from __future__ import annotations

import random
from collections.abc import Container, Mapping, Sequence

from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.topic_names import why_invalid

from . import assignment

TOPIC_PARTITIONS_MAX = 10_000

E = ErrorCode
Lists = list[tuple[int, ...]]


def check_name(name: str) -> tuple[int, str | None]:
    why = why_invalid(name)
    return (E.INVALID_TOPIC_EXCEPTION, why) if why else (0, None)


def min_insync_above(overrides: Mapping[str, str], replication_factor: int) -> str | None:
    """Why min.insync.replicas cannot be met (above the replication factor), or None."""
    wanted = overrides.get("min.insync.replicas")
    if wanted is not None and int(wanted) > replication_factor:
        return (f"min.insync.replicas={wanted} is above the replication factor "
                f"{replication_factor}: acks=all writes could never succeed")
    return None


def auto_assignment(eligible: Sequence[tuple[int, str | None]], num_partitions: int,
                    replication_factor: int, rng: random.Random
                    ) -> tuple[int, str | None, Lists]:
    """Replica lists for num_partitions over the eligible (broker id, rack) pairs, starting at
    a random broker (assignment.py spreads them over racks)."""
    if not 1 <= num_partitions <= TOPIC_PARTITIONS_MAX:
        return E.INVALID_PARTITIONS, f"partitions must be 1-{TOPIC_PARTITIONS_MAX}", []
    if replication_factor < 1 or replication_factor > len(eligible):
        return (E.INVALID_REPLICATION_FACTOR, f"replication factor {replication_factor} "
                f"needs that many live brokers; {len(eligible)} are live", [])
    start = rng.randrange(len(eligible))
    return 0, None, assignment.assign(eligible, num_partitions, replication_factor, start)


def check_capacity(replica_lists: Sequence[Sequence[int]], hosted: Mapping[int, int],
                   capacity: Mapping[int, int]) -> tuple[int, str | None]:
    """Whether placing replica_lists keeps every broker within its capacity (-1 or unknown:
    no bound); hosted: the replicas each holds already."""
    adding: dict[int, int] = {}
    for replicas in replica_lists:
        for replica in replicas:
            adding[replica] = adding.get(replica, 0) + 1
    over = [f"broker {b} can host {capacity[b]} replicas (its open-files limit) and holds "
            f"{hosted.get(b, 0)}; this would add {n} ({hosted.get(b, 0) + n} in all)"
            for b, n in sorted(adding.items())
            if capacity.get(b, -1) >= 0 and hosted.get(b, 0) + n > capacity[b]]
    if over:
        return E.POLICY_VIOLATION, "; ".join(over)
    return 0, None


def check_assignment(assignments: Mapping[int, Sequence[int]], known: Container[int]
                     ) -> tuple[int, str | None, Lists]:
    """Explicit replica lists by partition index, checked; known: the registered broker ids."""
    indexes = sorted(assignments)
    if indexes != list(range(len(indexes))) or len(indexes) > TOPIC_PARTITIONS_MAX:
        return E.INVALID_REPLICA_ASSIGNMENT, "partition indexes must be 0..n-1", []
    lists = [tuple(assignments[i]) for i in indexes]
    for replicas in lists:
        if not replicas or len(set(replicas)) != len(replicas):
            return (E.INVALID_REPLICA_ASSIGNMENT,
                    "replica lists must be non-empty, without duplicates", [])
        if len(replicas) != len(lists[0]):
            return E.INVALID_REPLICA_ASSIGNMENT, "partitions must have equal replica counts", []
        unknown = [r for r in replicas if r not in known]
        if unknown:
            return E.INVALID_REPLICA_ASSIGNMENT, f"unknown brokers {unknown}", []
    return 0, None, lists
