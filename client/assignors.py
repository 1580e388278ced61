"""Consumer-group partition assignors: which member of a group consumes which partition.

Theory of operation
-------------------
In Kafka's classic group protocol the group leader (a consumer, not the broker) decides the
assignment: it receives every member's `Subscription` from JoinGroup, runs the assignor all members
agreed on (the JoinGroup protocol name), and sends the result in SyncGroup. Everything here is pure:
subscriptions and partition counts in, assignments out, no I/O and no clock.

Three assignors, named as Kafka names them so that groups can mix our members with Java,
librdkafka, kafka-python and aiokafka members:

- `range` (Kafka's RangeAssignor): per topic, the subscribed members in order take contiguous runs
  of partitions; the first (partitions % members) get one extra.
- `roundrobin` (RoundRobinAssignor): all partitions in (topic, partition) order dealt to members in
  order, skipping members not subscribed to the partition's topic.
- `cooperative-sticky` (CooperativeStickyAssignor, KIP-429): balanced, keeps each member's owned
  partitions where balance allows, and never hands a partition to a member while another member
  still owns it; such a partition is left out for one round, its owner revokes it and rejoins, and
  the next rebalance gives it out. Our balancing is a simpler algorithm than Java's with the same
  guarantees (see `_StickyPlan`).

Member order, for range and roundrobin, is Java's `MemberInfo` order: static members (with a
group.instance.id) first, by instance id, then dynamic members by member id. Strings compare as Java
compares them (by UTF-16 code unit), so a mixed group's leaders agree on the result.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from epochlog.client.consumer_protocol import Assignment, Subscription
from epochlog.client.types import TopicPartition

_INT32 = struct.Struct(">i")


class Assignor(Protocol):
    name: str
    """The JoinGroup protocol name."""
    cooperative: bool
    """True if the assignor supports the COOPERATIVE rebalance protocol (keeps partitions across a
    rebalance and withholds moving partitions for a round)."""

    def subscription(
        self,
        topics: Iterable[str],
        owned: Iterable[TopicPartition],
        generation_id: int,
        rack_id: str | None,
    ) -> Subscription: ...

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]: ...


def _java_order(s: str) -> bytes:
    """Sort key comparing strings as Java's String.compareTo does (UTF-16 code units)."""
    return s.encode("utf-16-be", "surrogatepass")


def _member_key(member_id: str, sub: Subscription) -> tuple[int, bytes, bytes]:
    """Java's MemberInfo order: static members first by group.instance.id, then the rest by
    member id."""
    if sub.group_instance_id is not None:
        return (0, _java_order(sub.group_instance_id), _java_order(member_id))
    return (1, _java_order(member_id), b"")


def _sorted_members(members: Iterable[str], subscriptions: Mapping[str, Subscription]) -> list[str]:
    return sorted(members, key=lambda m: _member_key(m, subscriptions[m]))


def _plain_subscription(
    topics: Iterable[str], owned: Iterable[TopicPartition], generation_id: int, rack_id: str | None
) -> Subscription:
    return Subscription(
        topics=sorted(set(topics)),
        owned_partitions=sorted(set(owned)),
        generation_id=generation_id,
        rack_id=rack_id,
    )


def _to_assignments(result: Mapping[str, Iterable[TopicPartition]]) -> dict[str, Assignment]:
    return {member: Assignment(sorted(partitions)) for member, partitions in result.items()}


class _EagerAssignor:
    """An assignor for the EAGER rebalance protocol: its subscription says only what Kafka's
    subscription fields hold; the assignment ignores what members own."""

    cooperative = False

    def subscription(
        self,
        topics: Iterable[str],
        owned: Iterable[TopicPartition],
        generation_id: int,
        rack_id: str | None,
    ) -> Subscription:
        return _plain_subscription(topics, owned, generation_id, rack_id)


class RangeAssignor(_EagerAssignor):
    name = "range"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        members_of: dict[str, list[str]] = {}
        for member, sub in subscriptions.items():
            for topic in set(sub.topics):
                members_of.setdefault(topic, []).append(member)
        result: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        for topic in sorted(members_of):
            count = partitions_per_topic.get(topic)
            if count is None:
                continue
            members = _sorted_members(members_of[topic], subscriptions)
            per_member, extra = divmod(count, len(members))
            start = 0
            for i, member in enumerate(members):
                length = per_member + (1 if i < extra else 0)
                result[member].extend(
                    TopicPartition(topic, p) for p in range(start, start + length)
                )
                start += length
        return _to_assignments(result)


class RoundRobinAssignor(_EagerAssignor):
    name = "roundrobin"

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        topics_of = {member: set(sub.topics) for member, sub in subscriptions.items()}
        topics = sorted(set().union(*topics_of.values()), key=_java_order) if topics_of else []
        members = _sorted_members(subscriptions, subscriptions)
        result: dict[str, list[TopicPartition]] = {member: [] for member in subscriptions}
        turn = 0
        for topic in topics:
            for partition in range(partitions_per_topic.get(topic, 0)):
                # Some member subscribes to every topic listed, so this finds one within a cycle.
                while topic not in topics_of[members[turn]]:
                    turn = (turn + 1) % len(members)
                result[members[turn]].append(TopicPartition(topic, partition))
                turn = (turn + 1) % len(members)
        return _to_assignments(result)


class CooperativeStickyAssignor:
    """Kafka's cooperative-sticky. Subscriptions carry owned partitions and the generation they were
    owned in; user data is the generation as an int32, as Java writes it (Java reads it only from
    members sending subscription v0/v1; v2+ readers use the generation field)."""

    name = "cooperative-sticky"
    cooperative = True

    def subscription(
        self,
        topics: Iterable[str],
        owned: Iterable[TopicPartition],
        generation_id: int,
        rack_id: str | None,
    ) -> Subscription:
        s = _plain_subscription(topics, owned, generation_id, rack_id)
        s.user_data = _INT32.pack(generation_id)
        return s

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> dict[str, Assignment]:
        plan = _StickyPlan(partitions_per_topic, subscriptions)
        plan.keep_owned()
        plan.place_unassigned()
        plan.balance()
        return _to_assignments(plan.withhold_moving())


def _generation(sub: Subscription) -> int:
    """The generation a member's owned partitions are from: the v2+ field, else (a v0/v1 member)
    Java cooperative-sticky's user data, a bare int32."""
    if sub.generation_id != -1:
        return sub.generation_id
    if sub.user_data is not None and len(sub.user_data) == 4:
        generation: int = _INT32.unpack(sub.user_data)[0]
        return generation
    return -1


class _StickyPlan:
    """One cooperative-sticky assignment, built in four steps.

    1. keep_owned: every partition stays with its current owner if that owner still subscribes to
       its topic. When several members claim a partition, the claim from the highest generation wins
       (a lower one is stale: that member missed a rebalance); a tie at the highest means nobody
       owns it (Java logs this and does the same).
    2. place_unassigned: each remaining partition goes to the least-loaded member subscribed to its
       topic, partitions with the fewest candidates first (they are the hardest to place).
    3. balance: while some member has at least two more partitions than another it can reach by a
       chain of members each able to take a partition from the one before (a single move when they
       share a topic), shift one partition along the chain. Moves that revoke nothing (partitions
       fresh this round) are preferred to moves of owned ones. Each shift lowers the sum of squared
       loads, so this ends; when it ends, members with the same subscription differ by at most one
       and no reassignment could even the loads further.
    4. withhold_moving: a partition given to a member that did not own it, while another member
       still claims it, is left out of this round (Java's CooperativeStickyAssignor adjustment).
       That member revokes it, rejoins, and the next round, where nobody owns it, gives it out.

    Stickiness follows: a member loses an owned partition only to balance, and when the group is
    unchanged and everyone owns what it was given, the plan returns the same assignment.
    """

    def __init__(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> None:
        self.members = sorted(subscriptions)
        self.subscriptions = subscriptions
        self.counts = partitions_per_topic
        self.topics_of = {
            m: {t for t in subscriptions[m].topics if t in partitions_per_topic}
            for m in self.members
        }
        self.candidates: dict[str, list[str]] = {}
        for m in self.members:
            for topic in self.topics_of[m]:
                self.candidates.setdefault(topic, []).append(m)
        self.all_partitions = [
            TopicPartition(topic, p)
            for topic in sorted(self.candidates)
            for p in range(partitions_per_topic[topic])
        ]
        # Every claim as sent, valid or not: what the members will go on consuming until they
        # revoke.
        self.claimants: dict[TopicPartition, set[str]] = {}
        for m in self.members:
            for tp in subscriptions[m].owned_partitions:
                self.claimants.setdefault(TopicPartition(*tp), set()).add(m)
        self.owner: dict[TopicPartition, str] = {}
        self.assigned: dict[str, set[TopicPartition]] = {m: set() for m in self.members}

    def _give(self, tp: TopicPartition, member: str) -> None:
        self.owner[tp] = member
        self.assigned[member].add(tp)

    def _least_loaded(self, topic: str) -> str:
        return min(self.candidates[topic], key=lambda m: (len(self.assigned[m]), m))

    def keep_owned(self) -> None:
        best: dict[TopicPartition, tuple[int, list[str]]] = {}
        for m in self.members:
            generation = _generation(self.subscriptions[m])
            for tp in set(self.subscriptions[m].owned_partitions):
                topic, partition = tp
                if topic not in self.topics_of[m] or not 0 <= partition < self.counts[topic]:
                    continue
                tp = TopicPartition(topic, partition)
                top = best.get(tp)
                if top is None or generation > top[0]:
                    best[tp] = (generation, [m])
                elif generation == top[0]:
                    top[1].append(m)
        for tp, (_, owners) in best.items():
            if len(owners) == 1:
                self._give(tp, owners[0])

    def place_unassigned(self) -> None:
        free = [tp for tp in self.all_partitions if tp not in self.owner]
        free.sort(key=lambda tp: (len(self.candidates[tp.topic]), tp))
        for tp in free:
            self._give(tp, self._least_loaded(tp.topic))

    def balance(self) -> None:
        # Moves that revoke nothing (partitions fresh this round) are exhausted before any move of
        # an owned partition, and after each owned move the fresh ones are tried again.
        while (
            self._move_directly(fresh_only=True)
            or self._shift_along_chain(fresh_only=True)
            or self._move_directly(fresh_only=False)
            or self._shift_along_chain(fresh_only=False)
        ):
            pass

    def _fresh(self, member: str, tp: TopicPartition) -> bool:
        return member not in self.claimants.get(tp, ())

    def _move_directly(self, fresh_only: bool) -> bool:
        """One move of a partition from the most loaded member that has a movable one to the least
        loaded member subscribed to its topic, if that evens loads; the cheap common case. One move
        at a time, heaviest first: draining one member in a pass would over-drain it and refill it
        later with someone else's partition, a needless revocation."""
        for heavy in sorted(self.members, key=lambda m: (-len(self.assigned[m]), m)):
            for tp in sorted(
                tp for tp in self.assigned[heavy] if not fresh_only or self._fresh(heavy, tp)
            ):
                light = self._least_loaded(tp.topic)
                if len(self.assigned[heavy]) > len(self.assigned[light]) + 1:
                    self.assigned[heavy].discard(tp)
                    self._give(tp, light)
                    return True
        return False

    def _shift_along_chain(self, fresh_only: bool) -> bool:
        """One move along a chain heavy -> x -> ... -> light, where each member passes one partition
        of a topic the next subscribes to and light ends with at least one partition fewer than
        heavy started with. Single moves cannot always even out differing subscriptions (heavy and
        light may share no topic); with no such chain left, no reassignment lowers the sum of
        squared loads, so the loads are as even as the subscriptions allow. Chains passing only
        partitions nobody owned before this round are tried first: they revoke nothing."""
        load = {m: len(self.assigned[m]) for m in self.members}
        if not load or max(load.values()) - min(load.values()) <= 1:
            return False
        for source in sorted(self.members, key=lambda m: (-load[m], m)):
            via: dict[str, tuple[str, str]] = {}  # member -> (previous member, topic handed over)
            frontier = [source]
            seen = {source}
            while frontier:
                nxt: list[str] = []
                for member in frontier:
                    held = self.assigned[member]
                    if fresh_only:
                        held = {tp for tp in held if self._fresh(member, tp)}
                    for topic in sorted({tp.topic for tp in held}):
                        for taker in self.candidates[topic]:
                            if taker in seen:
                                continue
                            seen.add(taker)
                            via[taker] = (member, topic)
                            if load[taker] + 2 <= load[source]:
                                self._shift(taker, via)
                                return True
                            nxt.append(taker)
                frontier = nxt
        return False

    def _shift(self, end: str, via: Mapping[str, tuple[str, str]]) -> None:
        member = end
        while member in via:
            giver, topic = via[member]
            # Hand over a partition the giver did not own before this round if it has one.
            tp = min(
                (tp for tp in self.assigned[giver] if tp.topic == topic),
                key=lambda tp: (not self._fresh(giver, tp), tp),
            )
            self.assigned[giver].discard(tp)
            self._give(tp, member)
            member = giver

    def withhold_moving(self) -> dict[str, list[TopicPartition]]:
        def may_take(member: str, tp: TopicPartition) -> bool:
            claimants = self.claimants.get(tp)
            return not claimants or member in claimants

        return {m: [tp for tp in self.assigned[m] if may_take(m, tp)] for m in self.members}


ASSIGNORS: dict[str, Callable[[], Assignor]] = {
    RangeAssignor.name: RangeAssignor,
    RoundRobinAssignor.name: RoundRobinAssignor,
    CooperativeStickyAssignor.name: CooperativeStickyAssignor,
}


def make_assignors(names: Iterable[str]) -> list[Assignor]:
    """Assignors for the configured names, in preference order (the JoinGroup protocol order)."""
    names = list(names)
    unknown = [n for n in names if n not in ASSIGNORS]
    if unknown:
        raise ValueError(f"unknown partition assignor(s) {unknown}; known: {sorted(ASSIGNORS)}")
    return [ASSIGNORS[n]() for n in names]
