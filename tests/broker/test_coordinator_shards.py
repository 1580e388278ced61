"""The shard lifecycle both coordinators share (broker/coordinator_shards.py), as a table: each
row an event, the actions it must give, and then what a lookup answers and the lines logged. No
event loop, no broker: the machine is fed what a driver would feed it."""

from __future__ import annotations

import logging

import pytest

from epochlog.broker.coordinator_shards import Load, Shard, Shards, Unload
from epochlog.protocol.error_codes import ErrorCode as E

ACTIVE = "ACTIVE"


def shards() -> Shards[list[str]]:
    """Shards holding a list of names (what a coordinator's shard holds does not matter)."""
    return Shards("__things", "things", list, len)


def shown(actions: list[Load | Unload[list[str]]]) -> list[str]:
    return [f"load {a.index}@{a.leader_epoch}" if isinstance(a, Load)
            else f"unload {a.shard.index}@{a.shard.leader_epoch}: {a.why}" for a in actions]


def answer(s: Shards[list[str]], index: int) -> str | int:
    found = s.lookup(index)
    return found if isinstance(found, int) else ACTIVE


def load(s: Shards[list[str]], index: int, epoch: int) -> list[str]:
    shard = s.loading(index, epoch)
    if shard is None:
        return ["not wanted"]
    shard.held.append("x")
    shard.replayed += 3
    s.loaded(shard, 0, 3, 1)
    return []


# (event, arguments, the actions it gives, what a lookup of partition 0 then answers)
STEPS: list[tuple[str, tuple[int, ...], list[str], str | int]] = [
    ("lookup", (), [], E.NOT_COORDINATOR),
    ("applied", (0, 5), ["load 0@5"], E.COORDINATOR_LOAD_IN_PROGRESS),
    ("applied", (0, 5), [], E.COORDINATOR_LOAD_IN_PROGRESS),  # an ISR change
    ("loaded", (0, 5), [], ACTIVE),
    ("applied", (0, 5), [], ACTIVE),
    ("applied", (0, 6), ["unload 0@5: a new leader epoch", "load 0@6"],
     E.COORDINATOR_LOAD_IN_PROGRESS),
    ("loaded", (0, 5), ["not wanted"], E.COORDINATOR_LOAD_IN_PROGRESS),  # the old epoch's load
    ("loaded", (0, 6), [], ACTIVE),
    ("lost", (0,), ["unload 0@6: leadership lost"], E.NOT_COORDINATOR),
    ("lost", (0,), [], E.NOT_COORDINATOR),
    ("applied", (0, 7), ["load 0@7"], E.COORDINATOR_LOAD_IN_PROGRESS),
    ("not leader", (0,), ["unload 0@7: no longer the leader"], E.NOT_COORDINATOR),
    ("loaded", (0, 7), ["not wanted"], E.NOT_COORDINATOR),  # unloaded while it loaded
    ("not leader", (0,), [], E.NOT_COORDINATOR),
    ("applied", (1, 2), ["load 1@2"], E.NOT_COORDINATOR),  # another partition
    ("applied", (0, 8), ["load 0@8"], E.COORDINATOR_LOAD_IN_PROGRESS),
    ("stop", (), ["unload 1@2: broker stopping", "unload 0@8: broker stopping"],
     E.NOT_COORDINATOR),
]


def test_the_lifecycle_step_by_step() -> None:
    s = shards()
    for n, (event, args, actions, lookup) in enumerate(STEPS):
        if event == "applied":
            got = shown(s.partition_applied(*args))
        elif event == "not leader":
            got = shown(s.partition_applied(args[0], None))
        elif event == "lost":
            got = shown(s.leadership_lost(*args))
        elif event == "stop":
            got = shown(s.unload_all("broker stopping"))
        elif event == "loaded":
            got = load(s, *args)
        else:
            got = []
        assert (got, answer(s, 0)) == (actions, lookup), f"step {n}: {event}{args}"


def test_a_load_and_an_unload_log_one_line_each(caplog: pytest.LogCaptureFixture) -> None:
    s = shards()
    with caplog.at_level(logging.INFO, "epochlog.broker"):
        s.partition_applied(3, 9)
        load(s, 3, 9)
        s.leadership_lost(3)
    assert [r.getMessage() for r in caplog.records] == [
        "__things-3: loaded 1 things from 3 records (offsets 0-3) at leader epoch 9 in 1 ms",
        "__things-3: unloaded 1 things (leader epoch 9): leadership lost"]


def test_an_unloaded_shard_is_not_current_and_its_replacement_is() -> None:
    s = shards()
    s.partition_applied(0, 1)
    old = s.get(0)
    assert isinstance(old, Shard) and s.current(old) and s.led() == [(0, 1)]
    s.partition_applied(0, 2)
    new = s.get(0)
    assert new is not None and not s.current(old) and s.current(new)
    assert s.led() == [(0, 2)] and len(s) == 1 and list(s) == [new]
    with pytest.raises(AssertionError):
        s.loaded(old, 0, 0, 0)  # a driver must ask loading() first
