"""Unclean recovery (KIP-966): when a partition must be led from outside its ISR and eligible
replicas, ask the surviving replicas what they hold and elect the one that holds the most.

Before this, an unclean election took the first live replica in assignment order, which could be
the one that was cut off first and holds the least: everything the longer replicas held past it
was then truncated away on them too. Leader epochs make "holds the most" decidable (seeds 000 and
001): a log whose last batch has a higher leader epoch saw a later leader, and between two logs
whose last epochs are equal the longer one holds the other's records and more. So the best
replica is the one with the greatest (last written leader epoch, log end offset).

How the question is asked: OffsetForLeaderEpoch v4 with replica_id LOG_END_QUERY (-3), which a
broker answers from any replica it hosts, leading or not, with (its latest leader epoch, its log
end offset) and no fencing or high-watermark cap (broker/handlers/offset_for_leader_epoch.py).
Kafka's KIP-966 names a new request for this (GetReplicaLogInfo); one more use of an existing
request keeps our wire surface to what Kafka's tools know. A replica whose log is offline on its
broker answers KAFKA_STORAGE_ERROR and is no candidate.

Rules, for one partition (`Recovery`):
- Started by the controller's election when neither ISR nor ELR nor last known ELR has a live
  member and the topic allows unclean elections; the partition stays without a leader meanwhile.
- Every live replica is asked once per broker generation (a broker that registers during the
  recovery is asked too: its registration runs the election again).
- The election happens as soon as every replica of the partition has answered, or, once the
  timeout (`unclean_recovery_timeout_ms`, counted from the controller's first timer tick after
  the start) has passed, with the best answer so far; with no usable answer yet (none, or only
  offline logs) it waits for one. A replica with no log of the partition holds nothing: it is
  elected only when no other answered.
- An answer from a generation that is no longer live, or for a recovery that ended (a clean
  leader came back, the topic went), is dropped.
- Volatile: a new controller starts the recovery again from its own election.

Pure: no I/O, no clock (the caller passes now_ms).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from epochlog.protocol.apis.offset_for_leader_epoch import LOG_END_QUERY

__all__ = ["LOG_END_QUERY", "LogEnd", "Recoveries", "Recovery"]

# (last written leader epoch, log end offset); None: the replica's log is offline (no candidate).
# A replica without any log of the partition answers as holding nothing: (-1, 0).
LogEnd = tuple[int, int] | None


@dataclass
class Recovery:
    replicas: tuple[int, ...]
    asked: dict[int, int] = field(default_factory=dict)  # broker id -> generation asked
    answers: dict[int, LogEnd] = field(default_factory=dict)  # broker id -> its answer
    deadline_ms: int | None = None  # set at the first tick

    def complete(self) -> bool:
        """Every replica of the partition answered."""
        return all(r in self.answers for r in self.replicas)

    def due(self, now_ms: int) -> bool:
        return self.deadline_ms is not None and now_ms >= self.deadline_ms

    def best(self, eligible: set[int]) -> tuple[int, tuple[int, int]] | None:
        """(broker, its log end) of the eligible replica holding the most; ties go to the
        earlier replica in assignment order. None when no eligible replica answered with a log."""
        found: tuple[int, tuple[int, int]] | None = None
        for r in self.replicas:
            end = self.answers.get(r)
            if end is not None and r in eligible and (found is None or end > found[1]):
                found = (r, end)
        return found

    def describe(self) -> str:
        """The answers, for a log line: 'broker 2 (epoch 3, end 150), broker 3 (no log)'."""
        return ", ".join(
            f"broker {r} " + ("(no log)" if end is None else f"(epoch {end[0]}, end {end[1]})")
            for r, end in sorted(self.answers.items()))


class Recoveries:
    """The unclean recoveries in progress, by (topic, partition)."""

    def __init__(self, timeout_ms: int) -> None:
        self.timeout_ms = timeout_ms
        self.pending: dict[tuple[str, int], Recovery] = {}

    def start(self, key: tuple[str, int], replicas: tuple[int, ...]) -> Recovery:
        recovery = self.pending.get(key)
        if recovery is None or recovery.replicas != replicas:
            recovery = self.pending[key] = Recovery(replicas)
        return recovery

    def to_ask(self, key: tuple[str, int], live: dict[int, int]) -> list[int]:
        """The live replicas (broker id -> generation) not yet asked in their generation;
        marked as asked. An answer from an older generation of one of them is dropped."""
        recovery = self.pending[key]
        asking = [r for r in recovery.replicas if r in live and recovery.asked.get(r) != live[r]]
        for r in asking:
            recovery.asked[r] = live[r]
            recovery.answers.pop(r, None)
        return asking

    def answer(self, key: tuple[str, int], broker_id: int, broker_epoch: int,
               end: LogEnd) -> Recovery | None:
        """Record one replica's answer; the recovery, or None if the answer is dropped."""
        recovery = self.pending.get(key)
        if recovery is None or recovery.asked.get(broker_id) != broker_epoch:
            return None
        recovery.answers[broker_id] = end
        return recovery

    def tick(self, now_ms: int) -> list[tuple[str, int]]:
        """Start the clocks of new recoveries; the partitions whose recovery is due."""
        due = []
        for key, recovery in self.pending.items():
            if recovery.deadline_ms is None:
                recovery.deadline_ms = now_ms + self.timeout_ms
            if recovery.due(now_ms) and recovery.answers:
                due.append(key)
        return due

    def end(self, key: tuple[str, int]) -> None:
        self.pending.pop(key, None)
