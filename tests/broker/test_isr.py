"""ISR shrink and expand (broker/isr.py), the leader's caught-up rule and the acks=all rules
with min.insync.replicas (broker/handlers/produce.py).

Unit tests drive `IsrManager` over real `Partition`s on real storage Logs with an injected clock;
followers are played by calling `Partition.update_follower` as the Fetch handler does, and the
controller by the real `ControllerState.alter_partition` where its answer matters.

The real-process tests at the bottom need followers that fetch (broker/follower.py); they pause
followers with SIGSTOP and watch the ISR leave and rejoin through the controller's metadata.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from epochlog.broker.handlers.produce import append as produce_append
from epochlog.broker.isr import IsrManager, IsrProposal
from epochlog.broker.partition import Partition, PartitionState
from epochlog.broker.replicas import ReplicaManager
from epochlog.broker.replication_wait import replication_error
from epochlog.broker.storage import Log, LogConfig, LogManager
from epochlog.protocol.apis.produce import PartitionProduceData
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import build_batch

ME, F2, F3 = 1, 2, 3
REPLICAS = (ME, F2, F3)
LAG_MS = 10_000
BACKOFF_MS = 500


class Clock:
    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def leader(tmp_path: Path, clock: Clock) -> Partition:
    """Partition t-0 led here at leader epoch 0, partition epoch 0, ISR of all three."""
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), clock, clean_shutdown=True)
    p = Partition("t", 0, ME, log, clock)
    p.set_min_insync_replicas(2)
    assert p.apply(PartitionState(ME, 0, 0, REPLICAS, REPLICAS))
    return p


def manager(clock: Clock, live: set[int] | None = None) -> IsrManager:
    return IsrManager(ME, clock, lag_time_max_ms=LAG_MS, retry_backoff_ms=BACKOFF_MS,
                      replica_live=(lambda r: r in live) if live is not None else lambda r: True)


def append(p: Partition, n: int = 1) -> int:
    return p.append_as_leader(build_batch([(None, b"x", None, None)] * n)).last_offset


def answered(p: Partition, isr: tuple[int, ...], bump: int = 1) -> PartitionState:
    """The controller's state after accepting `isr` (partition epoch + bump)."""
    assert p.state is not None
    return PartitionState(ME, p.leader_epoch, p.state.partition_epoch + bump, REPLICAS, isr)


def fetch_all(p: Partition, *replicas: int) -> None:
    for r in replicas:
        p.update_follower(r, p.log_end_offset)


# ------------------------------------------------------------------------- caught-up rule
def test_a_follower_fetching_what_existed_at_its_last_fetch_stays_caught_up(
        leader: Partition, clock: Clock) -> None:
    """Kafka's lastCaughtUpTimeMs: under steady appends a follower never sits at the leader's
    log end when it fetches, yet it keeps up; it must never count as lagging."""
    fetch_all(leader, F2, F3)
    isr = manager(clock)
    for _ in range(60):  # 60 rounds of 500 ms: three times the lag limit
        end_before = leader.log_end_offset
        append(leader, 3)
        clock.ms += 500
        leader.update_follower(F2, end_before)  # what existed at its previous fetch
        leader.update_follower(F3, end_before)
        assert isr.due([leader]) == []
    assert leader.lagging_followers(LAG_MS) == []
    assert leader.followers[F2].last_caught_up_ms == clock.ms - 500


def test_a_follower_that_falls_behind_stops_being_caught_up_at_its_last_good_fetch(
        leader: Partition, clock: Clock) -> None:
    fetch_all(leader, F2, F3)
    good_at = clock.ms
    for _ in range(30):
        append(leader, 10)
        clock.ms += 500
        fetch_all(leader, F2)
        leader.update_follower(F3, leader.followers[F3].log_end_offset + 1)  # one at a time
    assert leader.followers[F3].last_caught_up_ms == good_at
    assert leader.lagging_followers(LAG_MS) == [F3]


def test_fetches_that_say_nothing_about_our_log_are_ignored(leader: Partition,
                                                            clock: Clock) -> None:
    append(leader, 5)
    assert not leader.update_follower(F2, 9)  # past our log end
    assert leader.followers[F2].log_end_offset == -1
    leader.apply(PartitionState(ME, 3, 1, REPLICAS, REPLICAS))  # new epoch starts at 5
    append(leader, 5)
    # Its last fetched epoch 1 is unknown to us: it diverges and will truncate first.
    assert not leader.update_follower(F2, 8, last_fetched_epoch=1)
    assert leader.followers[F2].log_end_offset == -1
    leader.update_follower(F2, 8, last_fetched_epoch=3)
    assert leader.followers[F2].log_end_offset == 8


# ------------------------------------------------------------------------------- shrinking
def test_a_lagging_follower_is_proposed_out_and_the_answer_is_adopted(leader: Partition,
                                                                      clock: Clock) -> None:
    isr = manager(clock)
    fetch_all(leader, F2, F3)
    append(leader, 4)
    fetch_all(leader, F2)  # F3 stops fetching
    clock.ms += LAG_MS
    assert isr.due([leader]) == [], "exactly the limit is still in sync"
    clock.ms += 1
    [proposal] = isr.due([leader])
    assert (proposal.isr, proposal.left, proposal.joined) == ((ME, F2), (F3,), ())
    assert (proposal.leader_epoch, proposal.partition_epoch) == (0, 0)
    assert leader.proposed_isr == (ME, F2)
    assert isr.due([leader]) == [], "pending: no second proposal"
    assert leader.high_watermark == 0, "F3 still counts while the shrink is in flight"
    assert isr.on_answer(leader, proposal, 0, answered(leader, (ME, F2)))
    assert leader.isr == (ME, F2) and leader.state.partition_epoch == 1
    assert leader.proposed_isr is None and leader.high_watermark == 4
    assert isr.counters.shrinks_total == 1


def test_a_member_at_our_log_end_is_never_shrunk_however_long_it_is_quiet(
        leader: Partition, clock: Clock) -> None:
    append(leader, 2)
    fetch_all(leader, F2, F3)
    clock.ms += 10 * LAG_MS  # no appends, no fetches recorded: still at our log end
    assert manager(clock).due([leader]) == []


def test_shrink_against_the_real_controller(leader: Partition, clock: Clock) -> None:
    from tests.controller.test_state import cluster, create
    state, _ = cluster(3)
    create(state, "t", [list(REPLICAS)])
    isr = manager(clock)
    fetch_all(leader, F2, F3)
    append(leader)
    fetch_all(leader, F2)
    clock.ms += LAG_MS + 1
    [proposal] = isr.due([leader])
    error, p = state.alter_partition(ME, "t", 0, proposal.leader_epoch,
                                     proposal.partition_epoch, proposal.isr)
    assert error == 0
    isr.on_answer(leader, proposal, error, PartitionState(p.leader, p.leader_epoch,
                                                          p.partition_epoch, REPLICAS, p.isr))
    assert leader.isr == (ME, F2) == state.topics["t"].partitions[0].isr


# ------------------------------------------------------------------------------- expanding
def shrunk_leader(leader: Partition) -> Partition:
    """The leader with F3 out of the ISR (partition epoch 1)."""
    assert leader.apply(answered(leader, (ME, F2)))
    return leader


def test_a_follower_rejoins_once_it_reaches_the_high_watermark(leader: Partition,
                                                               clock: Clock) -> None:
    shrunk_leader(leader)
    isr = manager(clock)
    append(leader, 6)
    fetch_all(leader, F2)
    assert leader.high_watermark == 6
    leader.update_follower(F3, 5)
    assert isr.due([leader]) == [], "below the high watermark"
    leader.update_follower(F3, 6)
    [proposal] = isr.due([leader])
    assert (proposal.isr, proposal.joined) == ((ME, F2, F3), (F3,))
    assert isr.on_answer(leader, proposal, 0, answered(leader, (ME, F2, F3)))
    assert leader.isr == (ME, F2, F3) and isr.counters.expands_total == 1


def test_a_follower_that_stopped_fetching_does_not_flap_back_in_below_min_isr(
        leader: Partition, clock: Clock) -> None:
    """Both followers stop fetching (paused, their sessions still alive). With the ISR shrunk
    below min.insync.replicas the high watermark stands still (KIP-966), so a stopped
    follower's old log end stays >= it; it must not rejoin (and be shrunk again, every
    lag_time_max_ms: seen as acks=all writes timing out instead of NOT_ENOUGH_REPLICAS) until
    it fetches again, as Kafka expands only on a fetch."""
    isr = manager(clock)
    append(leader, 3)
    fetch_all(leader, F2, F3)
    assert leader.apply(answered(leader, (ME, F2)))  # F3 already out; now F2 stops as well
    append(leader, 2)
    clock.ms += LAG_MS + 1
    [shrink] = isr.due([leader])
    assert shrink.left == (F2,)
    assert isr.on_answer(leader, shrink, 0, answered(leader, (ME,)))
    assert leader.high_watermark == 3 and leader.log_end_offset == 5, "frozen below min ISR"
    for _ in range(5):
        clock.ms += LAG_MS + 1
        assert isr.due([leader]) == [], "a follower that stopped fetching was proposed back"
    leader.update_follower(F2, 5)  # fetching again, at our log end
    [expand] = isr.due([leader])
    assert expand.joined == (F2,)


def test_no_rejoin_before_the_start_of_our_leader_epoch(tmp_path: Path, clock: Clock) -> None:
    """A follower at the high watermark but short of our epoch's start offset may still hold a
    divergent tail below it: it must fetch into our epoch first."""
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), clock, clean_shutdown=True)
    p = Partition("t", 0, ME, log, clock)
    p.apply(PartitionState(ME, 0, 0, REPLICAS, (ME,)))
    append(p, 5)
    p.apply(PartitionState(F2, 1, 1, REPLICAS, (F2,)))  # a follower for a while
    p.log.high_watermark = 3  # what we knew as a follower
    # Leader again (epoch 2 starts at 5); F2 has not fetched yet, so the high watermark stays.
    p.apply(PartitionState(ME, 2, 2, REPLICAS, (ME, F2)))
    isr = manager(clock)
    p.update_follower(F3, 4)
    assert 4 >= p.high_watermark and isr.due([p]) == []
    p.update_follower(F3, 5)
    assert [pr.joined for pr in isr.due([p])] == [(F3,)]


def test_a_broker_not_live_in_metadata_is_not_proposed(leader: Partition, clock: Clock) -> None:
    shrunk_leader(leader)
    live = {ME, F2}
    isr = manager(clock, live)
    fetch_all(leader, F2, F3)
    assert isr.due([leader]) == []
    live.add(F3)
    assert [pr.joined for pr in isr.due([leader])] == [(F3,)]


def test_an_ineligible_replica_is_backed_off_not_retried_in_a_loop(leader: Partition,
                                                                   clock: Clock) -> None:
    shrunk_leader(leader)
    isr = manager(clock)
    fetch_all(leader, F2, F3)
    [proposal] = isr.due([leader])
    assert not isr.on_answer(leader, proposal, E.INELIGIBLE_REPLICA, None)
    assert leader.proposed_isr is None and leader.isr == (ME, F2)
    clock.ms += BACKOFF_MS - 1
    assert isr.due([leader]) == []
    clock.ms += 1
    assert [pr.joined for pr in isr.due([leader])] == [(F3,)]
    assert isr.counters.alter_partition_failures_total == 1


# -------------------------------------------------------------- pending: the maximal ISR
def test_while_an_expansion_is_in_flight_the_new_member_holds_back_the_high_watermark(
        leader: Partition, clock: Clock) -> None:
    shrunk_leader(leader)
    isr = manager(clock)
    append(leader, 3)
    fetch_all(leader, F2, F3)  # both at 3
    [proposal] = isr.due([leader])
    assert leader.maximal_isr == (ME, F2, F3)
    append(leader, 3)
    fetch_all(leader, F2)  # F2 at 6, F3 still at 3
    assert leader.high_watermark == 3, "F3 may already be in the controller's ISR"
    # Refused: back to the ISR we hold, and the high watermark moves on at once.
    assert isr.on_answer(leader, proposal, E.INELIGIBLE_REPLICA, None)
    assert leader.maximal_isr == (ME, F2) and leader.high_watermark == 6


def test_an_expansion_in_flight_does_not_move_a_high_watermark_held_below_min_isr(
        leader: Partition, clock: Clock) -> None:
    """Simulation seed 395: the ISR is down to the leader (min.insync.replicas 2; the members
    that left are the controller's ELR), and an expansion is in flight that the controller never
    accepts. Counting the proposed member let the high watermark (and acks=all) pass records
    no ELR member held; the controller then elected one and they were gone."""
    isr = manager(clock)
    append(leader, 3)
    fetch_all(leader, F2, F3)
    assert leader.apply(answered(leader, (ME,)))  # both left, at 3
    append(leader, 4)
    leader.update_follower(F2, leader.log_end_offset)  # F2 caught up again
    [proposal] = isr.due([leader])
    assert proposal.joined == (F2,) and leader.maximal_isr == (ME, F2)
    last = append(leader, 1)
    leader.update_follower(F2, leader.log_end_offset)  # the proposed member holds it all
    assert leader.high_watermark == 3, "only the controller's ISR counts for min.insync"
    replicas = SimpleNamespace(get=lambda topic, index: leader)
    assert replication_error(replicas, leader, 0, last) is None, "acks=all still waits"
    assert isr.on_answer(leader, proposal, 0, answered(leader, (ME, F2)))
    assert leader.high_watermark == leader.log_end_offset == 8
    assert replication_error(replicas, leader, 0, last) == 0


def test_a_lost_answer_keeps_the_partition_pending_and_sends_the_same_proposal_again(
        leader: Partition, clock: Clock) -> None:
    shrunk_leader(leader)
    isr = manager(clock)
    fetch_all(leader, F2, F3)
    [proposal] = isr.due([leader])
    assert not isr.on_answer(leader, proposal, E.NETWORK_EXCEPTION, None)
    assert leader.proposed_isr == (ME, F2, F3), "still pending: the outcome is unknown"
    assert isr.next_retry_ms() == clock.ms + BACKOFF_MS
    clock.ms += BACKOFF_MS
    assert isr.due([leader]) == [proposal]
    # The first try had been accepted: the retry finds the partition epoch moved on, and the
    # answer's state (ours, one newer) is adopted, since no LeaderAndIsr will bring it.
    assert isr.on_answer(leader, proposal, E.INVALID_UPDATE_VERSION,
                         answered(leader, (ME, F2, F3)))
    assert leader.isr == (ME, F2, F3) and leader.proposed_isr is None


def test_fenced_answer_clears_pending_and_waits_for_the_leader_and_isr(leader: Partition,
                                                                       clock: Clock) -> None:
    isr = manager(clock)
    fetch_all(leader, F2, F3)
    append(leader)
    fetch_all(leader, F2)
    clock.ms += LAG_MS + 1
    [proposal] = isr.due([leader])
    newer = PartitionState(F2, 1, 3, REPLICAS, (F2, F3))
    assert not isr.on_answer(leader, proposal, E.FENCED_LEADER_EPOCH, newer)
    assert leader.is_leader and leader.leader_epoch == 0, "not applied from an answer"
    assert leader.proposed_isr is None
    leader.apply(newer)  # the LeaderAndIsr arrives
    assert not leader.is_leader and isr.due([leader]) == []


def test_a_leader_and_isr_while_pending_replaces_the_proposal(leader: Partition,
                                                              clock: Clock) -> None:
    isr = manager(clock)
    fetch_all(leader, F2, F3)
    append(leader)
    fetch_all(leader, F2)
    clock.ms += LAG_MS + 1
    [proposal] = isr.due([leader])
    # The controller removed F3 itself (its broker died) and told us.
    assert leader.apply(PartitionState(ME, 0, 1, REPLICAS, (ME, F2)))
    assert leader.proposed_isr is None and isr.due([leader]) == []
    # The late answer to our (now stale) proposal changes nothing.
    assert not isr.on_answer(leader, proposal, E.INVALID_UPDATE_VERSION,
                             PartitionState(ME, 0, 1, REPLICAS, (ME, F2)))
    assert leader.isr == (ME, F2)


def test_a_retry_is_dropped_once_the_partition_moved_on(leader: Partition, clock: Clock) -> None:
    isr = manager(clock)
    fetch_all(leader, F2, F3)
    append(leader)
    fetch_all(leader, F2)
    clock.ms += LAG_MS + 1
    [proposal] = isr.due([leader])
    isr.on_answer(leader, proposal, E.NOT_CONTROLLER, None)
    leader.apply(PartitionState(F2, 1, 1, REPLICAS, (F2, F3)))  # we lost the leadership
    clock.ms += BACKOFF_MS
    assert isr.due([leader]) == [] and isr.next_retry_ms() is None


def test_proposals_are_plain_values() -> None:
    a = IsrProposal("t", 0, 1, 2, (1, 2), left=(3,), why="x")
    assert a == IsrProposal("t", 0, 1, 2, (1, 2), left=(3,), why="x")


# ------------------------------------------------------------------ produce: min ISR rules
@pytest.fixture
def app(tmp_path: Path, clock: Clock) -> SimpleNamespace:
    logs = LogManager.open(str(tmp_path / "data"), LogConfig(), clock, broker_id=ME,
                           cluster_id="test")
    replicas = ReplicaManager(ME, logs, clock, produce_waiters_max=10, fetch_waiters_max=10)
    replicas.apply_partition_state("t", 0, PartitionState(ME, 0, 0, REPLICAS, REPLICAS), True)
    replicas.get("t", 0).set_min_insync_replicas(2)
    created: list[str] = []
    return SimpleNamespace(replicas=replicas, config=SimpleNamespace(message_max_bytes=1 << 20),
                           metadata=None, auto_create_soon=created.append)


def produce(app: SimpleNamespace, acks: int):
    data = PartitionProduceData(index=0, records=build_batch([(None, b"v", None, None)]))
    return produce_append(app, "t", data, acks)


def test_acks_all_refused_before_appending_when_the_isr_is_below_min(app) -> None:
    p = app.replicas.get("t", 0)
    p.apply(PartitionState(ME, 0, 1, REPLICAS, (ME,)))
    answer, waiting, _ = produce(app, -1)
    assert answer.error_code == E.NOT_ENOUGH_REPLICAS and waiting is None
    assert p.log_end_offset == 0, "nothing appended"
    for acks in (0, 1):
        answer, _, _ = produce(app, acks)
        assert answer.error_code == 0
    assert p.log_end_offset == 2


def test_acks_all_after_the_isr_shrank_below_min_while_waiting(app) -> None:
    p = app.replicas.get("t", 0)
    answer, waiting, last = produce(app, -1)
    assert answer.error_code == 0 and waiting is p
    assert replication_error(app.replicas, p, 0, last) is None, "waiting for the ISR"
    p.update_follower(F2, p.log_end_offset)
    assert replication_error(app.replicas, p, 0, last) is None
    p.apply(PartitionState(ME, 0, 1, REPLICAS, (ME,)))  # both followers dropped out
    # KIP-966: below min.insync.replicas the high watermark stands still (what left the ISR
    # stays eligible to lead), so the write is neither committed nor refused: it waits...
    assert p.high_watermark <= last
    assert replication_error(app.replicas, p, 0, last) is None
    # ... until the ISR is back at min.insync.replicas.
    p.apply(PartitionState(ME, 0, 2, REPLICAS, (ME, F2)))
    assert p.high_watermark > last
    assert replication_error(app.replicas, p, 0, last) == 0


def test_acks_all_succeeds_with_the_isr_at_min(app) -> None:
    p = app.replicas.get("t", 0)
    p.apply(PartitionState(ME, 0, 1, REPLICAS, (ME, F2)))
    answer, waiting, last = produce(app, -1)
    assert answer.error_code == 0
    p.update_follower(F2, p.log_end_offset)
    assert replication_error(app.replicas, p, 0, last) == 0
    p.apply(PartitionState(F2, 1, 2, REPLICAS, (F2,)))
    assert replication_error(app.replicas, p, 0, last) == 0, "committed before we lost leadership"
    answer, _, _ = produce(app, -1)
    assert answer.error_code == E.NOT_LEADER_OR_FOLLOWER



def test_one_min_isr_rule_capped_at_the_replication_factor(tmp_path: Path, clock: Clock) -> None:
    """min.insync.replicas is asked through Partition.under_min_isr alone, Kafka's effective
    rule: a setting above the replication factor is capped at it (it could never be met), the
    confirmed ISR counts for appends, the maximal one (a proposal in flight) for the answer."""
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), clock, clean_shutdown=True)
    p = Partition("t", 0, ME, log, clock)
    p.set_min_insync_replicas(3)
    assert p.apply(PartitionState(ME, 0, 0, (ME, F2), (ME, F2)))
    assert p.min_insync_replicas == 3
    assert not p.under_min_isr(), "3 capped at the replication factor 2"
    assert p.apply(PartitionState(ME, 0, 1, (ME, F2), (ME,)))
    assert p.under_min_isr() and p.under_min_isr(maximal=True)
    p.propose_isr((ME, F2))
    assert p.under_min_isr() and not p.under_min_isr(maximal=True)
    p.withdraw_isr_proposal()
    assert not p.set_min_insync_replicas(1), "no high watermark to move: nothing appended"
    assert not p.under_min_isr()

# --------------------------------------------------------------------- real processes
pytestmark_real = pytest.mark.skipif(
    not Path(__file__).resolve().parents[2].joinpath("broker", "follower.py").exists(),
    reason="needs the follower fetcher (broker/follower.py)")


def isr_of(cluster, topic: str, asked: int) -> tuple[int, ...]:
    """The ISR in broker `asked`'s metadata (a paused broker cannot answer: ask another)."""
    md = cluster.metadata(asked, topics=[topic])
    return tuple(sorted(md.topics[0].partitions[0].isr_nodes))


def wait_isr(cluster, topic: str, wanted: set[int], asked: int = 1,
             timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while set(isr_of(cluster, topic, asked)) != wanted:
        assert time.monotonic() < deadline, \
            f"ISR {isr_of(cluster, topic, asked)}, wanted {wanted}"
        time.sleep(0.1)


def produce_all(bootstrap: str, topic: str, value: bytes, acks: str = "all") -> str | None:
    """One record through confluent-kafka; None on success, else the error's name."""
    from confluent_kafka import Producer
    result: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "acks": acks,
                         "message.timeout.ms": 8000, "retries": 0,
                         "enable.idempotence": False, "topic.metadata.refresh.interval.ms": 500})
    producer.produce(topic, value, on_delivery=lambda err, msg: result.append(err))
    producer.flush(15)
    assert result, "no delivery report"
    return None if result[0] is None else result[0].name()


@pytestmark_real
def test_paused_followers_leave_the_isr_and_min_isr_refuses_then_they_rejoin(
        tmp_path: Path) -> None:
    """A paused follower leaves the ISR through the leader's AlterPartition once the log moves
    on without it (an idle partition keeps it: it is at the log end, Kafka's rule), long before
    its controller session (30 s here) would expire; acks=all goes on with two; with one
    in sync min.insync.replicas=2 refuses; resumed, both rejoin."""
    from tests.broker.cluster import Cluster
    lag = ["--set", "replica_lag_time_max_ms=1000", "--set", "isr_retry_backoff_ms=100"]
    session = ["--set", "broker_session_timeout_ms=30000"]
    with Cluster(tmp_path, brokers=3, broker_args=lag, controller_args=session) as cluster:
        cluster.create_topic("r", 1, 3, **{"min.insync.replicas": "2"})
        wait_isr(cluster, "r", {1, 2, 3})
        leader = cluster.leaders("r")[0][0]
        f1, f2 = [b for b in (1, 2, 3) if b != leader]
        assert produce_all(cluster.bootstrap, "r", b"all three") is None
        cluster.broker(f1).send_signal(signal.SIGSTOP)
        try:
            assert produce_all(cluster.bootstrap, "r", b"moves on", acks="1") is None
            wait_isr(cluster, "r", {leader, f2}, asked=leader)
            assert produce_all(cluster.bootstrap, "r", b"two of three") is None
            cluster.broker(f2).send_signal(signal.SIGSTOP)
            try:
                assert produce_all(cluster.bootstrap, "r", b"moves on", acks="1") is None
                wait_isr(cluster, "r", {leader}, asked=leader)
                assert produce_all(cluster.bootstrap, "r", b"one") == "NOT_ENOUGH_REPLICAS"
            finally:
                cluster.broker(f2).send_signal(signal.SIGCONT)
        finally:
            cluster.broker(f1).send_signal(signal.SIGCONT)
        wait_isr(cluster, "r", {1, 2, 3}, asked=leader)
        b = cluster.broker(leader)
        for joined in (f1, f2):  # adopted from the controller's answer, not only in metadata
            b.wait_line(rf"ISR .* \(left \[\], joined \[{joined}\]\)")
        assert produce_all(cluster.bootstrap, "r", b"all three again") is None
        for left in (f1, f2):  # the leader shrank the ISR, not the controller's session expiry
            assert b.has_line(f"(left [{left}], joined [])"), "\n".join(b.lines[-30:])
