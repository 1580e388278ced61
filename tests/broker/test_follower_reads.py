"""KIP-392 on the broker: which replica a consumer is sent to, and what a follower answers.

Units first: the replica selectors, then the Fetch / ListOffsets / OffsetForLeaderEpoch decisions
(the sync `answer` functions the simulation also calls) on real storage Logs with an app shim of
the simulation's shape (broker_id, replicas, metadata, config). Then real processes: brokers in
racks a, b, c with replica_selector_class=rack-aware, where a confluent-kafka consumer with
`client.rack` reads from the follower in its rack.
"""

from __future__ import annotations

import signal
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from epochlog.broker.config import BrokerConfig
from epochlog.broker.handlers import fetch, list_offsets, offset_for_leader_epoch
from epochlog.broker.metadata_cache import BrokerInfo, Endpoint, MetadataCache, PartitionInfo
from epochlog.broker.partition import Partition, PartitionState
from epochlog.broker.read_path import ReadPath
from epochlog.broker.replica_selector import (
    ClientView,
    LeaderSelector,
    RackAwareSelector,
    ReplicaView,
    preferred_read_replica,
    selector_for,
)
from epochlog.broker.storage import Log, LogConfig
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from epochlog.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from epochlog.protocol.apis.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import build_batch, iter_records

from .cluster import Cluster, free_port

TOPIC = "t"
RACKS = {1: "a", 2: "b", 3: "c"}


# ------------------------------------------------------------------------------ the app shim
class Clock:
    def __init__(self) -> None:
        self.ms = 1_000

    def __call__(self) -> int:
        return self.ms


class Replicas:
    def __init__(self) -> None:
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.poked: list[tuple[str, int]] = []

    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def poke(self, tp: tuple[str, int]) -> None:
        self.poked.append(tp)


@dataclass
class ReadApp:
    """The shape of app the simulation hands the handlers' sync functions."""

    broker_id: int
    config: BrokerConfig
    replicas: Replicas = field(default_factory=Replicas)
    metadata: MetadataCache = field(default_factory=MetadataCache)
    clock: Clock = field(default_factory=Clock)
    read_path: ReadPath | None = None  # made on first use by the fetch handler

    def host(self, tmp_path: Path, index: int = 0) -> Partition:
        log = Log.open(str(tmp_path / f"b{self.broker_id}" / f"{TOPIC}-{index}"), LogConfig(),
                       self.clock, clean_shutdown=True)
        partition = Partition(TOPIC, index, self.broker_id, log, self.clock)
        self.replicas.partitions[(TOPIC, index)] = partition
        return partition


def make_app(broker_id: int, selector: str = "rack-aware", **settings) -> ReadApp:
    config = BrokerConfig(broker_id=broker_id, data_dir="unused", rack=RACKS[broker_id],
                          replica_selector_class=selector, **settings)
    app = ReadApp(broker_id, config)
    app.metadata.brokers = {i: BrokerInfo(i, rack, (Endpoint("EXTERNAL", "127.0.0.1", 9000 + i),))
                            for i, rack in RACKS.items()}
    app.metadata.topics = {TOPIC: {0: PartitionInfo(1, 3, 0, (1, 2, 3), (1, 2, 3), ())}}
    return app


def state(leader: int, epoch: int, isr: tuple[int, ...] = (1, 2, 3)) -> PartitionState:
    return PartitionState(leader, epoch, 0, (1, 2, 3), isr)


def produce(partition: Partition, n: int) -> None:
    for _ in range(n):
        partition.append_as_leader(build_batch([(None, b"v", None, None)]))


def copy_log(source: Partition, target: Partition, end: int) -> None:
    """What a follower fetcher does, in short: the leader's batches below end, as they are."""
    offset = target.log_end_offset
    while offset < end:
        data = source.log.read(offset, 1 << 20, offset_max=end)
        target.log.append_as_follower(data)
        offset = target.log_end_offset


def fetch_request(offset: int, *, replica_id: int = -1, rack: str = "", epoch: int = -1,
                  max_wait_ms: int = 0) -> FetchRequest:
    return FetchRequest(replica_id=replica_id, max_wait_ms=max_wait_ms, rack_id=rack, topics=[
        FetchTopic(topic=TOPIC, partitions=[FetchPartition(
            partition=0, current_leader_epoch=epoch, fetch_offset=offset,
            partition_max_bytes=1 << 20)])])


def only(answer):
    assert answer.error_code == 0, answer
    (topic,) = answer.responses
    (part,) = topic.partitions
    return part


# --------------------------------------------------------------------------------- selectors
def view(broker_id: int, rack: str | None, log_end: int, in_sync: bool = True,
         since_ms: int = 0) -> ReplicaView:
    return ReplicaView(broker_id, rack, log_end, since_ms, in_sync)


def test_leader_selector_always_names_the_leader() -> None:
    leader = view(1, "a", 10)
    assert LeaderSelector().select(ClientView("b"), leader, [leader, view(2, "b", 10)]) is leader


def test_rack_aware_selector_prefers_the_leader_then_the_most_caught_up_in_sync_in_rack() -> None:
    s = RackAwareSelector()
    leader = view(1, "a", 10)
    b_behind, b_ahead = view(2, "b", 8), view(4, "b", 10)
    b_out = view(5, "b", 12, in_sync=False)
    replicas = [leader, b_behind, b_ahead, b_out, view(3, "c", 10)]
    assert s.select(ClientView("a"), leader, replicas) is leader  # the leader is in its rack
    assert s.select(ClientView("b"), leader, replicas) is b_ahead  # out-of-ISR 5 is not offered
    assert s.select(ClientView("d"), leader, replicas) is leader  # nobody in rack d
    assert s.select(ClientView(""), leader, replicas) is leader  # no rack given
    tie = [leader, view(2, "b", 10, since_ms=500), view(4, "b", 10, since_ms=20)]
    assert s.select(ClientView("b"), leader, tie).broker_id == 4  # caught up more recently


def test_selector_names_kafkas_class_names_and_refuses_unknown_ones() -> None:
    assert selector_for("org.apache.kafka.common.replica.RackAwareReplicaSelector").name == \
        "rack-aware"
    assert selector_for("org.apache.kafka.common.replica.LeaderSelector").name == "leader"
    with pytest.raises(ValueError, match="replica_selector_class: unknown selector 'nearest'"):
        selector_for("nearest")
    with pytest.raises(ValueError, match="replica_selector_class"):
        BrokerConfig(broker_id=1, data_dir="d", replica_selector_class="nearest")


def test_preferred_replica_offers_only_live_followers_that_hold_the_offset(tmp_path) -> None:
    app = make_app(1)
    leader = app.host(tmp_path)
    leader.apply(state(1, 3))
    produce(leader, 10)
    leader.update_follower(2, 10)
    leader.update_follower(3, 4)
    racks = {1: "a", 2: "b", 3: "c"}
    pick = RackAwareSelector()
    assert preferred_read_replica(pick, leader, "a", racks, ClientView("b"), 10, 1_000) == 2
    assert preferred_read_replica(pick, leader, "a", racks, ClientView("c"), 4, 1_000) == 3
    # broker 3 holds offsets below 4 only: reading at 6 there could not be answered
    assert preferred_read_replica(pick, leader, "a", racks, ClientView("c"), 6, 1_000) == -1
    del racks[2]  # not live
    assert preferred_read_replica(pick, leader, "a", racks, ClientView("b"), 10, 1_000) == -1
    assert preferred_read_replica(pick, leader, "a", racks, ClientView("a"), 0, 1_000) == -1


# --------------------------------------------------------------------------- on the leader
def leader_with_followers(tmp_path: Path, selector: str = "rack-aware",
                          ) -> tuple[ReadApp, Partition]:
    app = make_app(1, selector)
    leader = app.host(tmp_path)
    leader.apply(state(1, 3))
    produce(leader, 10)
    leader.update_follower(2, 10)
    leader.update_follower(3, 10)
    assert leader.high_watermark == 10
    return app, leader


def test_leader_names_the_follower_in_the_consumers_rack_with_no_records(tmp_path) -> None:
    app, _ = leader_with_followers(tmp_path)
    part = only(fetch.answer(app, fetch_request(0, rack="b"), 11))
    assert (part.error_code, part.preferred_read_replica, part.records) == (0, 2, b"")
    assert (part.high_watermark, part.log_start_offset) == (10, 0)
    assert fetch.read_path(app).preferred_replica_answers_total == 1
    for request, version in ((fetch_request(0, rack="a"), 11),  # the leader is in rack a
                             (fetch_request(0), 11),  # no rack
                             (fetch_request(0, rack="b"), 10)):  # no RackId before v11
        part = only(fetch.answer(app, request, version))
        assert part.preferred_read_replica == -1 and part.records, (request.rack_id, version)


def test_the_leader_selector_never_sends_consumers_away(tmp_path) -> None:
    app, _ = leader_with_followers(tmp_path, selector="leader")
    part = only(fetch.answer(app, fetch_request(0, rack="b"), 12))
    assert part.preferred_read_replica == -1 and part.records


def test_replica_fetches_are_never_sent_elsewhere(tmp_path) -> None:
    app, _ = leader_with_followers(tmp_path)
    part = only(fetch.answer(app, fetch_request(10, replica_id=2, rack="b"), 12))
    assert part.preferred_read_replica == -1 and part.error_code == 0


def test_leader_offsets_between_high_watermark_and_log_end_are_not_available(tmp_path) -> None:
    app, leader = leader_with_followers(tmp_path)
    produce(leader, 5)  # 10..14 not yet replicated: the high watermark stays 10
    part = only(fetch.answer(app, fetch_request(12), 11))
    assert part.error_code == E.OFFSET_NOT_AVAILABLE  # KIP-392 case 1
    part = only(fetch.answer(app, fetch_request(12), 10))
    assert (part.error_code, part.records) == (0, b"")  # before v11: empty, as Kafka
    part = only(fetch.answer(app, fetch_request(16), 11))
    assert part.error_code == E.OFFSET_OUT_OF_RANGE
    assert (part.log_start_offset, part.high_watermark) == (0, 10)


# ------------------------------------------------------------------------- on a follower
@pytest.fixture
def follower(tmp_path: Path) -> tuple[ReadApp, Partition, Partition]:
    """Broker 2 follows broker 1's partition: it holds 0..14, knows the high watermark as 10 and
    the leader's as 12 (it took 0..14 before the leader's high watermark moved past 12)."""
    _, leader = leader_with_followers(tmp_path)
    produce(leader, 10)  # leader: 20 records, high watermark 10
    app = make_app(2)
    part = app.host(tmp_path)
    part.apply(state(1, 3))
    copy_log(leader, part, 15)
    part.log.update_high_watermark(10)
    part.leader_high_watermark = 12
    return app, part, leader


def test_follower_serves_consumers_up_to_its_high_watermark(follower) -> None:
    app, _, _ = follower
    answer = only(fetch.answer(app, fetch_request(0, rack="b", epoch=3), 11))
    assert answer.error_code == 0 and answer.high_watermark == 10
    offsets = last_offsets(answer.records)
    assert offsets and max(offsets) == 9  # nothing at or above the high watermark
    state_ = fetch.read_path(app)
    assert state_.follower_fetches_total == 1 and state_.follower_fetch_bytes_total > 0
    assert only(fetch.answer(app, fetch_request(10), 11)).records == b""  # at the end: wait


def last_offsets(records: bytes) -> list[int]:
    return [r.offset for r in iter_records(records)]


@pytest.mark.parametrize("offset,error", [
    (12, E.OFFSET_NOT_AVAILABLE),  # case 1: held (log end 15), above our high watermark 10
    (15, E.OFFSET_NOT_AVAILABLE),  # case 1 at the log end
    (16, E.OFFSET_OUT_OF_RANGE),  # case 4: beyond the log end and the leader's HW as known (12)
])
def test_follower_out_of_range_cases(follower, offset: int, error: int) -> None:
    app, _, _ = follower
    answer = only(fetch.answer(app, fetch_request(offset), 11))
    assert answer.error_code == error
    assert (answer.log_start_offset, answer.high_watermark) == (0, 10)
    assert answer.records == b""


def test_follower_case_2_committed_but_not_held(tmp_path) -> None:
    _, leader = leader_with_followers(tmp_path)
    app = make_app(3)
    part = app.host(tmp_path)
    part.apply(state(1, 3, isr=(1, 2)))  # out of sync: holds 0..4, told the leader's HW is 10
    copy_log(leader, part, 5)
    part.log.update_high_watermark(10)
    part.leader_high_watermark = 10
    assert part.high_watermark == 5  # capped at its log end
    assert only(fetch.answer(app, fetch_request(8), 11)).error_code == E.OFFSET_NOT_AVAILABLE
    assert only(fetch.answer(app, fetch_request(10), 11)).error_code == E.OFFSET_NOT_AVAILABLE
    assert only(fetch.answer(app, fetch_request(11), 11)).error_code == E.OFFSET_OUT_OF_RANGE


def test_follower_case_3_below_its_log_start(follower) -> None:
    app, part, _ = follower
    part.log.advance_log_start_offset(5)  # its own retention: log starts differ (the seed)
    answer = only(fetch.answer(app, fetch_request(2), 11))
    assert answer.error_code == E.OFFSET_OUT_OF_RANGE
    assert (answer.log_start_offset, answer.high_watermark) == (5, 10)


def test_follower_refuses_what_only_a_leader_answers(follower) -> None:
    app, _, _ = follower
    assert only(fetch.answer(app, fetch_request(0), 10)).error_code == E.NOT_LEADER_OR_FOLLOWER
    replica = only(fetch.answer(app, fetch_request(0, replica_id=3), 12))
    assert replica.error_code == E.NOT_LEADER_OR_FOLLOWER
    oe = offset_for_leader_epoch.answer(app, epoch_request(3), 4).topics[0].partitions[0]
    assert oe.error_code == E.NOT_LEADER_OR_FOLLOWER
    lo = list_offsets.answer(app, offsets_request(-1, replica_id=-1), 7).topics[0].partitions[0]
    assert lo.error_code == E.NOT_LEADER_OR_FOLLOWER


def test_follower_answers_list_offsets_for_kip_392s_sentinel_from_its_own_log(follower) -> None:
    app, part, _ = follower
    part.log.advance_log_start_offset(3)
    earliest = list_offsets.answer(app, offsets_request(-2, replica_id=-2), 7)
    latest = list_offsets.answer(app, offsets_request(-1, replica_id=-2), 7)
    assert earliest.topics[0].partitions[0].offset == 3  # its own log start
    assert latest.topics[0].partitions[0].offset == 10  # its high watermark, not its log end


# ---------------------------------------------------------------- high watermark not known yet
def new_leader(tmp_path: Path) -> tuple[ReadApp, Partition]:
    """Broker 2 was a follower holding 0..14 with high watermark 10, and is elected at epoch 4:
    its epoch starts at 15, so until its followers reach 15 its high watermark is not the true
    one (KIP-207)."""
    app = make_app(2)
    _, old = leader_with_followers(tmp_path)
    produce(old, 5)
    part = app.host(tmp_path)
    part.apply(state(1, 3))
    copy_log(old, part, 15)
    part.log.epoch_cache.assign(3, 0)
    part.log.update_high_watermark(10)
    part.apply(state(2, 4, isr=(2, 3)))
    assert part.is_leader and part.high_watermark == 10
    return app, part


def epoch_request(epoch: int, current: int = -1, replica_id: int = -1
                  ) -> OffsetForLeaderEpochRequest:
    return OffsetForLeaderEpochRequest(replica_id=replica_id, topics=[OffsetForLeaderTopic(
        topic=TOPIC, partitions=[OffsetForLeaderPartition(
            partition=0, current_leader_epoch=current, leader_epoch=epoch)])])


def offsets_request(timestamp: int, replica_id: int = -1, current: int = -1
                    ) -> ListOffsetsRequest:
    return ListOffsetsRequest(replica_id=replica_id, topics=[ListOffsetsTopic(
        name=TOPIC, partitions=[ListOffsetsPartition(
            partition_index=0, current_leader_epoch=current, timestamp=timestamp)])])


def test_offset_for_leader_epoch_waits_for_a_new_leaders_high_watermark(tmp_path) -> None:
    app, part = new_leader(tmp_path)
    one = offset_for_leader_epoch.answer(app, epoch_request(4), 4).topics[0].partitions[0]
    assert one.error_code == E.OFFSET_NOT_AVAILABLE
    older = offset_for_leader_epoch.answer(app, epoch_request(3), 4).topics[0].partitions[0]
    assert older.error_code == E.OFFSET_NOT_AVAILABLE  # epoch 3 ends at 15, above the HW too
    replica = offset_for_leader_epoch.answer(app, epoch_request(3, replica_id=3), 4)
    assert (replica.topics[0].partitions[0].leader_epoch,
            replica.topics[0].partitions[0].end_offset) == (3, 15)  # replicas: not capped
    part.update_follower(3, 15)  # the ISR reached the epoch's start: the HW is known
    produce(part, 2)
    one = offset_for_leader_epoch.answer(app, epoch_request(4), 4).topics[0].partitions[0]
    assert (one.error_code, one.leader_epoch, one.end_offset) == (0, 4, 15)  # capped at the HW


def test_list_offsets_latest_waits_for_a_new_leaders_high_watermark(tmp_path) -> None:
    app, part = new_leader(tmp_path)
    latest = list_offsets.answer(app, offsets_request(-1), 7).topics[0].partitions[0]
    assert latest.error_code == E.OFFSET_NOT_AVAILABLE
    earliest = list_offsets.answer(app, offsets_request(-2), 7).topics[0].partitions[0]
    assert (earliest.error_code, earliest.offset) == (0, 0)
    part.update_follower(3, 15)
    latest = list_offsets.answer(app, offsets_request(-1), 7).topics[0].partitions[0]
    assert (latest.error_code, latest.offset, latest.leader_epoch) == (0, 15, 4)


# ------------------------------------------------------------ high watermark propagation
def test_a_follower_not_told_the_high_watermark_is_answered_at_once(tmp_path) -> None:
    app, leader = leader_with_followers(tmp_path)
    request = fetch_request(10, replica_id=2, max_wait_ms=500)
    plan = fetch.begin(app, request, 12)
    assert fetch.read(app, plan).answer_now  # never told any high watermark
    fetch.finish(app, plan, fetch.read(app, plan))
    plan = fetch.begin(app, request, 12)
    assert not fetch.read(app, plan).answer_now  # told 10: nothing new, it may wait
    produce(leader, 1)
    fetch.answer(app, fetch_request(11, replica_id=3), 12)
    assert leader.high_watermark == 10  # broker 2 has not fetched 10 yet
    plan = fetch.begin(app, fetch_request(11, replica_id=2, max_wait_ms=500), 12)
    assert leader.high_watermark == 11
    assert fetch.read(app, plan).answer_now  # its own fetch moved the HW: tell it at once
    assert fetch.positions(app, plan)[0][3] == 11  # a waiting replica fetch watches the HW


# --------------------------------------------------------------------------- real processes
COMMITTED, UNCOMMITTED = 300, 50
NEAR = "near"


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.split(" ")[0] in (name, name + "_total"):
            return float(line.split()[-1])
    raise AssertionError(f"no metric {name}")


@dataclass
class Racked:
    cluster: Cluster
    metrics: dict[int, int]  # broker id -> its metrics port
    leader: int
    epoch: int
    near: int  # the follower in the consumer's rack
    paused: int  # the third replica, SIGSTOPped so that the high watermark stays put


def _fetch_at(c: Cluster, broker_id: int, offset: int):
    answer = c.broker(broker_id).call(ApiKey.FETCH, FetchRequest(max_wait_ms=0, topics=[FetchTopic(
        topic=NEAR, partitions=[FetchPartition(partition=0, fetch_offset=offset,
                                               partition_max_bytes=1 << 20)])]), 12)
    return answer.responses[0].partitions[0]


@pytest.fixture(scope="module")
def racked(tmp_path_factory: pytest.TempPathFactory):
    """Brokers 1, 2, 3 in racks a, b, c, rack-aware; NEAR (RF 3) holds COMMITTED records below
    the high watermark and UNCOMMITTED more above it on the leader and the near follower, because
    the third replica is paused (sessions and ISR lag long enough that it stays in the ISR)."""
    from confluent_kafka import Producer
    c = Cluster(tmp_path_factory.mktemp("follower-reads"), brokers=3,
                controller_args=["--set", "broker_session_timeout_ms=120000"],
                broker_args=["--set", "replica_selector_class=rack-aware",
                             "--set", "replica_lag_time_max_ms=120000"])
    metrics = {i: free_port() for i in c.brokers}
    for i, b in c.brokers.items():
        b.extra += ["--set", f"metrics_listen=127.0.0.1:{metrics[i]}"]
    with c:
        c.create_topic(NEAR, partitions=1, replication_factor=3)
        (leader, epoch), = c.wait_leaders(NEAR, 1).values()
        near, paused = [i for i in c.brokers if i != leader]
        producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
        for i in range(COMMITTED):
            producer.produce(NEAR, value=b"%d" % i, partition=0)
        assert producer.flush(30) == 0
        c.broker(paused).send_signal(signal.SIGSTOP)
        try:
            producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "1"})
            for i in range(UNCOMMITTED):
                producer.produce(NEAR, value=b"u%d" % i, partition=0)
            assert producer.flush(30) == 0
            end = COMMITTED + UNCOMMITTED
            # the near follower holds everything once its log end is `end`: a fetch there at
            # `end` is then case 1 (held, not committed) rather than case 4 (out of range)
            Cluster._poll(lambda: _fetch_at(c, near, end).error_code == E.OFFSET_NOT_AVAILABLE,
                          f"broker {near} to replicate up to {end}")
            yield Racked(c, metrics, leader, epoch, near, paused)
        finally:
            c.broker(paused).send_signal(signal.SIGCONT)
        # let the resumed replica catch up before the cluster stops (a stop while it is still
        # sorting out its backlog is slower than the fixture's stop wait)
        Cluster._poll(lambda: _fetch_at(c, paused, end).error_code in (0, E.OFFSET_NOT_AVAILABLE),
                      f"broker {paused} to catch up after SIGCONT")


def test_follower_answers_the_seeds_cases_1_and_4(racked: Racked) -> None:
    c, near = racked.cluster, racked.near
    end = COMMITTED + UNCOMMITTED
    for offset in (COMMITTED + 1, end - 1, end):  # held here, not known committed
        part = _fetch_at(c, near, offset)
        assert part.error_code == E.OFFSET_NOT_AVAILABLE, offset
        assert part.records == b""
    beyond = _fetch_at(c, near, end + 1)  # neither held nor known committed
    assert beyond.error_code == E.OFFSET_OUT_OF_RANGE
    assert (beyond.log_start_offset, beyond.high_watermark) == (0, COMMITTED)
    committed = _fetch_at(c, near, 0)
    assert committed.error_code == 0 and committed.high_watermark == COMMITTED
    assert max(last_offsets(committed.records)) < COMMITTED


def test_leader_caps_a_consumers_end_offset_at_the_high_watermark(racked: Racked) -> None:
    c = racked.cluster
    for replica_id, expected in ((-1, COMMITTED), (racked.near, COMMITTED + UNCOMMITTED)):
        answer = c.broker(racked.leader).call(
            ApiKey.OFFSET_FOR_LEADER_EPOCH, OffsetForLeaderEpochRequest(
                replica_id=replica_id, topics=[OffsetForLeaderTopic(topic=NEAR, partitions=[
                    OffsetForLeaderPartition(partition=0, leader_epoch=racked.epoch)])]), 4)
        part = answer.topics[0].partitions[0]
        assert (part.error_code, part.end_offset) == (0, expected), replica_id


def test_confluent_consumer_reads_committed_data_from_the_follower_in_its_rack(
        racked: Racked) -> None:
    from confluent_kafka import Consumer, TopicPartition
    c, near, leader = racked.cluster, racked.near, racked.leader
    served_before = _metric(racked.metrics[near], "epochlog_broker_follower_fetch_bytes")
    sent_before = _metric(racked.metrics[leader], "epochlog_broker_preferred_replica_answers")
    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "near",
                         "client.rack": RACKS[near], "enable.auto.commit": False,
                         "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(NEAR, 0, 0)])
    seen: dict[int, bytes] = {}
    try:
        for _ in range(600):  # bounded: each poll waits at most 0.5 s
            for m in consumer.consume(500, timeout=0.5):
                assert m.error() is None, m.error()
                assert m.offset() < COMMITTED, f"uncommitted offset {m.offset()} was served"
                seen[m.offset()] = m.value()
            if len(seen) >= COMMITTED:
                break
        for m in consumer.consume(500, timeout=1.0):  # nothing beyond the high watermark
            assert m.error() is None and m.offset() < COMMITTED, m.offset()
    finally:
        consumer.close()
    assert [seen[i] for i in range(COMMITTED)] == [b"%d" % i for i in range(COMMITTED)]
    assert _metric(racked.metrics[leader], "epochlog_broker_preferred_replica_answers") > \
        sent_before  # the leader sent it to its rack's follower
    assert _metric(racked.metrics[near], "epochlog_broker_follower_fetch_bytes") > \
        served_before  # which served the records
    assert _metric(racked.metrics[leader], "epochlog_broker_follower_fetch_bytes") == 0
