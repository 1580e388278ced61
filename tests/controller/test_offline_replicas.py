"""Replicas offline after a storage error (issue 19): the broker lists them in every heartbeat
(BrokerHeartbeat v1 offline_log_dirs, one directory id per partition) and the controller takes
them out of leadership and the ISR, keeps them out while they are listed, and lets them back."""

from __future__ import annotations

from epochlog.controller.model import NO_LEADER
from epochlog.controller.outbound import offline_replicas
from epochlog.protocol.apis.broker_heartbeat import replica_dir_id
from epochlog.protocol.error_codes import ErrorCode as E

from .test_state import cluster, create, part, register


def test_an_offline_leader_hands_over_to_another_in_sync_replica() -> None:
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3], [2, 3, 1]])
    s.take_ready()
    s.heartbeat(1, epochs[1], 10, offline_dirs=[replica_dir_id("t", 0)])
    p0, p1 = part(s, "t", 0), part(s, "t", 1)
    assert (p0.leader, p0.leader_epoch, p0.isr) == (2, 1, (2, 3))
    assert (p1.leader, p1.isr) == (2, (2, 3, 1)), "only the listed replica is offline"
    assert offline_replicas(s.brokers, "t", 0, p0) == [1]
    lai = [x for x in s.take_ready().sends if x.api_key == 4]
    assert {x.broker_id for x in lai} == {1, 2, 3}, "every replica hears of the change"
    # Listed again: nothing more happens. The preferred replica may not lead while offline.
    s.heartbeat(1, epochs[1], 20, offline_dirs=[replica_dir_id("t", 0)])
    assert s.take_ready().records == []
    assert s.elect_leader("t", 0, 0)[0] == E.PREFERRED_LEADER_NOT_AVAILABLE


def test_an_offline_follower_leaves_the_isr_and_may_not_rejoin_while_listed() -> None:
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3]])
    s.heartbeat(3, epochs[3], 10, offline_dirs=[replica_dir_id("t", 0)])
    p = part(s)
    assert (p.leader, p.leader_epoch, p.isr) == (1, 0, (1, 2))
    assert s.alter_partition(1, "t", 0, 0, p.partition_epoch, [1, 2, 3])[0] == \
        E.INELIGIBLE_REPLICA
    s.heartbeat(3, epochs[3], 20)  # repaired: no longer listed
    assert offline_replicas(s.brokers, "t", 0, part(s)) == []
    error, after = s.alter_partition(1, "t", 0, 0, p.partition_epoch, [1, 2, 3])
    assert error == 0 and after is not None and after.isr == (1, 2, 3)


def test_the_last_in_sync_replica_offline_leaves_the_partition_leaderless_until_it_returns(
) -> None:
    s, epochs = cluster()
    create(s, "t", [[1]])
    s.heartbeat(1, epochs[1], 10, offline_dirs=[replica_dir_id("t", 0)])
    p = part(s)
    assert (p.leader, p.leader_epoch, p.isr) == (NO_LEADER, 1, (1,)), \
        "the ISR is kept: its last member, back, may lead with nothing more lost"
    s.heartbeat(1, epochs[1], 20)
    p = part(s)
    assert (p.leader, p.leader_epoch, p.isr) == (1, 2, (1,))


def test_an_unknown_directory_changes_nothing_and_a_new_generation_starts_clean() -> None:
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3]])
    s.take_ready()
    s.heartbeat(2, epochs[2], 10, offline_dirs=[replica_dir_id("other", 0)])
    assert s.take_ready().records == []
    s.heartbeat(2, epochs[2], 20, offline_dirs=[replica_dir_id("t", 0)])
    assert part(s).isr == (1, 3)
    assert s.brokers[2].offline_replicas == {("t", 0)}
    register(s, 2, "b")  # a new process: its heartbeats say again what is offline
    assert s.brokers[2].offline_replicas == frozenset()
