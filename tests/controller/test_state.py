"""The controller's state machine on an injected clock: KIP-380 generations, elections, KIP-101
returning leaders, AlterPartition checks, controlled shutdown, rack-aware assignment, replay."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest

from epochlog.controller import assignment
from epochlog.controller.config import ControllerConfig
from epochlog.controller.model import DEAD, NO_LEADER, SHUTTING_DOWN
from epochlog.controller.records import Listener
from epochlog.controller.state import ControllerState
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.offset_for_leader_epoch import (
    EpochEndOffset,
    OffsetForLeaderTopicResult,
)
from epochlog.protocol.error_codes import ErrorCode as E

SESSION_MS = 9000


def config(**settings: Any) -> ControllerConfig:
    """The controller's settings for a state machine under test: sessions of SESSION_MS."""
    return ControllerConfig(data_dir="unused", broker_session_timeout_ms=SESSION_MS, **settings)


def make_state(unclean: bool = False) -> ControllerState:
    s = ControllerState(config(default_unclean_leader_election_enable=unclean), random.Random(7))
    s.start(now_ms=0)
    return s


def register(s: ControllerState, broker_id: int, rack: str | None = None, now_ms: int = 0,
             incarnation: uuid.UUID | None = None) -> int:
    error, epoch = s.register_broker(broker_id, incarnation or uuid.uuid4(), rack,
                                     [Listener("PLAINTEXT", "127.0.0.1", 9000 + broker_id)],
                                     now_ms)
    assert error == 0
    return epoch


def cluster(n: int = 3, unclean: bool = False) -> tuple[ControllerState, dict[int, int]]:
    s = make_state(unclean)
    epochs = {i: register(s, i, "abc"[(i - 1) % 3]) for i in range(1, n + 1)}
    return s, epochs


def create(s: ControllerState, name: str, replicas: list[list[int]], **configs: str) -> None:
    r = s.create_topic(name, -1, -1, dict(enumerate(replicas)),
                       {k.replace("_", "."): v for k, v in configs.items()})
    assert r.error == 0, r


def part(s: ControllerState, topic: str = "t", index: int = 0):
    return s.topics[topic].partitions[index]


def recover(s: ControllerState, ends: dict[int, tuple[int, int]] | None = None,
            now_ms: int = SESSION_MS, *, timeout: bool = True) -> None:
    """Answer the controller's unclean-recovery log-end queries (OffsetForLeaderEpoch with
    replica_id -3) as the brokers would: broker -> (last epoch, log end), (0, 0) if not given;
    then (timeout) let the recovery's timeout pass."""
    for send in s.take_ready().sends:
        if send.api_key != ApiKey.OFFSET_FOR_LEADER_EPOCH:
            continue
        assert send.message.replica_id == -3
        end = (ends or {}).get(send.broker_id, (0, 0))
        s.log_ends_answered(send.broker_id, send.broker_epoch, [OffsetForLeaderTopicResult(
            topic=t.topic, partitions=[EpochEndOffset(partition=p.partition, leader_epoch=end[0],
                                                      end_offset=end[1]) for p in t.partitions])
            for t in send.message.topics])
    if timeout:
        assert s.recoveries is not None
        s.recovery_tick(now_ms)
        s.recovery_tick(now_ms + s.recoveries.timeout_ms)


def replay_of(s: ControllerState, records: list) -> ControllerState:
    fresh = ControllerState(config())
    fresh.replay(records)
    return fresh


class Journal:
    """Collects every record a state emits, as the metadata log would."""

    def __init__(self, s: ControllerState) -> None:
        self.s = s
        self.records: list = []

    def take(self):
        ready = self.s.take_ready()
        self.records += ready.records
        return ready


def test_broker_epochs_strictly_increase_also_across_a_replay() -> None:
    s = make_state()
    journal = Journal(s)
    epochs = [register(s, 1), register(s, 2), register(s, 1), register(s, 3)]
    journal.take()
    assert epochs == sorted(set(epochs))
    restarted = replay_of(s, journal.records)
    restarted.start(now_ms=0)
    assert restarted.controller_epoch == s.controller_epoch + 1
    assert register(restarted, 2) > max(epochs)


def test_session_expiry_kills_the_broker_and_reelects_from_the_isr() -> None:
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3]])
    s.take_ready()
    for b in (2, 3):
        assert s.heartbeat(b, epochs[b], now_ms=5000).error == 0
    assert s.expire_sessions(now_ms=SESSION_MS - 1) == []
    assert s.expire_sessions(now_ms=SESSION_MS) == [1]
    assert s.brokers[1].state == DEAD
    p = part(s)
    assert (p.leader, p.leader_epoch, p.isr, p.partition_epoch) == (2, 1, (2, 3), 1)
    sends = s.take_ready().sends
    lai = [x for x in sends if x.api_key == ApiKey.LEADER_AND_ISR]
    assert {x.broker_id for x in lai} == {2, 3}, "LeaderAndIsr goes to the live replicas"
    assert all(x.message.broker_epoch == epochs[x.broker_id] for x in sends)
    assert all(x.message.controller_epoch == s.controller_epoch for x in sends)


def test_a_bounce_is_a_failure_then_a_start_up() -> None:
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3]])
    s.take_ready()
    new_epoch = register(s, 1, "a")  # same id, new process, old generation still live
    ready = s.take_ready()
    states = [(type(r).__name__, getattr(r, "state", None)) for r in ready.records]
    assert states[0] == ("BrokerStateChanged", DEAD), "the old generation fails first"
    p = part(s)
    assert p.leader == 2 and 1 not in p.isr and p.leader_epoch == 1
    assert new_epoch > max(epochs.values())
    to_1 = [x for x in ready.sends if x.broker_id == 1]
    assert [x.api_key for x in to_1] == [6, 4], "full state to the new generation"
    assert all(x.message.broker_epoch == new_epoch for x in to_1)
    assert s.controlled_shutdown(1, epochs[1], now_ms=1)[0] == E.STALE_BROKER_EPOCH


def test_a_returning_leader_gets_a_higher_leader_epoch() -> None:
    """KIP-101: the last leader comes back with no election between; its epoch must rise."""
    s, epochs = cluster(1)
    create(s, "t", [[1]])
    s.expire_sessions(now_ms=SESSION_MS)
    assert part(s).leader == NO_LEADER and part(s).isr == (1,)
    offline_epoch = part(s).leader_epoch
    register(s, 1, "a", now_ms=SESSION_MS + 1)
    assert part(s).leader == 1 and part(s).leader_epoch == offline_epoch + 1
    # The same process registering again (it lost the answer) also leads in a new epoch.
    incarnation = s.brokers[1].incarnation_id
    before = part(s).leader_epoch
    register(s, 1, "a", now_ms=SESSION_MS + 2, incarnation=incarnation)
    assert part(s).leader == 1 and part(s).leader_epoch == before + 1


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_election_only_when_the_topic_enables_it(unclean: bool) -> None:
    s, epochs = cluster(2)
    create(s, "t", [[1, 2]], unclean_leader_election_enable=str(unclean).lower())
    s.alter_partition(1, "t", 0, 0, 0, [1])  # 2 fell out of the ISR
    s.heartbeat(2, epochs[2], now_ms=5000)
    s.expire_sessions(now_ms=SESSION_MS)  # the only ISR member dies
    if unclean:
        assert part(s).leader == NO_LEADER  # until the replicas said what they hold
        recover(s)
    p = part(s)
    if unclean:
        assert (p.leader, p.isr) == (2, (2,))
        assert s.counters["elections_unclean"] == 1
    else:
        assert (p.leader, p.isr) == (NO_LEADER, (1,))


def test_the_cluster_default_decides_unclean_election_where_the_topic_is_silent() -> None:
    s, epochs = cluster(2, unclean=True)
    create(s, "t", [[1, 2]])
    s.alter_partition(1, "t", 0, 0, 0, [1])
    s.heartbeat(2, epochs[2], now_ms=5000)
    s.expire_sessions(now_ms=SESSION_MS)
    recover(s)
    assert part(s).leader == 2


def test_rack_aware_assignment_spreads_replicas_across_racks() -> None:
    brokers = [(1, "a"), (2, "a"), (3, "b"), (4, "b"), (5, "c"), (6, "c")]
    for start in range(6):
        lists = assignment.assign(brokers, 12, 3, start)
        racks = dict(brokers)
        for replicas in lists:
            assert len(set(replicas)) == 3
            assert {racks[r] for r in replicas} == {"a", "b", "c"}
        leaders = [r[0] for r in lists]
        assert all(leaders.count(b) == 2 for b, _ in brokers), "leaders spread evenly"
    # Two racks, three replicas: both racks are used.
    two = assignment.assign([(1, "a"), (2, "a"), (3, "b")], 3, 3, 0)
    assert all(set(r) == {1, 2, 3} for r in two)


def test_default_replication_factor_is_min_3_live_brokers() -> None:
    s, _ = cluster(2)
    r = s.create_topic("small", -1, -1, None, {})
    assert (r.error, r.num_partitions, r.replication_factor) == (0, 1, 2)
    register(s, 3, "c"), register(s, 4, "a")
    assert s.create_topic("big", 3, -1, None, {}).replication_factor == 3
    assert s.create_topic("too", 1, 5, None, {}).error == E.INVALID_REPLICATION_FACTOR
    assert s.create_topic("big", 1, 1, None, {}).error == E.TOPIC_ALREADY_EXISTS
    assert s.create_topic("bad/name", 1, 1, None, {}).error == E.INVALID_TOPIC_EXCEPTION
    # Kafka's rule, the one the brokers apply: a regex's "$" once let a trailing newline in
    for bad in ("bad\n", ".", "..", "", "x" * 250, "caf\u00e9"):
        r = s.create_topic(bad, 1, 1, None, {})
        assert r.error == E.INVALID_TOPIC_EXCEPTION and "[a-zA-Z0-9._-]" in (r.message or "")
    assert s.create_topic("x" * 249, 1, 1, None, {}).error == 0
    assert s.create_topic("cfg", 1, 1, None, {"retention.ms": "soon"}).error == E.INVALID_CONFIG
    assert s.create_topic("cfg", 1, 1, None, {"no.such": "1"}).error == E.INVALID_CONFIG


def test_alter_partition_checks_epochs_and_eligibility() -> None:
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3]])
    s.take_ready()
    assert s.check_generation(1, epochs[1] - 1, "AlterPartition") == E.STALE_BROKER_EPOCH
    assert s.alter_partition(1, "t", 0, 5, 0, [1, 2])[0] == E.FENCED_LEADER_EPOCH
    assert s.alter_partition(2, "t", 0, 0, 0, [1, 2])[0] == E.INVALID_REQUEST  # not the leader
    assert s.alter_partition(1, "t", 0, 0, 9, [1, 2])[0] == E.INVALID_UPDATE_VERSION
    error, p = s.alter_partition(1, "t", 0, 0, 0, [1, 2])
    assert error == 0 and p.isr == (1, 2) and p.partition_epoch == 1 and p.leader_epoch == 0
    assert s.alter_partition(1, "t", 0, 0, 0, [1])[0] == E.INVALID_UPDATE_VERSION, "epoch 0 is old"
    ready = s.take_ready()
    assert {x.api_key for x in ready.sends} == {6}, "an accepted change goes out as UpdateMetadata"
    assert {x.broker_id for x in ready.sends} == {1, 2, 3}
    s.heartbeat(1, epochs[1], 5000), s.heartbeat(2, epochs[2], 5000)
    s.expire_sessions(SESSION_MS)  # 3 dies
    assert s.alter_partition(1, "t", 0, 0, 1, [1, 2, 3])[0] == E.INELIGIBLE_REPLICA
    assert s.alter_partition(1, "t", 0, 0, 1, [1, 2], [epochs[1], epochs[2] - 1])[0] == \
        E.INELIGIBLE_REPLICA, "v3: a member named with an older generation"


def test_controlled_shutdown_moves_leadership_and_refuses_a_stale_epoch() -> None:
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3], [2, 1, 3]])
    create(s, "single", [[1]])  # replication factor 1: nowhere to move, not reported
    s.take_ready()
    assert s.controlled_shutdown(1, epochs[1] - 1, now_ms=1)[0] == E.STALE_BROKER_EPOCH
    error, remaining = s.controlled_shutdown(1, epochs[1], now_ms=1)
    assert (error, remaining) == (0, [])
    assert s.brokers[1].state == SHUTTING_DOWN
    p0, p1 = part(s, "t", 0), part(s, "t", 1)
    assert (p0.leader, p0.leader_epoch, p0.isr) == (2, 1, (2, 3))
    assert p1.leader == 2 and 1 not in p1.isr
    stops = [x for x in s.take_ready().sends if x.api_key == ApiKey.STOP_REPLICA]
    assert [x.broker_id for x in stops] == [1]
    # A partition whose only other replica is gone stays with the broker, and is reported.
    s2, e2 = cluster(2)
    create(s2, "u", [[1, 2]])
    s2.alter_partition(1, "u", 0, 0, 0, [1])
    assert s2.controlled_shutdown(1, e2[1], now_ms=1) == (0, [("u", 0)])
    # Once the other replica is stopping too, nothing can take it: not reported, so the broker
    # does not retry in vain (every broker of a cluster stopping at once).
    s2.controlled_shutdown(2, e2[2], now_ms=1)
    assert s2.controlled_shutdown(1, e2[1], now_ms=1) == (0, [])


def test_elect_leaders_preferred_and_unclean() -> None:
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3]])
    assert s.elect_leader("t", 0, 0)[0] == E.ELECTION_NOT_NEEDED
    s.controlled_shutdown(1, epochs[1], now_ms=1)
    register(s, 1, "a", incarnation=s.brokers[1].incarnation_id)
    assert s.elect_leader("t", 0, 0)[0] == E.PREFERRED_LEADER_NOT_AVAILABLE, "1 not in the ISR"
    s.alter_partition(2, "t", 0, part(s).leader_epoch, part(s).partition_epoch, [2, 3, 1])
    assert s.elect_leader("t", 0, 0) == (0, None)
    assert part(s).leader == 1
    assert s.elect_leader("t", 0, 1)[0] == E.ELECTION_NOT_NEEDED
    assert s.elect_leader("nope", 0, 0)[0] == E.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_topic_stops_replicas_and_marks_it_deleted() -> None:
    s, _ = cluster()
    create(s, "t", [[1, 2]])
    s.take_ready()
    assert s.delete_topic("t") == 0 and "t" not in s.topics
    sends = s.take_ready().sends
    assert {x.broker_id for x in sends if x.api_key == ApiKey.STOP_REPLICA} == {1, 2}
    um = [x.message for x in sends if x.api_key == ApiKey.UPDATE_METADATA]
    assert len(um) == 3 and all(m.topic_states[0].partition_states[0].leader == -2 for m in um)
    assert s.delete_topic("t") == E.UNKNOWN_TOPIC_OR_PARTITION


def test_replaying_the_log_gives_the_same_state() -> None:
    s = make_state()
    journal = Journal(s)
    epochs = {i: register(s, i, "ab"[i % 2]) for i in range(1, 5)}
    create(s, "t", [[1, 2, 3], [2, 3, 4]])
    s.create_topic("auto", 3, 2, None, {"retention.ms": "1000"})
    s.create_partitions("auto", 5, None)
    s.alter_partition(1, "t", 0, 0, 0, [1, 2])
    s.controlled_shutdown(2, epochs[2], now_ms=1)
    register(s, 3, "b")  # bounce
    for b in (1, 3, 4):
        s.heartbeat(b, s.brokers[b].broker_epoch, now_ms=5000)
    s.expire_sessions(now_ms=SESSION_MS + 10)
    s.delete_topic("auto")
    journal.take()  # make_state's ControllerStarted is among them: nothing was taken before
    replayed = replay_of(s, journal.records)
    assert replayed.durable_view() == s.durable_view()
