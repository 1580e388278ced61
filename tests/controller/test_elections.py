"""Elections in the controller's pure state machine (issue 5 "Elections"): clean from the ISR,
unclean only where the topic allows it (logged loudly), ElectLeaders preferred and unclean, and
the automatic preferred-leader rebalance (controller/rebalance.py) on an injected clock."""

from __future__ import annotations

import logging
import uuid

import pytest

from epochlog.controller.elections import ELECTION_PREFERRED, ELECTION_UNCLEAN
from epochlog.controller.model import NO_LEADER
from epochlog.controller.records import Listener
from epochlog.controller.state import ControllerState
from epochlog.protocol.error_codes import ErrorCode as E
from tests.controller.test_state import (
    SESSION_MS,
    cluster,
    config,
    create,
    part,
    recover,
    register,
)

INTERVAL_MS = 1000


def shrink(s: ControllerState, isr: list[int], topic: str = "t", index: int = 0) -> None:
    p = part(s, topic, index)
    assert s.alter_partition(p.leader, topic, index, p.leader_epoch, p.partition_epoch,
                             isr)[0] == 0


def kill(s: ControllerState, epochs: dict[int, int], *dead: int, now_ms: int = SESSION_MS
         ) -> None:
    """Every broker not in `dead` heartbeats; then the sessions of `dead` expire."""
    for b, e in epochs.items():
        if b not in dead and s.brokers[b].live:
            assert s.heartbeat(b, e, now_ms=now_ms - 1).error == 0
    s.expire_sessions(now_ms=now_ms)


# ------------------------------------------------------------------------------ clean
def test_a_clean_election_takes_the_first_live_isr_member_not_the_first_replica() -> None:
    s, epochs = cluster(3)
    create(s, "t", [[1, 2, 3]])
    shrink(s, [1, 3])  # 2 fell behind
    before = part(s).leader_epoch
    kill(s, epochs, 1)
    p = part(s)
    assert (p.leader, p.isr) == (3, (3,)), "2 is earlier in the assignment but not in the ISR"
    assert p.leader_epoch == before + 1
    assert s.counters["elections_clean"] == 1 and s.counters["elections_unclean"] == 0


def test_without_a_live_isr_member_the_partition_waits_offline_for_it() -> None:
    s, epochs = cluster(2)
    create(s, "t", [[1, 2]])
    shrink(s, [1])
    kill(s, epochs, 1)
    assert (part(s).leader, part(s).isr) == (NO_LEADER, (1,))
    # 2 is alive all along and is never made leader: it may lack acknowledged records.
    s.heartbeat(2, epochs[2], now_ms=SESSION_MS + 1)
    assert part(s).leader == NO_LEADER
    register(s, 1, "a", now_ms=SESSION_MS + 2)  # the last ISR member returns: nothing lost
    assert part(s).leader == 1


# ----------------------------------------------------------------------------- unclean
def test_unclean_election_from_the_topic_setting_is_logged_loudly(caplog) -> None:
    s, epochs = cluster(2)
    create(s, "t", [[1, 2]], unclean_leader_election_enable="true")
    shrink(s, [1])
    with caplog.at_level(logging.WARNING, logger="epochlog.controller"):
        kill(s, epochs, 1)
        recover(s)
    assert (part(s).leader, part(s).isr) == (2, (2,))
    assert any("UNCLEAN" in r.message and r.levelno == logging.WARNING for r in caplog.records)
    assert s.counters["elections_unclean"] == 1


def test_an_offline_partition_of_an_unclean_topic_takes_a_returning_non_isr_replica() -> None:
    s, epochs = cluster(2)
    create(s, "t", [[1, 2]], unclean_leader_election_enable="true")
    shrink(s, [1])
    kill(s, epochs, 1, 2)  # both die; 1 was the ISR
    assert part(s).leader == NO_LEADER
    register(s, 2, "b", now_ms=SESSION_MS + 1)
    recover(s)
    assert (part(s).leader, part(s).isr) == (2, (2,))


# ------------------------------------------------------------------------- ElectLeaders
def test_elect_leaders_preferred_needs_the_preferred_replica_alive_and_in_the_isr() -> None:
    s, epochs = cluster(3)
    create(s, "t", [[1, 2, 3]])
    assert s.elect_leader("t", 0, ELECTION_PREFERRED)[0] == E.ELECTION_NOT_NEEDED
    kill(s, epochs, 1)
    assert part(s).leader == 2
    assert s.elect_leader("t", 0, ELECTION_PREFERRED)[0] == E.PREFERRED_LEADER_NOT_AVAILABLE
    register(s, 1, "a", now_ms=SESSION_MS + 1)
    assert s.elect_leader("t", 0, ELECTION_PREFERRED)[0] == E.PREFERRED_LEADER_NOT_AVAILABLE, \
        "alive but not in the ISR yet"
    shrink(s, [2, 3, 1])  # the leader adds it back
    epoch, isr = part(s).leader_epoch, part(s).isr
    assert s.elect_leader("t", 0, ELECTION_PREFERRED) == (0, None)
    assert (part(s).leader, part(s).isr, part(s).leader_epoch) == (1, isr, epoch + 1)


def test_elect_leaders_unclean(caplog) -> None:
    s, epochs = cluster(3)
    create(s, "t", [[1, 2, 3]])  # unclean.leader.election.enable false
    assert s.elect_leader("t", 0, ELECTION_UNCLEAN)[0] == E.ELECTION_NOT_NEEDED
    shrink(s, [1])
    kill(s, epochs, 1)
    assert part(s).leader == NO_LEADER
    with caplog.at_level(logging.WARNING, logger="epochlog.controller"):
        assert s.elect_leader("t", 0, ELECTION_UNCLEAN) == (0, None)
    assert (part(s).leader, part(s).isr) == (2, (2,)), "an admin may ask for it"
    assert any("UNCLEAN" in r.message for r in caplog.records)


def test_elect_leaders_unclean_with_no_replica_alive() -> None:
    s, epochs = cluster(2)
    create(s, "t", [[1, 2]])
    kill(s, epochs, 1, 2)
    assert s.elect_leader("t", 0, ELECTION_UNCLEAN)[0] == E.ELIGIBLE_LEADERS_NOT_AVAILABLE


# -------------------------------------------------------------------- automatic rebalance
def rebalancing(n: int = 3, percentage: int = 10, enabled: bool = True):
    s = ControllerState(config(auto_leader_rebalance_enable=enabled,
                               leader_imbalance_per_broker_percentage=percentage,
                               leader_imbalance_check_interval_seconds=INTERVAL_MS // 1000))
    s.start(now_ms=0)
    epochs = {i: s.register_broker(i, uuid.uuid4(), None, [Listener("P", "h", i)], 0)[1]
              for i in range(1, n + 1)}
    return s, epochs


def test_rebalance_hands_leadership_back_once_the_preferred_replica_is_in_the_isr() -> None:
    s, epochs = rebalancing()
    create(s, "t", [[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    assert s.rebalance_leaders(now_ms=0) == []  # the first call only starts the clock
    kill(s, epochs, 1)
    assert part(s, "t", 0).leader == 2
    register(s, 1, "a", now_ms=SESSION_MS + 1)
    assert s.rebalance_leaders(now_ms=SESSION_MS + 2) == [], "1 is not in the ISR yet"
    shrink(s, [2, 3, 1], "t", 0)
    assert s.rebalance_leaders(now_ms=SESSION_MS + 3) == [], "not before the interval"
    assert s.rebalance_leaders(now_ms=SESSION_MS + 2 + INTERVAL_MS) == [("t", 0)]
    assert part(s, "t", 0).leader == 1 and s.counters["rebalance_elections"] == 1
    assert s.rebalance_leaders(now_ms=SESSION_MS + 2 + 3 * INTERVAL_MS) == []


def test_rebalance_waits_for_a_live_preferred_replica() -> None:
    s, epochs = rebalancing()
    create(s, "t", [[1, 2, 3]])
    s.rebalance_leaders(now_ms=0)
    kill(s, epochs, 1)
    assert s.rebalance_leaders(now_ms=SESSION_MS + INTERVAL_MS) == []
    assert part(s).leader == 2


@pytest.mark.parametrize("not_led, moved", [(1, 0), (2, 0), (3, 3)])
def test_rebalance_only_above_the_imbalance_percentage(not_led: int, moved: int) -> None:
    """Broker 1 is preferred for 20 partitions: 2 of them led elsewhere is 10%, not above."""
    s, epochs = rebalancing(percentage=10)
    create(s, "t", [[1, 2]] * 20)
    s.rebalance_leaders(now_ms=0)
    for index in range(not_led):
        p = part(s, "t", index)
        s._change(s.topics["t"], index, 2, p.isr, "test: moved away")  # as an election would
    assert len(s.rebalance_leaders(now_ms=INTERVAL_MS)) == moved


def test_rebalance_can_be_turned_off() -> None:
    s, epochs = rebalancing(enabled=False)
    create(s, "t", [[1, 2]])
    s._change(s.topics["t"], 0, 2, part(s).isr, "test: moved away")
    assert s.rebalance_leaders(now_ms=0) == [] == s.rebalance_leaders(now_ms=10 * INTERVAL_MS)
    assert part(s).leader == 2
