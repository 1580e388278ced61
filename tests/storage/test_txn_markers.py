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
