"""Automatic preferred-leader rebalancing: which partitions to hand back to their preferred replica.

Kafka's `auto.leader.rebalance.enable`: the first replica of a partition's assignment is its
*preferred* replica, and assignment spreads preferred replicas evenly over brokers, so leadership
is balanced when every partition is led by its preferred replica. Failures move leadership away
(elections pick the first live ISR member), and nothing moves it back by itself.

Every `leader.imbalance.check.interval.seconds` the controller computes, per broker, its
imbalance ratio: of the partitions it is preferred for, the share it does not lead. A broker whose
ratio is above `leader.imbalance.per.broker.percentage` / 100 gets back every partition it is
preferred for and does not lead, where it may lead (alive and in the ISR: ControllerState checks,
since that needs the brokers), through the same preferred election as ElectLeaders.

Pure functions of the topics: no clock, no I/O (ControllerState.rebalance_leaders owns the timing).
"""

from __future__ import annotations

from collections.abc import Mapping

from .model import Topic


def imbalance(topics: Mapping[str, Topic]) -> dict[int, tuple[int, int]]:
    """broker id -> (partitions it is preferred for, how many of those it does not lead)."""
    out: dict[int, tuple[int, int]] = {}
    for topic in topics.values():
        for p in topic.partitions.values():
            preferred = p.replicas[0]
            total, not_led = out.get(preferred, (0, 0))
            out[preferred] = (total + 1, not_led + (p.leader != preferred))
    return out


def over_threshold(topics: Mapping[str, Topic], percentage: int) -> dict[int, tuple[int, int]]:
    """The brokers whose imbalance ratio is above percentage / 100, with their counts."""
    return {b: (total, not_led) for b, (total, not_led) in imbalance(topics).items()
            if not_led * 100 > percentage * total}


def candidates(topics: Mapping[str, Topic], brokers: set[int]) -> list[tuple[str, int]]:
    """Partitions preferred by one of `brokers` and led by another, in name and index order."""
    return [(name, index)
            for name, topic in sorted(topics.items())
            for index, p in sorted(topic.partitions.items())
            if p.replicas[0] in brokers and p.leader != p.replicas[0]]
