"""The follower's state machine (broker/follower.py) against a real leader, in one process.

Each replica is a real storage `Log` in its own folder with a `Partition` on it. The follower's
requests are encoded and decoded at the highest versions (Fetch v12, OffsetForLeaderEpoch v4) and
answered by the broker's own handler decisions (`handlers.fetch.answer`,
`handlers.offset_for_leader_epoch.answer`) on the leader's replica, so every answer here is the
one a real leader gives. The seeds' cases: KIP-101's scenarios 1 and 2 (a follower truncates by
epoch, never to its high watermark), KIP-279's rounds, KIP-320's diverging epoch and fencing, and
Kafka's out-of-range rules on both sides of the leader's log.
"""

from __future__ import annotations

import errno
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from epochlog.broker.config import BrokerConfig
from epochlog.broker.follower import (
    FETCH,
    OFFSET_FOR_LEADER_EPOCH,
    RETRY_FIRST_MS,
    FollowState,
    SourceFetcher,
    truncation_point,
)
from epochlog.broker.handlers import fetch as fetch_handler
from epochlog.broker.handlers import offset_for_leader_epoch as epoch_handler
from epochlog.broker.metadata_cache import MetadataCache
from epochlog.broker.partition import Partition, PartitionState
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.registry import APIS
from tests.storage.helpers import SMALL, FakeClock, make_batch, open_log

TOPIC = "t"
LEADER, FOLLOWER = 1, 2
HANDLERS = {FETCH: fetch_handler.answer, OFFSET_FOR_LEADER_EPOCH: epoch_handler.answer}


class Replica:
    """One broker's replica of t-0, and the small app the real handlers answer from."""

    def __init__(self, base: Path, broker_id: int, clock: FakeClock,
                 high_watermark: int = 0) -> None:
        self.base = base
        self.broker_id = broker_id
        self.clock = clock
        self.log = open_log(base / f"broker-{broker_id}" / f"{TOPIC}-0", SMALL, clock,
                            high_watermark=high_watermark)
        self.partition = Partition(TOPIC, 0, broker_id, self.log, clock)
        self.partition_epoch = 0
        self.app = SimpleNamespace(broker_id=broker_id, replicas=self, metadata=MetadataCache(),
                                   read_path=None,
                                   config=BrokerConfig(broker_id=broker_id, data_dir=str(base)))

    # what the handlers use of a ReplicaManager
    def get(self, topic: str, index: int) -> Partition | None:
        return self.partition if (topic, index) == (TOPIC, 0) else None

    def poke(self, tp: tuple[str, int]) -> None:
        pass

    def write(self, epoch: int, batches: int = 1, **kwargs: Any) -> None:
        """Set-up of a history: batches of one record each, written as leader at epoch."""
        for _ in range(batches):
            self.log.append_as_leader(make_batch(1, tag=self.log.log_end_offset, **kwargs),
                                      epoch)

    def become(self, leader: int, epoch: int) -> None:
        """Apply a LeaderAndIsr: replicas 1 and 2, both in the ISR."""
        self.partition_epoch += 1
        applied = self.partition.apply(PartitionState(leader, epoch, self.partition_epoch,
                                                      (LEADER, FOLLOWER), (LEADER, FOLLOWER)))
        assert applied

    def reopen(self, high_watermark: int) -> None:
        """A restart: the log opened again from its folder (a crash: recovery runs)."""
        self.log.close()
        self.__init__(self.base, self.broker_id, self.clock, high_watermark)  # type: ignore

    def batches(self) -> list[tuple[int, int, int, bytes]]:
        """(base offset, last offset, leader epoch, bytes) of every batch from the log start."""
        out, offset = [], self.log.log_start_offset
        while offset < self.log.log_end_offset:
            data = self.log.read(offset, 1)
            header = _header(data)
            out.append((header.base_offset, header.last_offset, header.partition_leader_epoch,
                        data[:header.size]))
            offset = header.last_offset + 1
        return out


def _header(data: bytes) -> Any:
    from epochlog.protocol.batch import read_header
    return read_header(data)


def new_fetcher(clock: FakeClock, **limits: int) -> SourceFetcher:
    settings = {"fetch_max_bytes": 1 << 20, "partition_max_bytes": 1 << 20, "max_wait_ms": 0,
                "backoff_ms": 1000}
    settings.update(limits)
    return SourceFetcher(FOLLOWER, LEADER, clock, **settings)


def exchange(fetcher: SourceFetcher, leader: Replica) -> tuple[int, Any, list[Any]] | None:
    """One request through the wire format to the leader's handler and back:
    (api key, the answer, partitions changed), or None when nothing is to be sent."""
    request = fetcher.next_request()
    if request is None:
        return None
    key, message = request
    api = APIS[key]
    version = api.max_version
    message = api.decode_request(api.encode_request(message, version), version)
    answer = HANDLERS[key](leader.app, message, version)
    answer = api.decode_response(api.encode_response(answer, version), version)
    return key, answer, fetcher.on_response(key, answer)


def sync(fetcher: SourceFetcher, leader: Replica, rounds_max: int = 30) -> list[int]:
    """Exchange until a Fetch changes nothing (caught up, high watermark known); the keys sent."""
    keys = []
    for _ in range(rounds_max):
        step = exchange(fetcher, leader)
        assert step is not None, "the fetcher stopped asking before it caught up"
        key, _, changed = step
        keys.append(key)
        if key == FETCH and not changed:
            return keys
    raise AssertionError(f"not caught up after {rounds_max} requests: {keys}")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def pair(tmp_path: Path, clock: FakeClock) -> tuple[Replica, Replica]:
    return Replica(tmp_path, LEADER, clock), Replica(tmp_path, FOLLOWER, clock)


def follow(follower: Replica, epoch: int, fetcher: SourceFetcher) -> None:
    follower.become(LEADER, epoch)
    fetcher.add(follower.partition)


def test_an_empty_follower_copies_batches_epochs_and_producer_state(pair, clock) -> None:
    leader, follower = pair
    for sequence in range(3):
        leader.write(0, producer_id=7, producer_epoch=0, base_sequence=sequence)
    leader.log.append_as_leader(make_batch(2, producer_id=7, producer_epoch=0, base_sequence=3),
                                2)
    leader.write(2, 4)
    leader.become(LEADER, 3)
    leader.write(3, 1, producer_id=8, producer_epoch=1, base_sequence=0)
    fetcher = new_fetcher(clock, partition_max_bytes=200, fetch_max_bytes=400)
    follow(follower, 3, fetcher)

    keys = sync(fetcher, leader)

    assert keys[0] == FETCH  # no epochs and an empty log: nothing to ask
    assert len(keys) > 3  # the byte limits split the copy into several fetches
    assert follower.batches() == leader.batches()
    assert follower.log.epoch_cache.entries == leader.log.epoch_cache.entries
    assert follower.log.producer_state.producers == leader.log.producer_state.producers
    assert leader.partition.high_watermark == leader.log.log_end_offset  # the follower's
    # fetches moved the leader's high watermark, and the follower learnt it
    assert follower.partition.high_watermark == leader.partition.high_watermark
    assert fetcher.stats.records_appended == leader.log.log_end_offset
    assert fetcher.state_of(TOPIC, 0) is FollowState.FETCHING


def test_kip101_scenario_1_a_restarted_follower_keeps_what_its_high_watermark_does_not_cover(
        pair, clock) -> None:
    """B leads; A fetched m2 but has not yet learnt that it is committed (A's high watermark 1).
    A restarts. Truncating to its high watermark would lose m2 if B then failed; by epoch, A
    keeps it, and as the next leader A still holds m2."""
    b, a = pair
    b.write(0, 2)
    b.become(LEADER, 0)
    fetcher = new_fetcher(clock)
    follow(a, 0, fetcher)
    sync(fetcher, b)
    b.log.update_high_watermark(2)
    a.log.update_high_watermark(1)

    a.reopen(high_watermark=1)
    fetcher = new_fetcher(clock)
    follow(a, 0, fetcher)
    key, answer, _ = exchange(fetcher, b)

    assert key == OFFSET_FOR_LEADER_EPOCH
    assert (answer.topics[0].partitions[0].leader_epoch,
            answer.topics[0].partitions[0].end_offset) == (0, 2)
    assert a.log.log_end_offset == 2 and fetcher.stats.truncations == 0
    assert fetcher.state_of(TOPIC, 0) is FollowState.FETCHING
    # B fails, A leads: m2 is there
    a.become(FOLLOWER, 1)
    assert a.partition.is_leader and a.log.log_end_offset == 2


def test_kip101_scenario_2_a_divergent_tail_is_cut_by_epoch_not_by_high_watermark(
        pair, clock) -> None:
    """A holds m1, m2 (epoch 0), B only m1; both fail hard. B returns and leads at epoch 1,
    taking m3 at offset 1. A follows: its m2 (offset 1, epoch 0) is cut exactly (to 1, not to its
    high watermark 0), and it then holds B's log, m3 at offset 1 with epoch 1."""
    b, a = pair
    a.write(0, 2)
    b.write(0, 1)
    a.reopen(high_watermark=0)
    b.reopen(high_watermark=0)
    b.become(LEADER, 1)
    b.write(1, 1)
    fetcher = new_fetcher(clock)
    follow(a, 1, fetcher)

    key, answer, changed = exchange(fetcher, b)

    assert key == OFFSET_FOR_LEADER_EPOCH
    assert (answer.topics[0].partitions[0].leader_epoch,
            answer.topics[0].partitions[0].end_offset) == (0, 1)
    assert a.log.log_end_offset == 1 and changed == [(TOPIC, 0)]
    sync(fetcher, b)
    assert a.batches() == b.batches()
    assert [epoch for _, _, epoch, _ in a.batches()] == [0, 1]
    assert a.log.epoch_cache.entries == b.log.epoch_cache.entries


def test_kip279_rounds_until_the_epochs_agree(pair, clock) -> None:
    """Leader epochs 0@0, 2@3, 4@6; follower 0@0, 1@2, 3@4 (it led epochs 1 and 3 alone).
    Asked for 3, the leader names epoch 2, which the follower never saw: it drops its epochs
    above 1 (to 4) and asks for 1; the leader names 0 ending at 3, the follower's 0 ends at 2:
    truncation ends at 2. Then the follower copies the leader from there."""
    leader, follower = pair
    leader.write(0, 3)
    leader.write(2, 3)
    leader.write(4, 2)
    follower.write(0, 2)
    follower.write(1, 2)
    follower.write(3, 3)
    leader.become(LEADER, 4)
    fetcher = new_fetcher(clock)
    follow(follower, 4, fetcher)

    rounds = []
    while True:
        key, message = fetcher.next_request()
        fetcher._in_flight = None  # peeked only; the exchange below sends it again
        if key != OFFSET_FOR_LEADER_EPOCH:
            break
        asked = message.topics[0].partitions[0].leader_epoch
        exchange(fetcher, leader)
        rounds.append((asked, follower.log.log_end_offset))

    assert rounds == [(3, 4), (1, 2)]
    assert fetcher.stats.truncations == 2
    sync(fetcher, leader)
    assert follower.batches() == leader.batches()
    assert follower.log.epoch_cache.entries == leader.log.epoch_cache.entries


@pytest.mark.parametrize("leader_epoch, leader_end, expected", [
    (-1, -1, (1, True)),  # undefined: the high watermark (KIP-101's fallback)
    (3, 9, (7, True)),  # our latest epoch: the smaller log end
    (3, 5, (5, True)),  # the leader's epoch 3 ended earlier
    (2, 9, (4, False)),  # an epoch we never had: drop ours above 1 and ask again
    (1, 3, (3, True)),  # our epoch 1 ends at 4, the leader's at 3
    (0, 9, (2, True)),  # the leader's 0 ends later than ours (2): ours wins
])
def test_truncation_point(tmp_path: Path, clock: FakeClock, leader_epoch: int, leader_end: int,
                          expected: tuple[int, bool]) -> None:
    r = Replica(tmp_path, FOLLOWER, clock, high_watermark=1)
    r.write(0, 2)
    r.write(1, 2)
    r.write(3, 3)  # epochs 0@0, 1@2, 3@4, log end 7
    r.log.update_high_watermark(1)
    offset, done, why = truncation_point(r.log, leader_epoch, leader_end)
    assert (offset, done) == expected, why


def test_a_diverging_epoch_in_a_fetch_answer_truncates_and_fetching_goes_on(pair, clock) -> None:
    """KIP-320's safety net: a tail the leader does not have appears after the epoch check (a
    batch written at epoch 1 here); the leader's Fetch answer names the divergence and the
    follower cuts exactly there, then copies the leader."""
    leader, follower = pair
    leader.write(0, 2)
    leader.write(2, 2)
    follower.write(0, 2)
    leader.become(LEADER, 2)
    fetcher = new_fetcher(clock)
    follow(follower, 2, fetcher)
    key, _, _ = exchange(fetcher, leader)
    assert key == OFFSET_FOR_LEADER_EPOCH and follower.log.log_end_offset == 2
    follower.log.append_as_leader(make_batch(1, tag=99), 1)  # the divergent tail

    key, answer, changed = exchange(fetcher, leader)

    part = answer.responses[0].partitions[0]
    assert key == FETCH and (part.diverging_epoch.epoch, part.diverging_epoch.end_offset) == (0, 2)
    assert follower.log.log_end_offset == 2 and changed == [(TOPIC, 0)]
    assert fetcher.state_of(TOPIC, 0) is FollowState.FETCHING
    sync(fetcher, leader)
    assert follower.batches() == leader.batches()


def test_out_of_range_below_the_leaders_log_start_starts_again_there(pair, clock) -> None:
    leader, follower = pair
    leader.write(0, 10)
    follower.write(0, 3)
    leader.become(LEADER, 0)
    leader.log.update_high_watermark(10)
    assert leader.log.advance_log_start_offset(6)
    fetcher = new_fetcher(clock)
    follow(follower, 0, fetcher)

    keys = sync(fetcher, leader)

    assert keys[:2] == [OFFSET_FOR_LEADER_EPOCH, FETCH]
    assert follower.log.log_start_offset == 6
    assert follower.batches() == leader.batches()
    assert fetcher.stats.errors["OFFSET_OUT_OF_RANGE"] == 1


def test_out_of_range_above_the_leaders_end_asks_for_it_and_truncates(pair, clock) -> None:
    leader, follower = pair
    leader.write(0, 10)
    leader.become(LEADER, 0)
    follower.log.truncate_fully_and_start_at(20)  # an empty log that starts past the leader's
    fetcher = new_fetcher(clock)
    follow(follower, 0, fetcher)

    key, answer, _ = exchange(fetcher, leader)
    assert key == FETCH and (answer.responses[0].partitions[0].error_code
                             == ErrorCode.OFFSET_OUT_OF_RANGE)
    assert fetcher.state_of(TOPIC, 0) is FollowState.TRUNCATING
    assert fetcher.next_request() is None  # backing off: a repeat must not spin
    clock.advance(RETRY_FIRST_MS)
    key, answer, _ = exchange(fetcher, leader)

    assert key == OFFSET_FOR_LEADER_EPOCH
    assert answer.topics[0].partitions[0].end_offset == 10  # the leader's log end
    assert follower.log.log_end_offset == 10
    leader.write(0, 1)
    sync(fetcher, leader)
    assert follower.batches() == leader.batches()[-1:]


def test_fenced_stops_until_a_newer_leader_and_isr(pair, clock) -> None:
    leader, follower = pair
    leader.write(0, 2)
    leader.become(LEADER, 5)
    follower.write(0, 1)
    fetcher = new_fetcher(clock)
    follow(follower, 4, fetcher)  # our LeaderAndIsr is older than the leader's

    _, answer, changed = exchange(fetcher, leader)

    assert answer.topics[0].partitions[0].error_code == ErrorCode.FENCED_LEADER_EPOCH
    assert fetcher.state_of(TOPIC, 0) is FollowState.FENCED and not changed
    clock.advance(60_000)
    assert fetcher.next_request() is None and fetcher.next_wakeup_ms() is None
    follow(follower, 5, fetcher)
    sync(fetcher, leader)
    assert follower.batches() == leader.batches()


def test_unknown_leader_epoch_backs_off_and_retries(pair, clock) -> None:
    leader, follower = pair
    leader.write(0, 2)
    leader.become(LEADER, 5)
    fetcher = new_fetcher(clock, backoff_ms=400)
    follow(follower, 6, fetcher)  # the leader has not heard of epoch 6 yet

    delays = []
    for _ in range(5):
        _, answer, _ = exchange(fetcher, leader)
        assert answer.responses[0].partitions[0].error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        assert fetcher.next_request() is None
        wake = fetcher.next_wakeup_ms()
        delays.append(wake - clock())
        clock.advance(wake - clock())
    assert delays == [50, 100, 200, 400, 400]  # faster first retries, capped by backoff_ms

    leader.become(LEADER, 6)
    sync(fetcher, leader)
    assert follower.batches() == leader.batches()


def test_answers_to_older_requests_and_other_roles_are_not_applied(pair, clock) -> None:
    leader, follower = pair
    leader.write(0, 3)
    leader.become(LEADER, 1)
    fetcher = new_fetcher(clock)
    follow(follower, 1, fetcher)
    key, message = fetcher.next_request()
    answer = HANDLERS[key](leader.app, message, APIS[key].max_version)
    follow(follower, 2, fetcher)  # re-added (a newer LeaderAndIsr) while the Fetch was out
    assert fetcher.on_response(key, answer) == [] and follower.log.log_end_offset == 0

    leader.become(LEADER, 2)
    key, message = fetcher.next_request()
    answer = HANDLERS[key](leader.app, message, APIS[key].max_version)
    follower.become(FOLLOWER, 3)  # we lead now; the driver has not removed it yet
    assert fetcher.on_response(key, answer) == [] and follower.log.log_end_offset == 0
    assert fetcher.next_request() is None
    fetcher.remove(TOPIC, 0)
    assert len(fetcher) == 0


def test_a_lost_connection_backs_every_partition_off(pair, clock) -> None:
    leader, follower = pair
    leader.write(0, 1)
    leader.become(LEADER, 0)
    fetcher = new_fetcher(clock)
    follow(follower, 0, fetcher)
    assert fetcher.next_request() is not None
    assert fetcher.next_request() is None  # one request at a time
    fetcher.on_failure("connection reset")
    assert fetcher.next_request() is None
    clock.advance(RETRY_FIRST_MS)
    sync(fetcher, leader)
    assert follower.batches() == leader.batches()


# ------------------------------------------------------------------ the asyncio driver's routing
async def test_the_manager_moves_partitions_between_source_fetchers(pair, clock) -> None:
    """fetcher.ReplicaFetcherManager as ReplicaManager's listener: a follower goes to its
    leader's fetcher, an ISR change under the same epoch keeps it there, a new leader moves it,
    leading removes it, and a fetcher left with nothing ends its task. (No leader is reachable
    here: resolve finds none, so the tasks only back off.)"""
    import asyncio

    from epochlog.broker.fetcher import FetcherSettings, ReplicaFetcherManager
    from epochlog.broker.metrics import _fetcher_metrics

    _, follower = pair
    manager = ReplicaFetcherManager(
        FOLLOWER, clock, FetcherSettings(fetch_max_bytes=1 << 20, partition_max_bytes=1 << 20,
                                         max_wait_ms=100, backoff_ms=100),
        resolve=lambda broker_id: None, poke=lambda tp: None)
    p = follower.partition

    def apply(leader: int, epoch: int) -> None:
        follower.partition_epoch += 1
        assert p.apply(PartitionState(leader, epoch, follower.partition_epoch, (1, 2, 3),
                                      (1, 2, 3)))
        manager.on_partition(TOPIC, 0, p)

    apply(LEADER, 1)
    first = manager.sources[LEADER]
    assert manager.following == {(TOPIC, 0): (LEADER, 1)}
    generation = first.fetcher._followed[(TOPIC, 0)].generation
    apply(LEADER, 1)  # an ISR change: same leader epoch
    assert first.fetcher._followed[(TOPIC, 0)].generation == generation

    apply(3, 2)  # a new leader
    await asyncio.wait_for(first.task, 5)  # its last partition left: the task ended
    assert set(manager.sources) == {3} and manager.following == {(TOPIC, 0): (3, 2)}
    second = manager.sources[3]
    await asyncio.sleep(0.05)
    assert manager.stats.errors["NETWORK_EXCEPTION"] >= 1  # broker 3 is not in the metadata

    apply(FOLLOWER, 3)  # we lead now
    await asyncio.wait_for(second.task, 5)
    assert manager.sources == {} and manager.following == {}
    names = {m.name for m in _fetcher_metrics(manager)}
    assert {"epochlog_broker_replica_fetch_records_appended", "epochlog_broker_replica_max_lag",
            "epochlog_broker_replica_truncations", "epochlog_broker_replica_fetch_errors"} <= names
    await manager.close()


def test_a_truncation_without_a_descriptor_backs_off_that_partition_and_is_done_later(
        pair, clock, monkeypatch: pytest.MonkeyPatch) -> None:
    """Running out of descriptors while cutting a divergent tail is no failure of the fetcher
    (whose task would stop the broker): the partition backs off, asks for the epochs again and
    is cut then (issue 33)."""
    leader, follower = pair
    leader.write(0, 2)
    leader.write(2, 2)
    follower.write(0, 2)
    leader.become(LEADER, 2)
    fetcher = new_fetcher(clock)
    follow(follower, 2, fetcher)
    exchange(fetcher, leader)
    follower.log.append_as_leader(make_batch(1, tag=99), 1)  # the divergent tail
    cut = follower.log._truncate_to
    failures = []

    def no_descriptor(offset: int, why: str) -> None:
        if not failures:
            failures.append(offset)
            raise OSError(errno.EMFILE, "Too many open files")
        cut(offset, why)

    monkeypatch.setattr(follower.log, "_truncate_to", no_descriptor)
    key, _, _ = exchange(fetcher, leader)  # the answer names the divergence; the cut fails

    assert key == FETCH and failures == [2]
    assert follower.log.log_end_offset == 3  # not cut yet
    assert fetcher.state_of(TOPIC, 0) is FollowState.TRUNCATING
    assert fetcher.stats.errors["KAFKA_STORAGE_ERROR"] == 1
    assert fetcher.next_request() is None  # backing off
    clock.advance(fetcher.next_wakeup_ms() - clock())
    sync(fetcher, leader)
    assert follower.batches() == leader.batches()


# --------------------------------------------------------------- incremental fetch sessions
def named(message: Any) -> list[int]:
    return [p.partition for t in message.topics for p in t.partitions]


def test_a_caught_up_follower_names_no_partition_and_the_leader_lists_none(pair, clock) -> None:
    """KIP-227, as Kafka's replica fetcher: after the full fetch that opens the session, an idle
    fetch names no partition and its answer lists none; new records reach the follower through
    the session; a session the leader lost costs one full fetch, and no partition backs off."""
    leader, follower = pair
    leader.become(LEADER, 0)
    leader.write(0, 2)
    fetcher = new_fetcher(clock)
    follow(follower, 0, fetcher)
    sync(fetcher, leader)
    assert fetcher.session.session_id != 0

    _, request = fetcher.next_request()  # type: ignore[misc]
    assert request.session_epoch > 0 and named(request) == []
    key, answer, changed = exchange_sent(fetcher, leader, request)
    assert answer.responses == [] and changed == []
    assert fetcher.state_of(TOPIC, 0) is FollowState.FETCHING

    leader.write(0, 1)
    sync(fetcher, leader)
    assert follower.batches() == leader.batches()

    leader.app.read_path = None  # the leader forgets its sessions (as after a restart)
    _, request = fetcher.next_request()  # type: ignore[misc]
    _, answer, _ = exchange_sent(fetcher, leader, request)
    assert answer.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND
    assert fetcher.session.reset_total == 1
    _, request = fetcher.next_request()  # type: ignore[misc]  # at once: no back-off
    assert request.session_epoch == 0 and named(request) == [0]
    exchange_sent(fetcher, leader, request)
    assert fetcher.session.session_id != 0 and fetcher.session.epoch == 1


def exchange_sent(fetcher: SourceFetcher, leader: Replica, message: Any
                  ) -> tuple[int, Any, list[Any]]:
    """`exchange` for a Fetch the test already took from next_request."""
    api = APIS[FETCH]
    version = api.max_version
    message = api.decode_request(api.encode_request(message, version), version)
    answer = HANDLERS[FETCH](leader.app, message, version)
    answer = api.decode_response(api.encode_response(answer, version), version)
    return FETCH, answer, fetcher.on_response(FETCH, answer)


def test_after_a_restart_epochs_are_asked_a_bounded_number_of_partitions_at_a_time(
        tmp_path, clock) -> None:
    """Applying an OffsetForLeaderEpoch answer may rewrite each partition's epoch checkpoint
    (fsyncs on the event loop): one request naming thousands held a restarted broker's loop
    past its session timeout. At most EPOCH_REQUEST_PARTITIONS_MAX per request; the others
    follow in the next requests."""
    from epochlog.broker.follower import EPOCH_REQUEST_PARTITIONS_MAX
    count = EPOCH_REQUEST_PARTITIONS_MAX + 30
    fetcher = new_fetcher(clock)
    for index in range(count):
        plog = open_log(tmp_path / f"{TOPIC}-{index}", SMALL, clock)
        plog.append_as_leader(make_batch(1), 0)  # an epoch of its own: it asks
        p = Partition(TOPIC, index, FOLLOWER, plog, clock)
        assert p.apply(PartitionState(LEADER, 1, 1, (LEADER, FOLLOWER), (LEADER, FOLLOWER)))
        fetcher.add(p)
    key, first = fetcher.next_request()  # type: ignore[misc]
    assert key == OFFSET_FOR_LEADER_EPOCH
    assert sum(len(t.partitions) for t in first.topics) == EPOCH_REQUEST_PARTITIONS_MAX
