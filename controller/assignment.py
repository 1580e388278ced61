"""Rack-aware replica assignment, in the spirit of Kafka's AdminUtils.

Brokers are laid out in a rack-alternating ring (a1, b1, c1, a2, b2, ...). Partition p's first
replica (its preferred leader) is ring[(start + p) % n], so leaders spread over brokers and racks;
its other replicas are taken walking the ring, preferring a rack not yet used by the partition,
so a partition's replicas span min(replication factor, racks) racks. A broker without a rack
counts as a rack of its own. `start` comes from the caller's seeded random source, which keeps
simulations deterministic.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence


def rack_alternated(brokers: Sequence[tuple[int, str | None]]) -> list[tuple[int, str]]:
    """(broker id, rack) pairs ordered a1, b1, c1, a2, b2, ... (racks and ids sorted)."""
    by_rack: dict[str, list[int]] = defaultdict(list)
    for broker_id, rack in sorted(brokers):
        by_rack[rack if rack is not None else f"<none:{broker_id}>"].append(broker_id)
    racks = sorted(by_rack)
    ring: list[tuple[int, str]] = []
    for i in range(max((len(v) for v in by_rack.values()), default=0)):
        for rack in racks:
            if i < len(by_rack[rack]):
                ring.append((by_rack[rack][i], rack))
    return ring


def assign(brokers: Sequence[tuple[int, str | None]], partitions: int, replication_factor: int,
           start: int) -> list[tuple[int, ...]]:
    """Replica lists for `partitions` partitions; requires 1 <= replication_factor <= brokers."""
    ring = rack_alternated(brokers)
    n = len(ring)
    assert 1 <= replication_factor <= n, (replication_factor, n)
    out = []
    for p in range(partitions):
        first = (start + p) % n
        # Shift where followers are searched from as p wraps the ring, so that followers of
        # partitions sharing a leader differ (Kafka's replica shift, simplified).
        shift = (start + p) // n
        walk = [ring[(first + 1 + (shift + k) % (n - 1)) % n] for k in range(n - 1)] if n > 1 \
            else []
        out.append(_pick(ring[first], walk, replication_factor))
    return out


def _pick(first: tuple[int, str], walk: list[tuple[int, str]], count: int) -> tuple[int, ...]:
    chosen = [first[0]]
    racks_used = {first[1]}
    all_racks = {rack for _, rack in walk} | racks_used
    while len(chosen) < count:
        if racks_used >= all_racks:
            racks_used = set()  # every rack holds a replica: start a new round over the racks
        for broker_id, rack in walk:
            if broker_id not in chosen and rack not in racks_used:
                chosen.append(broker_id)
                racks_used.add(rack)
                break
        else:  # the racks left have no unused broker: take any unused one
            broker_id = next(b for b, _ in walk if b not in chosen)
            chosen.append(broker_id)
    return tuple(chosen)
