"""The transaction coordinator's core (broker/txn/core.py) with no event loop and no broker:
events in, actions out. Each test feeds what TxnCoordinator (or the transaction simulation)
would feed it — a partition state, a request with its token, an append's outcome, the markers'
outcome, a tick — and checks the actions: what is written, which markers are asked for, which
token is answered with what, and when the core wants to be woken."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

import pytest

from epochlog.broker.txn import log_records
from epochlog.broker.txn.core import (
    EXPIRE_BATCH_MAX,
    RETRY_FIRST_MS,
    RETRY_MAX_MS,
    TICK_MS,
    CoordinatorAbort,
    ProducerIdAndEpoch,
    TxnCore,
    WriteMarkers,
)
from epochlog.broker.txn.log_records import Status, TxnLogEntry, txn_key, txn_value
from epochlog.protocol.error_codes import ErrorCode as E

from .core_recorder import Recorder

TIMEOUT_MS = 5000
EXPIRATION_MS = 60_000
EXPIRY_CHECK_MS = 10_000
TID = "t"


def txn_core(new_producer_id: Callable[[], int]) -> TxnCore:
    """A core whose ids are all in partition 0."""
    return TxnCore(new_producer_id, partition_of=lambda tid: 0, timeout_max_ms=60_000,
                   expiration_ms=EXPIRATION_MS, expiration_check_ms=EXPIRY_CHECK_MS)


class Driver(Recorder):
    """Feeds a core as TxnCoordinator does, its appends answered when the test says."""

    def __init__(self, core: TxnCore | None = None) -> None:
        super().__init__()
        self.core = core or txn_core(itertools.count(1000).__next__)

    @property
    def markers(self) -> list[WriteMarkers]:
        return self.taken(WriteMarkers)

    @property
    def aborts(self) -> list[CoordinatorAbort]:
        return self.taken(CoordinatorAbort)

    def lead(self, epoch: int = 1, log: list[tuple[str, TxnLogEntry]] | None = None) -> None:
        self.run(self.core.partition_applied(0, epoch))
        for offset, (tid, entry) in enumerate(log or []):
            self.core.replay(0, epoch, offset, log_records.txn_key(tid),
                             log_records.txn_value(entry))
        self.run(self.core.loaded(self.now, 0, epoch, 0, len(log or []), 1))

    def ask(self, event: str, *args: object) -> int:
        token = next(self.tokens)
        self.run(getattr(self.core, event)(self.now, TID, *args, token))
        return token

    def written(self, error: int = 0) -> TxnLogEntry | None:
        """The first append in flight ends with error: the entry it wrote (None: a tombstone)."""
        a = self.next_append()
        self.run(self.core.appended(self.now, a.append_id, error, 0))
        return log_records.parse(*a.records[0], 0)[1]

    def started(self) -> ProducerIdAndEpoch:
        t = self.ask("init_producer_id", TIMEOUT_MS, None)
        self.written()
        answer = self.answers[t]
        assert isinstance(answer, ProducerIdAndEpoch) and answer.error == 0
        return answer

    def ongoing(self) -> ProducerIdAndEpoch:
        p = self.started()
        t = self.ask("add_partitions", p.producer_id, p.producer_epoch, [("a", 0), ("b", 1)])
        assert self.written().status is Status.ONGOING  # type: ignore[union-attr]
        assert self.answers[t] == 0
        return p

    def tick(self, to_ms: int) -> None:
        self.now = to_ms
        self.run(self.core.tick(self.now))


def test_requests_before_a_load_and_while_loading_are_told_where_to_go() -> None:
    d = Driver()
    t = d.ask("init_producer_id", TIMEOUT_MS, None)
    assert d.answers[t] == ProducerIdAndEpoch(E.NOT_COORDINATOR)
    d.run(d.core.partition_applied(0, 3))
    assert d.answers[d.ask("end_txn", 1, 0, True)] == E.COORDINATOR_LOAD_IN_PROGRESS
    assert d.core.describe(TID) == (E.COORDINATOR_LOAD_IN_PROGRESS, None)
    assert d.core.list_transactions(d.now, None, None, -1) == (E.COORDINATOR_LOAD_IN_PROGRESS, [])


def test_an_init_is_answered_once_its_entry_is_replicated() -> None:
    d = Driver()
    d.lead(epoch=4)
    t = d.ask("init_producer_id", TIMEOUT_MS, None)
    assert t not in d.answers
    a = d.appends[0]
    assert (a.index, a.leader_epoch, a.producer) == (0, 4, None)
    assert a.errors[E.REQUEST_TIMED_OUT] == E.COORDINATOR_NOT_AVAILABLE  # _WRITE_ERRORS
    assert d.written() == TxnLogEntry(1000, 0, TIMEOUT_MS, Status.EMPTY, frozenset(), 1000, -1)
    assert d.answers[t] == ProducerIdAndEpoch(0, 1000, 0)
    assert d.core.counters.inits_total == 1
    assert d.core.describe(TID)[1].status is Status.EMPTY  # type: ignore[union-attr]


@pytest.mark.parametrize(("append_error", "answered"), [
    (E.NOT_LEADER_OR_FOLLOWER, E.NOT_COORDINATOR),
    (E.NOT_ENOUGH_REPLICAS, E.COORDINATOR_NOT_AVAILABLE),
    (E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_NOT_AVAILABLE),
])
def test_a_failed_write_leaves_the_id_as_it_was(append_error: int, answered: int) -> None:
    d = Driver()
    d.lead()
    p = d.started()
    t = d.ask("add_partitions", p.producer_id, p.producer_epoch, [("a", 0)])
    d.written(append_error)
    assert d.answers[t] == answered
    assert d.core.describe(TID)[1].status is Status.EMPTY  # type: ignore[union-attr]
    d.ask("add_partitions", p.producer_id, p.producer_epoch, [("a", 0)])
    assert len(d.appends) == 1  # not busy: the next request's write goes out


def test_a_write_that_ends_after_an_unload_answers_not_coordinator() -> None:
    d = Driver()
    d.lead()
    t = d.ask("init_producer_id", TIMEOUT_MS, None)
    d.run(d.core.partition_applied(0, None))
    d.written()
    assert d.answers[t] == ProducerIdAndEpoch(E.NOT_COORDINATOR)


def test_a_commit_writes_prepare_then_markers_then_complete() -> None:
    d = Driver()
    d.lead(epoch=2)
    p = d.ongoing()
    t = d.ask("end_txn", p.producer_id, p.producer_epoch, True)
    assert d.written().status is Status.PREPARE_COMMIT  # type: ignore[union-attr]
    assert d.answers[t] == 0
    (w,) = d.markers
    assert w == WriteMarkers(TID, 1000, 0, True, frozenset({("a", 0), ("b", 1)}), 0, 2)
    d.run(d.core.markers_done(d.now, w))
    assert d.written().status is Status.COMPLETE_COMMIT  # type: ignore[union-attr]
    assert d.core.counters.committed_total == 1 and not d.markers


def test_complete_is_retried_with_a_growing_backoff_while_the_shard_is_ours() -> None:
    d = Driver()
    d.lead()
    d.tick(d.now)
    p = d.ongoing()
    d.ask("end_txn", p.producer_id, p.producer_epoch, False)
    d.written()
    d.run(d.core.markers_done(d.now, *d.markers))
    for delay_ms in (RETRY_FIRST_MS, 2 * RETRY_FIRST_MS, 4 * RETRY_FIRST_MS, 8 * RETRY_FIRST_MS,
                     16 * RETRY_FIRST_MS, RETRY_MAX_MS, RETRY_MAX_MS):
        d.written(E.NOT_ENOUGH_REPLICAS)
        failed_at = d.now
        assert d.core.next_deadline_ms() <= failed_at + delay_ms  # type: ignore[operator]
        d.tick(failed_at + delay_ms - 1)
        assert not d.appends
        d.tick(failed_at + delay_ms)
        assert len(d.appends) == 1
    assert d.written().status is Status.COMPLETE_ABORT  # type: ignore[union-attr]
    assert d.core.counters.aborted_total == 1


def test_a_retry_stops_once_the_shard_is_gone() -> None:
    d = Driver()
    d.lead()
    p = d.ongoing()
    d.ask("end_txn", p.producer_id, p.producer_epoch, True)
    d.written()
    d.run(d.core.markers_done(d.now, *d.markers))
    d.written(E.NOT_ENOUGH_REPLICAS)
    d.run(d.core.leadership_lost(0))
    d.tick(d.now + RETRY_MAX_MS)
    assert not d.appends and d.core.counters.committed_total == 0


def test_fenced_markers_end_the_second_phase_with_a_warning(caplog: pytest.LogCaptureFixture
                                                            ) -> None:
    d = Driver()
    d.lead()
    p = d.ongoing()
    d.ask("end_txn", p.producer_id, p.producer_epoch, True)
    d.written()
    (w,) = d.markers
    with caplog.at_level(logging.WARNING, "epochlog.broker"):
        d.run(d.core.markers_given_up(w, "a-0: a newer coordinator's marker is there"))
    assert caplog.messages == ["transactional id t: markers not written, a-0: a newer "
                               "coordinator's marker is there"]
    d.run(d.core.markers_done(d.now, w))  # a late report of the same phase changes nothing
    assert not d.appends


def test_markers_of_an_older_shard_do_not_complete_the_newer_one_s() -> None:
    d = Driver()
    d.lead(epoch=1)
    p = d.ongoing()
    d.ask("end_txn", p.producer_id, p.producer_epoch, True)
    d.written()
    (old,) = d.markers
    prepared = d.core.describe(TID)[1].entry  # type: ignore[union-attr]
    d.lead(epoch=2, log=[(TID, prepared)])  # a new epoch: the load finds it in Prepare*
    (new,) = d.markers
    assert (new.leader_epoch, old.leader_epoch) == (2, 1)
    d.run(d.core.markers_done(d.now, old))
    assert not d.appends
    d.run(d.core.markers_done(d.now, new))
    assert d.written().status is Status.COMPLETE_COMMIT  # type: ignore[union-attr]


def test_a_new_producer_fences_an_open_transaction_and_aborts_it() -> None:
    d = Driver()
    d.lead()
    p = d.ongoing()
    t = d.ask("init_producer_id", TIMEOUT_MS, None)
    assert d.written().status is Status.PREPARE_ABORT  # type: ignore[union-attr]
    assert d.answers[t] == ProducerIdAndEpoch(E.CONCURRENT_TRANSACTIONS, -1, -1)
    assert d.aborts == [CoordinatorAbort(TID, p.producer_id, p.producer_epoch, "fenced")]
    (w,) = d.markers
    assert w.producer_epoch == p.producer_epoch + 1 and not w.commit
    assert d.core.counters.fenced_total == 1


def test_a_transaction_past_its_timeout_is_aborted_at_a_tick() -> None:
    d = Driver()
    d.lead()
    d.tick(d.now)  # the first tick: checks now, then every TICK_MS
    p = d.ongoing()
    assert d.core.next_deadline_ms() == d.now + TICK_MS
    d.tick(d.now + TIMEOUT_MS)
    assert not d.appends  # not past it yet (start + timeout)
    d.tick(d.now + TICK_MS)
    entry = d.written()
    assert entry is not None and (entry.status, entry.producer_epoch) == \
        (Status.PREPARE_ABORT, p.producer_epoch + 1)
    assert d.aborts == [CoordinatorAbort(TID, p.producer_id, p.producer_epoch, "timed out")]
    assert len(d.markers) == 1 and d.core.counters.timed_out_total == 1


def test_idle_ids_expire_in_bounded_batches() -> None:
    d = Driver()
    d.lead()
    d.tick(d.now)
    idle = [f"id{i:04}" for i in range(EXPIRE_BATCH_MAX + 3)]
    for tid in idle:
        d.run(d.core.init_producer_id(d.now, tid, TIMEOUT_MS, None, next(d.tokens)))
        d.written()
    d.tick(d.now + EXPIRY_CHECK_MS)  # an expiry check, but none idle long enough yet
    assert not d.appends
    d.tick(1000 + EXPIRATION_MS)
    assert [len(a.records) for a in d.appends] == [EXPIRE_BATCH_MAX]
    assert d.written() is None  # tombstones
    assert d.core.counters.expired_total == EXPIRE_BATCH_MAX
    d.tick(d.now + EXPIRY_CHECK_MS - 1)  # the rest at the next check
    assert not d.appends
    d.tick(d.now + TICK_MS)
    assert [len(a.records) for a in d.appends] == [3]


def test_a_producer_id_that_cannot_be_reserved_is_coordinator_not_available() -> None:
    def no_ids() -> int:
        raise OSError("disk full")

    d = Driver(txn_core(no_ids))
    d.lead()
    t = d.ask("init_producer_id", TIMEOUT_MS, None)
    assert d.answers[t] == ProducerIdAndEpoch(E.COORDINATOR_NOT_AVAILABLE)


def test_a_load_logs_its_count_and_completes_what_it_finds_prepared(
        caplog: pytest.LogCaptureFixture) -> None:
    entries = [("done", TxnLogEntry(1, 0, TIMEOUT_MS, Status.COMPLETE_COMMIT, frozenset(), 5, 1)),
               ("half", TxnLogEntry(2, 3, TIMEOUT_MS, Status.PREPARE_ABORT,
                                    frozenset({("a", 0)}), 6, 2))]
    d = Driver()
    d.run(d.core.partition_applied(0, 4))
    d.core.replay(0, 4, 0, txn_key("late"), txn_value(entries[0][1]))  # a load given up
    d.core.replay(0, 5, 0, txn_key("wrong epoch"), txn_value(entries[0][1]))
    with caplog.at_level(logging.INFO, "epochlog.broker"):
        d.run(d.core.partition_applied(0, 5))
        d.core.replay(0, 5, 0, b"\x00\x00", b"\x00\x00", control=True)  # not ours: skipped
        for offset, (tid, entry) in enumerate(entries):
            d.core.replay(0, 5, offset + 1, txn_key(tid), txn_value(entry))
        d.run(d.core.loaded(d.now, 0, 5, 0, 2, 1))
    assert caplog.messages == [
        "__transaction_state-0: unloaded 1 transactional ids (leader epoch 4): a new leader epoch",
        "__transaction_state-0: loaded 2 transactional ids from 2 records (offsets 0-2) at "
        "leader epoch 5 in 1 ms"]
    assert d.markers == [WriteMarkers("half", 2, 3, False, frozenset({("a", 0)}), 0, 5)]
    assert d.core.counters.loads_total == 1
    assert d.core.id_counts() == {"CompleteCommit": 1, "PrepareAbort": 1}
