"""Transactions in a partition's log (storage's producer state): a transactional batch opens the
producer's transaction, a marker from the coordinator closes it; the state is rebuilt from the
log, markers included."""

from __future__ import annotations

import pytest

from epochlog.broker.storage.errors import (
    CoordinatorFenced,
    CorruptRecords,
    InvalidProducerEpoch,
    InvalidTxnState,
)
from epochlog.broker.storage.txn_index import AbortedTxn
from epochlog.protocol.control_records import marker_batch
from epochlog.protocol.records import build_batch

from .helpers import make_batch, open_log

PID = 4000


def txn_batch(sequence: int, *, epoch: int = 0, transactional: bool = True, tag: int = 0
              ) -> bytes:
    return build_batch([(b"k", f"v{tag}".encode(), None, 1000)], producer_id=PID,
                       producer_epoch=epoch, base_sequence=sequence,
                       is_transactional=transactional)


def test_a_transaction_opens_with_its_first_batch_and_a_marker_closes_it(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(make_batch(1), leader_epoch=0)  # offset 0, no producer
    log.append_as_leader(txn_batch(0), leader_epoch=0)  # offset 1 opens it
    log.append_as_leader(txn_batch(1, tag=1), leader_epoch=0)
    assert log.producer_state.open_transactions() == {PID: 1}
    with pytest.raises(InvalidTxnState, match="open here since offset 1"):
        log.append_as_leader(txn_batch(2, transactional=False), leader_epoch=0)
    info = log.append_as_leader(marker_batch(True, PID, 0, 5, 1000), leader_epoch=0)
    assert info.first_offset == 3
    assert log.producer_state.open_transactions() == {}
    # the marker took no sequence: the producer goes on from 2, in a new transaction
    log.append_as_leader(txn_batch(2, tag=2), leader_epoch=0)
    assert log.producer_state.open_transactions() == {PID: 4}
    log.close()


def test_markers_from_an_older_coordinator_or_producer_epoch_are_refused(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(0, epoch=2), leader_epoch=0)
    log.append_as_leader(marker_batch(False, PID, 2, 7, 1000), leader_epoch=0)
    with pytest.raises(CoordinatorFenced, match="coordinator epoch 6"):
        log.append_as_leader(marker_batch(True, PID, 2, 6, 1000), leader_epoch=0)
    with pytest.raises(InvalidProducerEpoch, match="epoch 1"):
        log.append_as_leader(marker_batch(True, PID, 1, 7, 1000), leader_epoch=0)
    with pytest.raises(CorruptRecords, match="control batch"):
        log.append_as_leader(build_batch([(b"x", b"y", None, 1)], producer_id=PID,
                                          producer_epoch=2, is_control=True), leader_epoch=0)
    # a marker at a bumped epoch (the coordinator fenced the producer) is taken
    log.append_as_leader(marker_batch(False, PID, 3, 7, 1000), leader_epoch=0)
    log.close()


def test_the_state_is_rebuilt_from_the_log_with_its_markers(tmp_path) -> None:
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(txn_batch(0), leader_epoch=0)
    log.append_as_leader(marker_batch(True, PID, 0, 9, 1000), leader_epoch=0)
    log.append_as_leader(txn_batch(1, tag=1), leader_epoch=0)  # offset 2: open at the close
    log.flush()
    log.close()
    again = open_log(tmp_path / "t-0", clean_shutdown=True, recovery_point=3)
    assert again.producer_state.open_transactions() == {PID: 2}
    assert again.producer_state.producers[PID].coordinator_epoch == 9
    with pytest.raises(CoordinatorFenced):
        again.append_as_leader(marker_batch(True, PID, 0, 8, 1000), leader_epoch=0)
    again.truncate_to(2, "test")  # the open transaction's batch goes, and with it the txn
    assert again.producer_state.open_transactions() == {}
    assert again.producer_state.producers[PID].coordinator_epoch == 9
    again.close()


def test_aborted_transactions_and_the_last_stable_offset(tmp_path) -> None:
    """What read_committed needs: the aborted transactions (first offset to marker) and the
    last stable offset, held below a transaction still open or one whose marker is not yet below
    the high watermark; both rebuilt from the log."""
    log = open_log(tmp_path / "t-0")
    other = 5000

    def other_batch(sequence: int) -> bytes:
        return build_batch([(b"k", b"o", None, 1000)], producer_id=other, producer_epoch=0,
                           base_sequence=sequence, is_transactional=True)

    log.append_as_leader(txn_batch(0), leader_epoch=0)             # 0: PID's txn
    log.append_as_leader(other_batch(0), leader_epoch=0)           # 1: other's txn
    log.append_as_leader(txn_batch(1, tag=1), leader_epoch=0)      # 2
    log.append_as_leader(marker_batch(False, PID, 0, 1, 1000), leader_epoch=0)  # 3: abort
    log.update_high_watermark(3)
    assert log.last_stable_offset == 0  # PID's marker (3) is not below the high watermark yet
    log.update_high_watermark(4)
    assert log.last_stable_offset == 1  # PID's transaction settled; other's is open from 1
    log.append_as_leader(marker_batch(True, other, 0, 1, 1000), leader_epoch=0)  # 4: commit
    log.update_high_watermark(4)
    assert log.last_stable_offset == 1  # other's marker (4) is not below 4
    log.update_high_watermark(5)
    assert log.last_stable_offset == 5
    # the last stable offset when PID's abort was done: other's transaction, open from 1
    aborted = [AbortedTxn(PID, 0, 3, 1)]
    assert log.aborted_in(0, 5) == aborted
    assert log.aborted_in(0, 1) == aborted
    assert log.aborted_in(3, 5) == aborted
    assert log.aborted_in(4, 5) == []
    log.flush()
    log.close()
    again = open_log(tmp_path / "t-0", clean_shutdown=True, recovery_point=5, high_watermark=5)
    assert again.aborted_in(0, 5) == aborted
    assert again.last_stable_offset == 5
    again.advance_log_start_offset(4)
    assert again.aborted_in(4, 5) == []
    again.close()


def test_the_aborted_transactions_found_for_a_range_are_all_that_hold_offsets_there(tmp_path
                                                                                     ) -> None:
    """Log.aborted_in (the .txnindex files of many small segments, walked as Kafka walks them)
    against a plain filter, over many interleaved transactions, some spanning segments; the
    same after a clean reopen (from the snapshot) and after one that rebuilds every entry."""
    import random

    rng = random.Random(7)
    log = open_log(tmp_path / "t-0")
    sequences: dict[int, int] = {}
    open_since: dict[int, int] = {}
    expected: list[tuple[int, int, int]] = []
    for _ in range(400):
        pid = rng.randrange(6)
        if pid in open_since and rng.random() < 0.3:
            commit = rng.random() < 0.5
            info = log.append_as_leader(marker_batch(commit, pid, 0, 0, 1000), leader_epoch=0)
            if not commit:
                expected.append((pid, open_since[pid], info.first_offset))
            del open_since[pid]
        else:
            sequence = sequences.get(pid, 0)
            sequences[pid] = sequence + 1
            info = log.append_as_leader(
                build_batch([(b"k", b"v" * rng.randrange(1, 200), None, 1000)], producer_id=pid,
                            producer_epoch=0, base_sequence=sequence, is_transactional=True),
                leader_epoch=0)
            open_since.setdefault(pid, info.first_offset)
    assert expected and len(log.segments) > 10
    end = log.log_end_offset

    def check(target) -> None:
        for _ in range(300):
            start = rng.randrange(end)
            stop = rng.randrange(start, end + 1)
            found = [(a.producer_id, a.first_offset, a.last_offset)
                     for a in target.aborted_in(start, stop)]
            assert found == [a for a in expected if a[2] >= start and a[1] < stop], (start, stop)

    check(log)
    log.flush()
    log.close()
    again = open_log(tmp_path / "t-0", clean_shutdown=True, recovery_point=end)
    assert again.producer_batches_replayed == 0
    check(again)
    again.close()
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.unlink()
    for path in (tmp_path / "t-0").glob("*.txnindex"):
        path.unlink()
    rebuilt = open_log(tmp_path / "t-0", clean_shutdown=True, recovery_point=end)
    check(rebuilt)
    rebuilt.close()


def test_a_producer_whose_batches_went_below_the_log_start_may_go_on_at_any_sequence(
        tmp_path) -> None:
    """Kafka's rule (librdkafka test 0103): once DeleteRecords or retention has taken every
    batch of a producer, the broker knows nothing of it, so its next batch is accepted whatever
    its sequence, even inside a transaction it had open. That batch opens the transaction again
    where it lands, so the last stable offset never points below the log start."""
    log = open_log(tmp_path / "t-0")
    for sequence in range(3):
        log.append_as_leader(txn_batch(sequence, tag=sequence), leader_epoch=0)
    assert log.producer_state.open_transactions() == {PID: 0}
    log.update_high_watermark(log.log_end_offset)
    log.advance_log_start_offset(log.log_end_offset)  # DeleteRecords at the high watermark
    assert log.producer_state.open_transactions() == {}
    info = log.append_as_leader(txn_batch(3, tag=3), leader_epoch=0)  # not sequence 0
    assert info.first_offset == 3
    assert log.producer_state.open_transactions() == {PID: 3}
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == 3
    log.append_as_leader(marker_batch(True, PID, 0, 5, 1000), leader_epoch=0)
    log.update_high_watermark(log.log_end_offset)
    assert log.last_stable_offset == log.log_end_offset == 5
    log.close()


def test_a_snapshot_from_before_the_log_start_moved_does_not_bring_the_producer_back(
        tmp_path) -> None:
    """A snapshot taken at a roll, before DeleteRecords moved the log start to it, still names
    the producer whose batches all lay below: reopened after a crash, the log must not load it
    (else the producer's next batch is OUT_OF_ORDER_SEQUENCE_NUMBER again)."""
    log = open_log(tmp_path / "t-0")
    for sequence in range(3):
        log.append_as_leader(txn_batch(sequence, transactional=False, tag=sequence),
                             leader_epoch=0)
    log.roll()  # a snapshot at offset 3 names the producer, its last batch at offset 2
    log.append_as_leader(make_batch(1), leader_epoch=0)  # offset 3, no producer
    log.flush()
    log.update_high_watermark(log.log_end_offset)
    log.advance_log_start_offset(3)
    assert PID not in log.producer_state.producers
    del log  # a crash: no close, no snapshot at the end
    again = open_log(tmp_path / "t-0", recovery_point=4, log_start_offset=3, high_watermark=4)
    assert PID not in again.producer_state.producers
    info = again.append_as_leader(txn_batch(7, transactional=False), leader_epoch=0)
    assert info.first_offset == 4
    again.close()
