"""controller/elections.py on its own: partition states in, choices out, as tables.

Each row is a partition (replicas in assignment order, ISR, ELR, last known ELR), which replicas
may lead (`eligible`) and which brokers are live, and the choice expected: leader, source, ISR.
The state machine's tests (test_elections.py, test_eligible_replicas.py, test_unclean_recovery.py)
check how a choice is carried out; these check the choice itself, every rule and its order.
"""

from __future__ import annotations

import pytest

from epochlog.controller import elections
from epochlog.controller.elections import (
    FROM_ELR,
    FROM_ISR,
    FROM_LAST_KNOWN,
    NOWHERE,
    UNCLEAN,
    Choice,
)
from epochlog.controller.model import NO_LEADER, Partition
from epochlog.protocol.error_codes import ErrorCode as E


def partition(replicas: str, isr: str, elr: str = "", last_known: str = "", leader: int = -1
              ) -> Partition:
    """'123' -> (1, 2, 3): one digit per broker."""
    def ids(text: str) -> tuple[int, ...]:
        return tuple(int(c) for c in text)
    return Partition(ids(replicas), leader, 5, ids(isr), 9, ids(elr), ids(last_known))


def only(brokers: str):  # noqa: ANN201 (a predicate)
    return lambda r: str(r) in brokers


@pytest.mark.parametrize("p, eligible, exclude, unclean, elr, expected", [
    # the ISR, in assignment order (not the ISR's order)
    (partition("123", "32"), "123", None, False, True, (2, FROM_ISR)),
    (partition("123", "32"), "13", None, False, True, (3, FROM_ISR)),
    (partition("123", "32"), "123", 2, False, True, (3, FROM_ISR)),
    # then the ELR, which is as clean
    (partition("123", "1", elr="32"), "23", None, False, True, (2, FROM_ELR)),
    (partition("123", "1", elr="32"), "23", None, False, False, (NO_LEADER, NOWHERE)),
    # the last known ELR only when ISR and ELR are both empty, in its own order
    (partition("123", "", last_known="31"), "123", None, False, True, (3, FROM_LAST_KNOWN)),
    (partition("123", "1", last_known="3"), "23", None, False, True, (NO_LEADER, NOWHERE)),
    (partition("123", "", last_known="31"), "123", None, False, False, (NO_LEADER, NOWHERE)),
    # unclean only where allowed, any eligible replica
    (partition("123", "1"), "23", None, True, True, (2, UNCLEAN)),
    (partition("123", "1"), "23", 2, True, True, (3, UNCLEAN)),
    (partition("123", "1"), "", None, True, True, (NO_LEADER, NOWHERE)),
])
def test_pick_leader_takes_the_cleanest_eligible_replica(
        p: Partition, eligible: str, exclude: int | None, unclean: bool, elr: bool,
        expected: tuple[int, str]) -> None:
    assert elections.pick_leader(p, only(eligible), exclude=exclude, unclean=unclean,
                                 elr=elr) == expected


def test_the_isr_keeps_its_live_members_and_the_leader() -> None:
    p = partition("1234", "4321")
    assert elections.isr_with_leader(p, 2, 1, only("1234")) == (4, 3, 2)
    assert elections.isr_with_leader(p, 2, None, only("2")) == (2,)


@pytest.mark.parametrize("p, eligible, unclean, expected", [
    (partition("123", "123", leader=1), "23", False, Choice(2, FROM_ISR, (2, 3))),
    (partition("123", "1", elr="2", leader=1), "23", False, Choice(2, FROM_ELR, (2,))),
    (partition("123", "", last_known="3"), "3", False, Choice(3, FROM_LAST_KNOWN, (3,))),
    (partition("123", "1", leader=1), "23", True, Choice(2, UNCLEAN, (2,))),
    (partition("123", "1", leader=1), "23", False, Choice(NO_LEADER, NOWHERE, (1,))),
    # an offline partition whose last ISR member is back leads again with nothing lost
    (partition("123", "1"), "123", False, Choice(1, FROM_ISR, (1,))),
])
def test_after_a_leader_loss(p: Partition, eligible: str, unclean: bool,
                             expected: Choice) -> None:
    assert elections.after_leader_loss(p, only(eligible), only(eligible),
                                       unclean=unclean) == expected


def test_a_controlled_shutdown_hands_over_to_the_isr_only() -> None:
    p = partition("123", "12", elr="3", leader=1)
    assert elections.at_shutdown(p, only("123"), only("123"), 1) == Choice(2, FROM_ISR, (2,))
    alone = partition("123", "1", elr="3", leader=1)
    assert elections.at_shutdown(alone, only("123"), only("123"), 1) == \
        Choice(NO_LEADER, NOWHERE, (1,))


@pytest.mark.parametrize("p, eligible, expected", [
    (partition("123", "1", elr="2"), "23", Choice(2, FROM_ELR, (2,))),
    (partition("123", "12"), "2", Choice(2, FROM_ISR, (2,))),
    (partition("123", "1"), "3", Choice(3, UNCLEAN, (3,))),
    (partition("123", "1"), "", Choice(NO_LEADER, NOWHERE, (1,))),
    # from the last known ELR the ISR is empty: the leader leads alone, as after a leader loss
    # (it was given the empty ISR, so a leader outside its own ISR)
    (partition("123", "", last_known="2"), "2", Choice(2, FROM_LAST_KNOWN, (2,))),
])
def test_an_admins_unclean_election(p: Partition, eligible: str, expected: Choice) -> None:
    assert elections.unclean_by_admin(p, only(eligible), only(eligible)) == expected


@pytest.mark.parametrize("p, eligible, expected", [
    (partition("123", "123", leader=2), "123", (0, None)),
    (partition("123", "123", leader=1), "123", (E.ELECTION_NOT_NEEDED,
                                                "the preferred replica already leads")),
    (partition("123", "23", leader=2), "123", (E.PREFERRED_LEADER_NOT_AVAILABLE,
                                               "preferred replica 1 is not alive and in the ISR")),
    (partition("123", "123", leader=2), "23", (E.PREFERRED_LEADER_NOT_AVAILABLE,
                                               "preferred replica 1 is not alive and in the ISR")),
])
def test_a_preferred_election_needs_the_first_replica_eligible_and_in_sync(
        p: Partition, eligible: str, expected: tuple[int, str | None]) -> None:
    assert elections.preferred_refusal(p, only(eligible)) == expected
