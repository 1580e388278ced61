"""When the ISR task runs (broker/isr_schedule.py), event by event with a number for the clock:
every tick (replica_lag_time_max_ms / 2, at least TICK_MS_MIN) from the end of the last run;
sooner when woken or when a retry of the manager's is due, runs starting at least WAKE_GAP_MS
apart; one AlterPartition in flight, a run's proposals split into requests of at most
PROPOSALS_PER_REQUEST_MAX. The manager (isr.IsrManager, tested in test_isr.py) is played by a
fake that hands out the proposals a test gives it."""

from __future__ import annotations

from typing import Any

from epochlog.broker.isr_schedule import (
    PROPOSALS_PER_REQUEST_MAX,
    TICK_MS_MIN,
    WAKE_GAP_MS,
    IsrSchedule,
    SendAlterPartition,
)

LAG_MS = 800
TICK_MS = LAG_MS // 2


class FakeManager:
    """What IsrSchedule uses of isr.IsrManager."""

    def __init__(self, lag_time_max_ms: int = LAG_MS) -> None:
        self.lag_time_max_ms = lag_time_max_ms
        self.proposals: list[Any] = []  # what the next due() hands out
        self.retry_ms: int | None = None
        self.runs: list[int] = []  # the time of each due()
        self.now = 0

    def due(self, partitions: Any) -> list[Any]:
        self.runs.append(self.now)
        out, self.proposals = self.proposals, []
        return out

    def next_retry_ms(self) -> int | None:
        return self.retry_ms


Step = tuple[int, str, list[Any], int | None]  # now, event, its actions, the next deadline


def play(schedule: IsrSchedule, manager: FakeManager, steps: list[Step]) -> None:
    for n, (now, event, actions, deadline) in enumerate(steps):
        manager.now = now
        if event == "tick":
            got = schedule.tick(now, [])
        else:
            got = getattr(schedule, event)(now)
        assert (got or []) == actions, f"step {n} ({now} ms, {event}): actions {got}"
        assert schedule.next_deadline_ms() == deadline, \
            f"step {n} ({now} ms, {event}): deadline {schedule.next_deadline_ms()}"


def started(manager: FakeManager, now: int = 0) -> IsrSchedule:
    schedule = IsrSchedule(manager)  # type: ignore[arg-type]
    schedule.start(now)
    return schedule


def test_the_tick_is_half_the_lag_time_and_at_least_its_minimum() -> None:
    assert IsrSchedule(FakeManager(800)).tick_ms == 400  # type: ignore[arg-type]
    assert IsrSchedule(FakeManager(150)).tick_ms == TICK_MS_MIN  # type: ignore[arg-type]


def test_runs_every_tick_from_the_end_of_the_last_run() -> None:
    manager = FakeManager()
    schedule = started(manager, now=10)
    one = SendAlterPartition(("p1",))
    first = 10 + TICK_MS
    second = first + WAKE_GAP_MS + TICK_MS  # a run that took no time still takes the gap
    play(schedule, manager, [
        (first - 1, "tick", [], first),  # too early: nothing
        (first, "tick", [], second),  # nothing due: the next tick
    ])
    manager.proposals = ["p1"]
    play(schedule, manager, [
        (second, "tick", [one], None),  # in flight: no deadline
        (second + 200, "answered", [], second + 200 + TICK_MS),  # from the run's end
    ])
    assert manager.runs == [first, second]


def test_a_wake_runs_at_once_but_runs_start_at_least_the_gap_apart() -> None:
    manager = FakeManager()
    schedule = started(manager)
    gap_over = 30 + WAKE_GAP_MS
    play(schedule, manager, [
        (30, "wake", [], 0),  # due at once (the wait began at 0)
        (30, "tick", [], gap_over + TICK_MS),  # ran; the next may not start before the gap ...
        (40, "wake", [], gap_over),  # ... however soon a wake comes
        (gap_over, "tick", [], gap_over + WAKE_GAP_MS + TICK_MS),
    ])
    assert manager.runs == [30, gap_over]


def test_a_due_retry_brings_the_run_forward() -> None:
    manager = FakeManager()
    schedule = started(manager)
    manager.retry_ms = 120
    assert schedule.next_deadline_ms() == 120
    manager.retry_ms = -5  # overdue: as soon as the wait began
    assert schedule.next_deadline_ms() == 0
    manager.retry_ms = 10 * TICK_MS  # later than the tick: the tick
    assert schedule.next_deadline_ms() == TICK_MS


def test_one_request_in_flight_and_a_run_split_into_bounded_requests() -> None:
    manager = FakeManager()
    schedule = started(manager)
    count = 2 * PROPOSALS_PER_REQUEST_MAX + 5
    manager.proposals = list(range(count))
    first, second, third = (tuple(range(count)[i:i + PROPOSALS_PER_REQUEST_MAX])
                            for i in range(0, count, PROPOSALS_PER_REQUEST_MAX))
    play(schedule, manager, [
        (TICK_MS, "tick", [SendAlterPartition(first)], None),
        (TICK_MS + 1, "wake", [], None),  # waits for the run's end
        (TICK_MS + 2, "tick", [], None),  # nothing while one is in flight
        (TICK_MS + 3, "answered", [SendAlterPartition(second)], None),
        (TICK_MS + 4, "answered", [SendAlterPartition(third)], None),
        (TICK_MS + 9, "answered", [], TICK_MS + WAKE_GAP_MS),  # woken meanwhile: after the gap
        (TICK_MS + WAKE_GAP_MS, "tick", [], TICK_MS + 2 * WAKE_GAP_MS + TICK_MS),
    ])
    assert manager.runs == [TICK_MS, TICK_MS + WAKE_GAP_MS]
