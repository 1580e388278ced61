"""kafka-python (3.0.12) and its lost join, for the tests that run its group consumer.

The race, kafka-python's and not the broker's: a group leader whose metadata changes after it
joined (or whose first JoinGroup beat its topic metadata) rejoins; if poll()'s timer runs out
with that JoinGroup in flight, the join task is kept (coordinator/base.py join_group_async) and
goes on to _perform_assignment, which sets _assignment_snapshot = _metadata_snapshot
(coordinator/consumer.py). need_rejoin() then turns False although the task's result was never
taken, so ConsumerCoordinator.poll never awaits it again: the new assignment is not installed,
heartbeats stay disabled, the session expires, and commits are refused with
RebalanceInProgressError for good. (Java's poll checks rejoinNeededOrPending(): a join in flight
counts.) Reproduced at will here by changing a joined leader's assignment snapshot and polling
with a 1 ms timer.

`rejoin_if_lost(consumer)` before each poll() gets such a consumer out of it: in exactly that
state (a join task done whose result no poll will take) it asks for a new join, which then
completes as any other.

A second race, the other way round: kafka-python runs its network on a thread of its own, and a
join round that completes there while need_rejoin() is still True (the flag is cleared only when
poll() takes the result) is thrown away by the next poll(), which finds the task done and sends a
new JoinGroup. An application that spends most of its time outside poll() while a round is in
flight (two clients polled in turn on one thread) can make the group rebalance for ever; a
consumer polled on its own thread, as applications run, does not (tests/interop/
test_groups_interop.py's both_polled, tests/interop/test_mixed_groups.py's threads).
"""

from __future__ import annotations

from typing import Any


def lost_join(consumer: Any) -> bool:
    """A join finished whose result no poll will take."""
    coordinator = consumer._coordinator
    task = coordinator._join_task
    return bool(task is not None and task.is_done and not coordinator.need_rejoin())


def rejoin_if_lost(consumer: Any) -> bool:
    """Ask for a new join if the last one was lost; whether it was."""
    if not lost_join(consumer):
        return False
    print("kafka-python lost a finished join; asking it to rejoin")
    consumer._coordinator.request_rejoin()
    return True
