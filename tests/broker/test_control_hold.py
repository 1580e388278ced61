"""The hold of control requests until our generation is confirmed (broker/control_hold.py),
event by event, with a number for the clock: judged at once while confirmed; held while not,
then judged in arrival order when a registration is answered; left unanswered after
hold_ms_max, each on its own bound; held again once the generation is declared over.
(test_generations.py runs the same rule through app.py on asyncio, and on real processes.)"""

from __future__ import annotations

import logging

import pytest

from epochlog.broker.control_hold import ControlHold, Judge, Unanswered
from epochlog.broker.fencing import ControlEpochs

HOLD_MS = 600


def hold() -> ControlHold[str]:
    return ControlHold(ControlEpochs(1), HOLD_MS)


def test_judged_at_once_while_our_generation_is_confirmed() -> None:
    machine = hold()
    machine.epochs.registration_answered(5)
    assert machine.arrived(0, "a", "LeaderAndIsr") == [Judge("a")]
    assert machine.next_deadline_ms() is None and machine.epochs.held_total == 0


def test_held_until_the_registration_answer_then_judged_in_arrival_order(
        caplog: pytest.LogCaptureFixture) -> None:
    machine = hold()
    with caplog.at_level(logging.INFO, "epochlog.broker"):
        assert machine.arrived(10, "a", "LeaderAndIsr") == []
        assert machine.arrived(20, "b", "UpdateMetadata") == []
        assert machine.next_deadline_ms() == 10 + HOLD_MS
        assert machine.tick(10 + HOLD_MS - 1) == []
        assert machine.confirmed(30) == [], "no answer yet: still held"
        machine.epochs.registration_answered(5)
        assert machine.confirmed(40) == [Judge("a"), Judge("b")]
    assert machine.next_deadline_ms() is None and len(machine) == 0
    assert machine.epochs.held_total == 2 and machine.epochs.unanswered_total == 0
    assert [r.getMessage() for r in caplog.records if "held" in r.getMessage()] == [
        "broker 1: LeaderAndIsr arrived before our registration answer: held (at most 600 ms)",
        "broker 1: UpdateMetadata arrived before our registration answer: held (at most 600 ms)",
        "broker 1: LeaderAndIsr held until our registration was answered, judged against "
        "generation 5",
        "broker 1: UpdateMetadata held until our registration was answered, judged against "
        "generation 5"]


def test_each_is_left_unanswered_after_its_own_bound(caplog: pytest.LogCaptureFixture) -> None:
    machine = hold()
    machine.arrived(0, "a", "LeaderAndIsr")
    machine.arrived(100, "b", "StopReplica")
    with caplog.at_level(logging.WARNING, "epochlog.broker"):
        assert machine.tick(HOLD_MS) == [Unanswered("a")]
    assert machine.next_deadline_ms() == 100 + HOLD_MS
    assert machine.tick(100 + HOLD_MS) == [Unanswered("b")]
    assert machine.next_deadline_ms() is None and machine.epochs.unanswered_total == 2
    assert caplog.records[0].getMessage() == (
        "broker 1: LeaderAndIsr held 600 ms and still no registration answer: left unanswered "
        "(the controller resends it)")


def test_a_generation_declared_over_holds_again() -> None:
    machine = hold()
    machine.epochs.registration_answered(5)
    machine.epochs.generation_over()  # a heartbeat answered STALE_BROKER_EPOCH
    assert machine.arrived(0, "late", "LeaderAndIsr") == []
    machine.epochs.registration_answered(8)
    assert machine.confirmed(5) == [Judge("late")]
    assert machine.arrived(6, "next", "LeaderAndIsr") == [Judge("next")]
