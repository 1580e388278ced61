"""The controller link's decisions (broker/controller_session.py), event by event: each step is
(now, event, its arguments, the actions it must return, the next deadline it must leave). No
event loop, no socket: the machine is given the time.

What is checked: registration retries back off from BACKOFF_MS_MIN doubling to BACKOFF_MS_MAX
and log on the first try and every REGISTRATION_LOG_EVERY; heartbeats every interval; a failed
heartbeat backs off, never beyond the interval, without watching the connection; a closed
connection found while heartbeats succeed makes the heartbeat due at once (also when found
during a heartbeat in flight), not while they fail; heartbeat_soon; STALE_BROKER_EPOCH ends the
generation and registers again with a fresh backoff; a refused registration stops everything.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from epochlog.broker.controller_session import (
    BACKOFF_MS_MAX,
    BACKOFF_MS_MIN,
    REGISTRATION_LOG_EVERY,
    ControllerSession,
    GenerationOver,
    Heartbeat,
    Refused,
    Register,
    Registered,
)
from epochlog.broker.fencing import ControlEpochs
from epochlog.protocol.error_codes import ErrorCode as E

INTERVAL_MS = 300
Step = tuple[int, str, tuple[Any, ...], list[Any], int | None]


def session() -> ControllerSession:
    return ControllerSession(1, ControlEpochs(1), INTERVAL_MS)


def play(machine: ControllerSession, steps: list[Step]) -> None:
    for n, (now, event, args, actions, deadline) in enumerate(steps):
        got = getattr(machine, event)(now, *args)
        assert got == actions, f"step {n} ({now} ms, {event}{args}): actions {got}"
        assert machine.next_deadline_ms() == deadline, \
            f"step {n} ({now} ms, {event}{args}): deadline {machine.next_deadline_ms()}"


def registered(machine: ControllerSession, generation: int = 7, now: int = 0) -> None:
    play(machine, [(now, "start", (), [Register()], None),
                   (now, "registration_answered", (0, generation), [Registered(generation)],
                    now + INTERVAL_MS)])


def test_registration_backs_off_doubling_to_its_maximum_and_logs_every_so_many_tries(
        caplog: pytest.LogCaptureFixture) -> None:
    machine = session()
    steps: list[Step] = [(0, "start", (), [Register()], None)]
    now, waits = 0, []
    for _ in range(2 * REGISTRATION_LOG_EVERY + 1):
        wait = min(BACKOFF_MS_MIN << len(waits), BACKOFF_MS_MAX)
        waits.append(wait)
        steps += [(now, "registration_failed", ("refused",), [], now + wait),
                  (now + wait - 1, "tick", (), [], now + wait),
                  (now + wait, "tick", (), [Register()], None)]
        now += wait
    with caplog.at_level(logging.INFO, "epochlog.broker"):
        play(machine, steps)
    assert waits[:7] == [50, 100, 200, 400, 800, 1000, 1000]
    tries = [r.getMessage() for r in caplog.records if "registration failed" in r.getMessage()]
    assert tries == [f"broker 1: registration failed (try {n}), retrying: refused"
                     for n in (1, 1 + REGISTRATION_LOG_EVERY, 1 + 2 * REGISTRATION_LOG_EVERY)]
    play(machine, [(now, "registration_answered", (0, 4), [Registered(4)], now + INTERVAL_MS)])
    assert machine.epochs.generation == 4 and not machine.epochs.must_wait()
    assert machine.registrations_total == 1


def test_heartbeats_every_interval_naming_the_generation() -> None:
    machine = session()
    registered(machine, generation=7, now=10)
    play(machine, [
        (309, "tick", (), [], 310),
        (310, "tick", (), [Heartbeat(7)], None),
        (313, "heartbeat_answered", (0,), [], 613),
        (613, "tick", (), [Heartbeat(7)], None),
        (620, "heartbeat_answered", (E.UNKNOWN_SERVER_ERROR,), [], 920),  # logged, no change
    ])
    assert machine.heartbeats_total == 2 and machine.watching


def test_failed_heartbeats_back_off_never_beyond_the_interval_then_recover(
        caplog: pytest.LogCaptureFixture) -> None:
    machine = session()
    registered(machine)
    with caplog.at_level(logging.INFO, "epochlog.broker"):
        play(machine, [
            (300, "tick", (), [Heartbeat(7)], None),
            (310, "heartbeat_failed", ("timed out",), [], 360),  # 50
            (360, "tick", (), [Heartbeat(7)], None),
            (361, "heartbeat_failed", ("refused",), [], 461),  # 100
            (461, "tick", (), [Heartbeat(7)], None),
            (461, "heartbeat_failed", ("refused",), [], 661),  # 200
            (661, "tick", (), [Heartbeat(7)], None),
            (661, "heartbeat_failed", ("refused",), [], 961),  # 400, capped at the interval
            (961, "tick", (), [Heartbeat(7)], None),
            (961, "heartbeat_failed", ("refused",), [], 1261),
        ])
        assert not machine.watching, "no watching while heartbeats fail"
        assert machine.connection_closed(1000) == []
        play(machine, [(1261, "tick", (), [Heartbeat(7)], None),
                       (1262, "heartbeat_answered", (0,), [], 1562)])  # the backoff is reset
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["broker 1: heartbeat failed, retrying with backoff: timed out",
                     "broker 1: heartbeating again after 5 failed tries"]


def test_a_closed_connection_found_while_heartbeats_succeed_heartbeats_at_once() -> None:
    machine = session()
    registered(machine)
    play(machine, [
        (120, "connection_closed", (), [Heartbeat(7)], None),
        (125, "heartbeat_answered", (0,), [], 425),
        (425, "tick", (), [Heartbeat(7)], None),
        (426, "connection_closed", (), [], None),  # found during the heartbeat in flight ...
        (430, "heartbeat_answered", (0,), [Heartbeat(7)], None),  # ... heartbeat again at once
        (431, "heartbeat_answered", (0,), [], 731),
    ])
    assert machine.reconnects_total == 2


def test_heartbeat_soon_at_once_or_right_after_the_request_in_flight() -> None:
    machine = session()
    play(machine, [(0, "start", (), [Register()], None),
                   (1, "heartbeat_soon", (), [], None),  # registering: after it
                   (2, "registration_answered", (0, 3), [Registered(3), Heartbeat(3)], None),
                   (3, "heartbeat_answered", (0,), [], 303),
                   (100, "heartbeat_soon", (), [Heartbeat(3)], None),
                   (101, "heartbeat_soon", (), [], None),  # in flight: after it
                   (102, "heartbeat_answered", (0,), [Heartbeat(3)], None),
                   (103, "heartbeat_failed", ("reset",), [], 153),
                   (110, "heartbeat_soon", (), [Heartbeat(3)], None)])  # cuts a backoff short


def test_stale_broker_epoch_ends_the_generation_and_registers_again_with_a_fresh_backoff() -> None:
    machine = session()
    play(machine, [(0, "start", (), [Register()], None),
                   (0, "registration_failed", ("refused",), [], 50),
                   (50, "tick", (), [Register()], None),
                   (50, "registration_failed", ("refused",), [], 150),
                   (150, "tick", (), [Register()], None),
                   (150, "registration_answered", (0, 7), [Registered(7)], 450),
                   (450, "tick", (), [Heartbeat(7)], None)])
    why = "the controller says generation 7 is over"
    play(machine, [(452, "heartbeat_answered", (E.STALE_BROKER_EPOCH,),
                    [GenerationOver(why), Register()], None)])
    assert machine.epochs.must_wait(), "control requests wait for the next registration"
    play(machine, [(455, "registration_failed", ("refused",), [], 505),  # fresh: 50 ms
                   (505, "tick", (), [Register()], None),
                   (506, "registration_answered", (0, 9), [Registered(9)], 806)])
    assert machine.epochs.generation == 9 and not machine.epochs.must_wait()


def test_a_refused_registration_stops_the_session() -> None:
    machine = session()
    play(machine, [(0, "start", (), [Register()], None),
                   (3, "registration_answered", (E.INCONSISTENT_CLUSTER_ID, -1),
                    [Refused(E.INCONSISTENT_CLUSTER_ID)], None),
                   (10, "heartbeat_soon", (), [], None),
                   (99, "tick", (), [], None)])
    assert machine.epochs.must_wait()


def test_an_answer_without_a_request_in_flight_is_a_broken_driver() -> None:
    machine = session()
    registered(machine)
    with pytest.raises(AssertionError):
        machine.heartbeat_answered(5, 0)
    with pytest.raises(AssertionError):
        machine.registration_answered(5, 0, 8)
