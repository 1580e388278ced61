"""KIP-966 unclean recovery in the controller's state machine: an unclean election asks the live
replicas for their log ends and elects the one holding the most (controller/unclean_recovery.py).

Each test: replicas 1, 2, 3 of t-0 with unclean elections allowed; the ISR shrinks to 1, which
then dies, so only an unclean election can bring the partition back.
"""

from __future__ import annotations

import logging

import pytest

from epochlog.controller.model import NO_LEADER
from epochlog.controller.state import ControllerState
from epochlog.controller.unclean_recovery import Recovery
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.offset_for_leader_epoch import (
    EpochEndOffset,
    OffsetForLeaderTopicResult,
)
from epochlog.protocol.error_codes import ErrorCode as E

from .test_elections import kill, shrink
from .test_state import SESSION_MS, cluster, config, create, part, recover, register


def lose_the_isr() -> tuple[ControllerState, dict[int, int]]:
    s, epochs = cluster(3)
    create(s, "t", [[1, 2, 3]], unclean_leader_election_enable="true")
    shrink(s, [1])
    for b in (2, 3):  # they keep heartbeating while 1's session runs out
        s.heartbeat(b, epochs[b], now_ms=SESSION_MS - 1)
    kill(s, epochs, 1)
    return s, epochs


def asked(s: ControllerState) -> dict[int, list[tuple[str, int, int]]]:
    """The log-end queries the last decisions send, by broker: (topic, partition, epoch)."""
    return {send.broker_id: [(t.topic, p.partition, p.leader_epoch) for t in send.message.topics
                             for p in t.partitions]
            for send in s.take_ready().sends if send.api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH}


def test_the_partition_waits_offline_while_the_live_replicas_are_asked() -> None:
    s, _ = lose_the_isr()
    assert part(s).leader == NO_LEADER
    assert asked(s) == {2: [("t", 0, 1)], 3: [("t", 0, 1)]}


@pytest.mark.parametrize("ends, leader", [
    ({2: (0, 100), 3: (0, 200)}, 3),  # same last epoch: the longer log
    ({2: (1, 50), 3: (0, 200)}, 2),  # a later leader epoch wins over a longer log
    ({2: (0, 200), 3: (0, 200)}, 2),  # a tie: assignment order
])
def test_the_replica_holding_the_most_is_elected(ends: dict[int, tuple[int, int]],
                                                  leader: int, caplog) -> None:
    s, _ = lose_the_isr()
    with caplog.at_level(logging.WARNING, logger="epochlog.controller"):
        recover(s, ends)
    p = part(s)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (leader, (leader,), (), ())
    assert s.counters["unclean_recoveries"] == s.counters["elections_unclean"] == 1
    said = [r.message for r in caplog.records if "answered unclean recovery" in r.message]
    assert len(said) == 1 and f"broker {leader} holds the most" in said[0], said


def test_the_timeout_is_waited_for_while_a_replica_has_not_answered() -> None:
    s, _ = lose_the_isr()
    recover(s, {2: (0, 100), 3: (0, 200)}, timeout=False)
    s.recovery_tick(SESSION_MS)  # the clock starts
    s.recovery_tick(SESSION_MS + s.recoveries.timeout_ms - 1)
    assert part(s).leader == NO_LEADER, "1 may still come back"
    s.recovery_tick(SESSION_MS + s.recoveries.timeout_ms)
    assert part(s).leader == 3


def test_a_returning_in_sync_replica_ends_the_recovery_cleanly() -> None:
    s, _ = lose_the_isr()
    recover(s, {2: (0, 100)}, timeout=False)
    register(s, 1, "a", now_ms=SESSION_MS + 1)  # the last ISR member is back: a clean election
    assert (part(s).leader, s.counters["elections_unclean"]) == (1, 0)
    assert not s.recoveries.pending
    s.recovery_tick(SESSION_MS + 10 * s.recoveries.timeout_ms)
    assert part(s).leader == 1


def test_a_replica_that_registers_meanwhile_is_asked_and_an_old_generation_is_not_heard() -> None:
    s, epochs = lose_the_isr()
    queries = s.take_ready()  # asked: 2 and 3 in their first generations
    assert sum(send.api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH for send in queries.sends) == 2
    kill(s, epochs, 3, now_ms=2 * SESSION_MS)
    s.heartbeat(2, epochs[2], now_ms=2 * SESSION_MS - 1)
    new_3 = register(s, 3, "c", now_ms=2 * SESSION_MS + 1)
    assert asked(s) == {3: [("t", 0, 1)]}
    # the dead generation's answer, arriving late, says it held the most: not heard
    recovery = s.recoveries.answer(("t", 0), 3, epochs[3], (0, 999))
    assert recovery is None
    s.recoveries.answer(("t", 0), 2, epochs[2], (0, 100))
    s.recoveries.answer(("t", 0), 3, new_3, (0, 10))
    s.recovery_tick(3 * SESSION_MS)
    s.recovery_tick(3 * SESSION_MS + s.recoveries.timeout_ms)
    assert part(s).leader == 2


def answer_errors(s: ControllerState, errors: dict[int, int]) -> None:
    """The brokers answer the log-end queries: an error where given, else (0, 10)."""
    for send in s.take_ready().sends:
        if send.api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            error = errors.get(send.broker_id, 0)
            s.log_ends_answered(send.broker_id, send.broker_epoch, [OffsetForLeaderTopicResult(
                topic="t", partitions=[EpochEndOffset(
                    error_code=error, partition=0, leader_epoch=-1 if error else 0,
                    end_offset=-1 if error else 10)])])
    s.recovery_tick(SESSION_MS)
    s.recovery_tick(SESSION_MS + s.recoveries.timeout_ms)


def test_an_offline_log_is_no_candidate_and_no_log_holds_nothing() -> None:
    s, _ = lose_the_isr()
    answer_errors(s, {2: E.KAFKA_STORAGE_ERROR, 3: E.UNKNOWN_TOPIC_OR_PARTITION})
    assert part(s).leader == 3  # no log at all: nothing to lose by electing it, and 2 cannot
    s, _ = lose_the_isr()
    answer_errors(s, {2: E.UNKNOWN_TOPIC_OR_PARTITION})
    assert part(s).leader == 3  # the one holding records
    s, _ = lose_the_isr()
    answer_errors(s, {2: E.KAFKA_STORAGE_ERROR, 3: E.KAFKA_STORAGE_ERROR})
    assert part(s).leader == NO_LEADER  # nobody can offer a log: the partition waits


def test_every_replica_answering_elects_at_once() -> None:
    recovery = Recovery((1, 2))
    recovery.answers = {1: (3, 10)}
    assert not recovery.complete()
    recovery.answers[2] = (2, 90)
    assert recovery.complete() and recovery.best({1, 2}) == (1, (3, 10))
    assert recovery.best({2}) == (2, (2, 90))


def test_turned_off_the_first_live_replica_is_elected_at_once() -> None:
    s = ControllerState(config(unclean_recovery_timeout_ms=-1,
                               default_unclean_leader_election_enable=True))
    s.start(now_ms=0)
    epochs = {i: register(s, i, "abc"[i - 1]) for i in (1, 2, 3)}
    create(s, "t", [[1, 2, 3]])
    shrink(s, [1])
    for b in (2, 3):
        s.heartbeat(b, epochs[b], now_ms=SESSION_MS - 1)
    kill(s, epochs, 1)
    assert part(s).leader == 2 and s.recoveries is None


def test_a_topic_no_longer_allowing_unclean_elections_ends_its_recovery() -> None:
    s, _ = lose_the_isr()
    s.alter_topic_configs("t", {"unclean.leader.election.enable": "false"})
    recover(s, {2: (0, 100), 3: (0, 200)})
    assert part(s).leader == NO_LEADER and not s.recoveries.pending
