"""KIP-966 in the controller (issue 19): eligible leader replicas (ELR) and unclean restarts.

Replicas that leave the ISR while it is below min.insync.replicas join the ELR (the leaders' high
watermark stands still then, so they hold everything committed); elections take the ISR, then
the ELR, then (if allowed) any replica. A broker whose new process did not shut down cleanly
(BrokerRegistration v2's previous_broker_epoch is not its last generation) leaves the ISR and the
ELR, except where it is the only replica left in them."""

from __future__ import annotations

import uuid

from epochlog.controller.describe_partitions import describe_topic_partitions
from epochlog.controller.model import NO_LEADER
from epochlog.controller.records import Listener
from epochlog.controller.state import ControllerState
from epochlog.protocol.apis.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from epochlog.protocol.error_codes import ErrorCode as E

from .test_state import SESSION_MS, cluster, create, part, recover, replay_of


def restart(s: ControllerState, broker_id: int, previous_epoch: int) -> int:
    """A new process of broker_id registers, saying it shut down cleanly from previous_epoch
    (-1: it crashed)."""
    error, epoch = s.register_broker(broker_id, uuid.uuid4(), "abc"[broker_id - 1],
                                     [Listener("PLAINTEXT", "127.0.0.1", 9000 + broker_id)],
                                     now_ms=0, previous_broker_epoch=previous_epoch)
    assert error == 0
    return epoch


def shrink_to_one(s: ControllerState, epochs: dict[int, int]) -> None:
    """t-0 on 1, 2, 3 with min.insync.replicas 2: 3 and then 2 stop (controlled shutdown)."""
    create(s, "t", [[1, 2, 3]], min_insync_replicas="2")
    s.controlled_shutdown(3, epochs[3], now_ms=1)
    assert (part(s).isr, part(s).elr) == ((1, 2), ()), "at min.insync.replicas: no ELR"
    s.controlled_shutdown(2, epochs[2], now_ms=1)
    assert (part(s).isr, part(s).elr) == ((1,), (2,)), "below it: 2 is eligible"


def test_replicas_leaving_below_min_isr_stay_eligible_and_one_leads_when_the_isr_is_gone(
) -> None:
    s, epochs = cluster()
    shrink_to_one(s, epochs)
    s.expire_sessions(SESSION_MS + 10)  # 1 dies (the others stopped), nobody to elect
    p = part(s)
    assert (p.leader, p.isr, p.elr) == (NO_LEADER, (1,), (2,))
    restart(s, 2, epochs[2])  # 2 comes back after its clean shutdown: it leads from the ELR
    p = part(s)
    assert (p.leader, p.isr) == (2, (2,)) and p.elr == (1,), \
        "1 left the ISR below min.insync.replicas: eligible in turn"
    assert s.counters["elections_from_elr"] == 1
    assert replay_of(s, s.take_ready().records).durable_view()["topics"] is not None


def test_an_isr_back_at_min_isr_empties_the_elr() -> None:
    s, epochs = cluster()
    shrink_to_one(s, epochs)
    restart(s, 2, epochs[2])
    error, p = s.alter_partition(1, "t", 0, part(s).leader_epoch, part(s).partition_epoch,
                                 [1, 2])
    assert error == 0 and p is not None and (p.isr, p.elr) == ((1, 2), ())


def test_an_unclean_restart_leaves_isr_and_elr_for_the_last_known_elr() -> None:
    s, epochs = cluster()
    shrink_to_one(s, epochs)
    s.expire_sessions(SESSION_MS + 10)  # 1 (the last ISR member) dies
    restart(s, 1, previous_epoch=-1)  # and comes back from a crash: 2 is eligible, 1 is not
    p = part(s)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (NO_LEADER, (), (2,), (1,)), \
        "waits for 2"
    assert s.counters["unclean_restarts"] == 1
    # 2 crashed too: nothing clean can return. The last resort is the last known ELR, the
    # former last ISR member first (it held at least what 2 held).
    restart(s, 2, previous_epoch=-1)
    p = part(s)
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (1, (1,), (), (2,))
    assert s.counters["elections_from_last_known_elr"] == 1


def test_the_simulation_seed_599_chain_elects_the_former_last_isr_member() -> None:
    """Seed 599: the last ISR member (3) restarts uncleanly while 1 is eligible, then 1 restarts
    uncleanly too (it lost its tail in the crash). Electing 1 lost acknowledged writes; the
    former last ISR member must lead."""
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3]], min_insync_replicas="2")
    s.controlled_shutdown(2, epochs[2], now_ms=1)
    s.controlled_shutdown(1, epochs[1], now_ms=1)
    assert (part(s).isr, part(s).elr) == ((3,), (1,))
    s.expire_sessions(SESSION_MS + 10)
    restart(s, 3, previous_epoch=-1)
    restart(s, 1, previous_epoch=-1)
    p = part(s)
    assert (p.leader, p.isr) == (3, (3,)), p


def test_a_clean_restart_keeps_the_broker_where_it_was() -> None:
    s, epochs = cluster()
    create(s, "t", [[1, 2, 3]], min_insync_replicas="2")
    s.expire_sessions(SESSION_MS + 10)  # all three die at once: the ISR keeps its last member
    p = part(s)
    assert p.leader == NO_LEADER and len(p.isr) == 1
    last = p.isr[0]
    restart(s, last, epochs[last])
    assert part(s).leader == last and s.counters["unclean_restarts"] == 0


def test_an_unclean_election_clears_the_elr() -> None:
    s, epochs = cluster(unclean=True)
    shrink_to_one(s, epochs)
    s.expire_sessions(SESSION_MS + 10)
    restart(s, 3, epochs[3])  # 3 left at min.insync.replicas: neither ISR nor ELR
    # 1 (ISR) and 2 (ELR) are not alive: unclean is the only way, and the topic allows it
    recover(s, now_ms=SESSION_MS + 10)
    p = part(s)
    assert (p.leader, p.isr, p.elr) == (3, (3,), ()), p


def test_describe_topic_partitions_pages_and_shows_the_elr() -> None:
    s, epochs = cluster()
    create(s, "a", [[1, 2, 3]] * 3)
    create(s, "b", [[1, 2, 3]] * 2, min_insync_replicas="2")
    s.controlled_shutdown(3, epochs[3], now_ms=1)
    s.controlled_shutdown(2, epochs[2], now_ms=1)
    seen, cursor = [], None
    for _ in range(5):
        answer = describe_topic_partitions(s, DescribeTopicPartitionsRequest(
            response_partition_limit=2, cursor=cursor), 0, 0)
        seen.append([(t.name, p.partition_index, p.eligible_leader_replicas)
                     for t in answer.topics for p in t.partitions])
        cursor = answer.next_cursor
        if cursor is None:
            break
    assert seen == [[("a", 0, []), ("a", 1, [])], [("a", 2, []), ("b", 0, [2])], [("b", 1, [2])]]
    answer = describe_topic_partitions(s, DescribeTopicPartitionsRequest(
        topics=[TopicRequest(name="nope")]), 0, 0)
    assert answer.topics[0].error_code == E.UNKNOWN_TOPIC_OR_PARTITION
