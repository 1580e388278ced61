"""The transaction coordinator's state machine (broker/txn/state.py) and its log records in
Kafka's layouts (broker/txn/log_records.py): every move of KIP-98's protocol, with fencing."""

from __future__ import annotations

import itertools

import pytest

from epochlog.broker.txn.log_records import (
    BadRecord,
    Status,
    TxnLogEntry,
    parse,
    txn_key,
    txn_value,
)
from epochlog.broker.txn.state import EPOCH_MAX, PREVIOUS, Answer, TxnState
from epochlog.protocol.error_codes import ErrorCode as E

TIMEOUT_MS = 60_000


def coordinator() -> TxnState:
    ids = itertools.count(1000)
    return TxnState(lambda: next(ids), timeout_max_ms=TIMEOUT_MS)


def durable(s: TxnState, txn: str, answer: Answer) -> Answer:
    """Write what the answer asks for (it must ask for something), as the coordinator would."""
    assert answer.write is not None, answer
    s.written(txn, answer.write)
    return answer


def started(s: TxnState, txn: str = "t") -> tuple[int, int]:
    a = durable(s, txn, s.init_producer_id(txn, TIMEOUT_MS, now_ms=1))
    assert a.error == 0
    return a.producer_id, a.producer_epoch


def test_a_new_id_gets_a_producer_id_at_epoch_0_once_written() -> None:
    s = coordinator()
    a = s.init_producer_id("t", TIMEOUT_MS, now_ms=5)
    assert (a.error, a.producer_id, a.producer_epoch) == (0, 1000, 0)
    assert a.write == TxnLogEntry(1000, 0, TIMEOUT_MS, Status.EMPTY, frozenset(), 5, -1)
    assert s.init_producer_id("t", TIMEOUT_MS, now_ms=6).error == E.CONCURRENT_TRANSACTIONS
    assert s.add_partitions("t", 1000, 0, [("a", 0)], 6).error == E.INVALID_PRODUCER_ID_MAPPING
    s.written("t", a.write)
    assert s.ids["t"].status is Status.EMPTY


def test_a_new_producer_fences_the_old_one() -> None:
    s = coordinator()
    pid, epoch = started(s)
    again = durable(s, "t", s.init_producer_id("t", TIMEOUT_MS, now_ms=2))
    assert (again.producer_id, again.producer_epoch) == (pid, epoch + 1)
    assert s.add_partitions("t", pid, epoch, [("a", 0)], 3).error == E.PRODUCER_FENCED
    assert s.end_txn("t", pid, epoch, True, 3).error == E.PRODUCER_FENCED
    assert s.add_partitions("t", pid + 1, epoch + 1, [("a", 0)], 3).error == \
        E.INVALID_PRODUCER_ID_MAPPING
    assert s.add_partitions("t", pid, epoch + 1, [("a", 0)], 3).write is not None


def test_a_producer_naming_its_epoch_is_bumped_only_from_the_current_one() -> None:
    """KIP-360: InitProducerId v3+ may name the producer's id and epoch."""
    s = coordinator()
    pid, epoch = started(s)
    bumped = durable(s, "t", s.init_producer_id("t", TIMEOUT_MS, 2, expected=(pid, epoch)))
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, epoch + 1)
    assert s.init_producer_id("t", TIMEOUT_MS, 3, expected=(pid, epoch)).error == \
        E.PRODUCER_FENCED
    assert s.init_producer_id("t", TIMEOUT_MS, 3, expected=(pid + 1, epoch + 1)).error == \
        E.PRODUCER_FENCED
    assert s.init_producer_id("other", TIMEOUT_MS, 3, expected=(pid, 0)).error == \
        E.INVALID_PRODUCER_ID_MAPPING


def test_a_commit_goes_through_prepare_and_complete() -> None:
    s = coordinator()
    pid, epoch = started(s)
    durable(s, "t", s.add_partitions("t", pid, epoch, [("a", 0)], now_ms=10))
    assert (s.ids["t"].status, s.ids["t"].entry.start_ms) == (Status.ONGOING, 10)
    assert s.add_partitions("t", pid, epoch, [("a", 0)], 11) == Answer()  # a retry: no write
    durable(s, "t", s.add_partitions("t", pid, epoch, [("b", 1)], 12))
    assert s.ids["t"].entry.partitions == {("a", 0), ("b", 1)}
    assert s.ids["t"].entry.start_ms == 10
    prepare = durable(s, "t", s.end_txn("t", pid, epoch, True, 20))
    assert prepare.write is not None and prepare.write.status is Status.PREPARE_COMMIT
    assert s.unfinished() == ["t"]
    assert s.add_partitions("t", pid, epoch, [("c", 0)], 21).error == E.CONCURRENT_TRANSACTIONS
    assert s.end_txn("t", pid, epoch, True, 21).error == E.CONCURRENT_TRANSACTIONS
    assert s.end_txn("t", pid, epoch, False, 21).error == E.INVALID_TXN_STATE
    done = durable(s, "t", s.markers_written("t", 30))
    assert done.write is not None and done.write.status is Status.COMPLETE_COMMIT
    assert done.write.partitions == frozenset() and s.unfinished() == []
    assert s.end_txn("t", pid, epoch, True, 31) == Answer()  # the client's retry
    assert s.end_txn("t", pid, epoch, False, 31).error == E.INVALID_TXN_STATE
    # the next transaction starts afresh
    durable(s, "t", s.add_partitions("t", pid, epoch, [("c", 0)], 40))
    assert (s.ids["t"].entry.partitions, s.ids["t"].entry.start_ms) == ({("c", 0)}, 40)


def test_an_abort_and_ending_nothing() -> None:
    s = coordinator()
    pid, epoch = started(s)
    assert s.end_txn("t", pid, epoch, False, 2).error == E.INVALID_TXN_STATE  # Empty
    durable(s, "t", s.add_partitions("t", pid, epoch, [("a", 0)], 3))
    assert durable(s, "t", s.end_txn("t", pid, epoch, False, 4)).write.status is \
        Status.PREPARE_ABORT  # type: ignore[union-attr]
    assert durable(s, "t", s.markers_written("t", 5)).write.status is \
        Status.COMPLETE_ABORT  # type: ignore[union-attr]
    assert s.end_txn("t", pid, epoch, False, 6) == Answer()


def test_init_during_a_transaction_fences_and_aborts_it() -> None:
    s = coordinator()
    pid, epoch = started(s)
    durable(s, "t", s.add_partitions("t", pid, epoch, [("a", 0)], 3))
    a = s.init_producer_id("t", TIMEOUT_MS, now_ms=4)
    assert a.error == E.CONCURRENT_TRANSACTIONS and a.write is not None
    assert (a.write.status, a.write.producer_epoch, a.write.partitions) == \
        (Status.PREPARE_ABORT, epoch + 1, {("a", 0)})
    s.written("t", a.write)
    assert s.end_txn("t", pid, epoch, True, 5).error == E.PRODUCER_FENCED  # the zombie
    assert s.init_producer_id("t", TIMEOUT_MS, 5).error == E.CONCURRENT_TRANSACTIONS
    durable(s, "t", s.markers_written("t", 6))
    again = durable(s, "t", s.init_producer_id("t", TIMEOUT_MS, 7))
    assert (again.error, again.producer_id, again.producer_epoch) == (0, pid, epoch + 2)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced() -> None:
    s = coordinator()
    pid, epoch = started(s)
    durable(s, "t", s.add_partitions("t", pid, epoch, [("a", 0)], now_ms=100))
    assert s.timed_out(100 + TIMEOUT_MS) == []
    assert s.timed_out(101 + TIMEOUT_MS) == ["t"]
    a = durable(s, "t", s.abort_timed_out("t", 101 + TIMEOUT_MS))
    assert a.write is not None
    assert (a.write.status, a.write.producer_epoch) == (Status.PREPARE_ABORT, epoch + 1)
    assert s.timed_out(10 * TIMEOUT_MS) == []
    assert s.end_txn("t", pid, epoch, True, 102 + TIMEOUT_MS).error == E.PRODUCER_FENCED


def test_the_last_epoch_rolls_over_to_a_new_producer_id() -> None:
    s = coordinator()
    pid, _ = started(s)
    s.ids["t"].entry = TxnLogEntry(pid, EPOCH_MAX, TIMEOUT_MS, Status.EMPTY, frozenset(), 1, -1)
    a = durable(s, "t", s.init_producer_id("t", TIMEOUT_MS, 2))
    assert (a.producer_id, a.producer_epoch) == (pid + 1, 0)


@pytest.mark.parametrize("timeout_ms", [0, -1, TIMEOUT_MS + 1])
def test_a_timeout_out_of_bounds_is_refused(timeout_ms: int) -> None:
    assert coordinator().init_producer_id("t", timeout_ms, 1).error == \
        E.INVALID_TRANSACTION_TIMEOUT


def test_a_failed_write_leaves_the_state_as_it_was() -> None:
    s = coordinator()
    s.init_producer_id("t", TIMEOUT_MS, 1)
    s.write_failed("t")
    assert "t" not in s.ids  # a new id never written is gone
    pid, epoch = started(s)
    s.add_partitions("t", pid, epoch, [("a", 0)], 2)
    s.write_failed("t")
    assert s.ids["t"].status is Status.EMPTY and s.ids["t"].pending is None


def test_a_new_coordinator_finds_the_unfinished_commits_in_the_log() -> None:
    entries = {
        "done": TxnLogEntry(1, 0, TIMEOUT_MS, Status.COMPLETE_COMMIT, frozenset(), 5, 1),
        "half": TxnLogEntry(2, 3, TIMEOUT_MS, Status.PREPARE_COMMIT,
                            frozenset({("a", 0), ("b", 2)}), 6, 2),
        "gone": TxnLogEntry(3, 0, TIMEOUT_MS, Status.EMPTY, frozenset(), 7, -1),
    }
    s = coordinator()
    for offset, (txn, entry) in enumerate(entries.items()):
        s.load(*parse(txn_key(txn), txn_value(entry), offset))
    s.load(*parse(txn_key("gone"), None, 9))
    assert sorted(s.ids) == ["done", "half"] and s.unfinished() == ["half"]
    assert s.ids["half"].entry == entries["half"]
    assert durable(s, "half", s.markers_written("half", 10)).write.status is \
        Status.COMPLETE_COMMIT  # type: ignore[union-attr]


def test_the_records_are_kafkas_layouts() -> None:
    entry = TxnLogEntry(5, 3, 60_000, Status.ONGOING, frozenset({("a", 1), ("a", 0)}), 10, 7)
    assert txn_key("tx") == bytes.fromhex("0000" "0002") + b"tx"
    assert txn_value(entry) == bytes.fromhex(
        "0000"  # value version 0
        "0000000000000005" "0003" "0000ea60" "01"  # producer id, epoch, timeout, Ongoing
        "00000001" "0001" "61" "00000002" "00000000" "00000001"  # [a: 0, 1]
        "000000000000000a" "0000000000000007")  # last update, start
    # version 1, as Kafka 4 writes it: flexible (compact lengths), with tagged fields at the
    # end: previous_producer_id (tag 0) = 4 and client_transaction_version (tag 2) = 2
    v1 = bytes.fromhex(
        "0001" "0000000000000005" "0003" "0000ea60" "02"
        "02" "02" "61" "03" "00000000" "00000001" "00"  # compact [a: 0, 1], no tags
        "000000000000000a" "0000000000000007"
        "02" "00" "08" "0000000000000004" "02" "02" "0002")
    txn, got = parse(txn_key("tx"), v1, 0)
    assert (txn, got) == ("tx", TxnLogEntry(5, 3, 60_000, Status.PREPARE_COMMIT,
                                            frozenset({("a", 1), ("a", 0)}), 10, 7))
    assert Status.PREPARE_EPOCH_FENCE.kafka_name == "PrepareEpochFence"


_EMPTY = txn_value(TxnLogEntry(1, 0, 1, Status.EMPTY, frozenset(), 0, 0))
UNKNOWN_STATUS = _EMPTY[:16] + b"\x09" + _EMPTY[17:]  # status byte: after 2 + 8 + 2 + 4 bytes


@pytest.mark.parametrize("key, value", [
    (None, b""), (b"\x00", b""), (bytes.fromhex("0001") + b"\x00\x01x", None),
    (txn_key("t"), bytes.fromhex("0009")), (txn_key("t"), bytes.fromhex("0000") + b"\x00" * 5),
    (txn_key("t"), UNKNOWN_STATUS),
])
def test_a_record_that_does_not_decode_is_named(key: bytes | None, value: bytes | None) -> None:
    with pytest.raises(BadRecord, match="record at offset 42"):
        parse(key, value, 42)


def test_only_idle_ids_expire_and_an_expiring_one_is_busy() -> None:
    s = coordinator()
    pid, epoch = started(s, "idle")  # last update at 1
    opened, open_epoch = started(s, "open")
    durable(s, "open", s.add_partitions("open", opened, open_epoch, [("a", 0)], 2))
    assert s.expired(now_ms=100, expiration_ms=100) == []
    assert s.expired(now_ms=101, expiration_ms=100) == ["idle"]  # Ongoing ones never expire
    assert s.begin_expire("idle")
    assert s.expired(now_ms=500, expiration_ms=100) == []  # busy: its tombstone is on the way
    assert s.init_producer_id("idle", TIMEOUT_MS, now_ms=501).error == \
        E.CONCURRENT_TRANSACTIONS
    s.write_failed("idle")  # the tombstone's write failed: the id is as it was
    assert s.ids["idle"].entry.producer_id == pid and s.begin_expire("idle")
    s.expire_written("idle")
    assert "idle" not in s.ids
    fresh = s.init_producer_id("idle", TIMEOUT_MS, now_ms=502)  # a new start, a new id
    assert fresh.error == 0 and fresh.producer_id != pid and fresh.producer_epoch == 0
    assert not s.begin_expire("open")


def test_adding_no_partitions_opens_no_transaction() -> None:
    s = coordinator()
    pid, epoch = started(s)
    answer = s.add_partitions("t", pid, epoch, [], 2)
    assert (answer.error, answer.write) == (0, None)
    assert s.ids["t"].status is Status.EMPTY


def _in(status: Status) -> tuple[TxnState, int, int]:
    """A machine holding id "t" in status (as a load from the log leaves it)."""
    s = coordinator()
    partitions = frozenset({("a", 0)}) if status is not Status.EMPTY else frozenset()
    s.load("t", TxnLogEntry(7, 3, TIMEOUT_MS, status, partitions, 1, 1))
    return s, 7, 3


REQUESTS = {
    "init": lambda s, pid, e: s.init_producer_id("t", TIMEOUT_MS, 2),
    "add": lambda s, pid, e: s.add_partitions("t", pid, e, [("b", 1)], 2),
    "commit": lambda s, pid, e: s.end_txn("t", pid, e, True, 2),
    "abort": lambda s, pid, e: s.end_txn("t", pid, e, False, 2),
    "markers": lambda s, pid, e: s.markers_written("t", 2),
    "timeout": lambda s, pid, e: s.abort_timed_out("t", 2),
}


@pytest.mark.parametrize("status", list(Status))
@pytest.mark.parametrize("request_name", sorted(REQUESTS))
def test_every_move_the_machine_makes_is_in_the_table(status: Status,
                                                      request_name: str) -> None:
    """Whatever state an id is in, a request either is refused or moves it along PREVIOUS (the
    check in _begin would raise otherwise); and the moves made are the documented ones."""
    s, pid, epoch = _in(status)
    answer = REQUESTS[request_name](s, pid, epoch)
    if answer.write is not None:
        assert status in PREVIOUS[answer.write.status]
        assert (status.kafka_name, request_name, answer.write.status.kafka_name) in MOVES


MOVES = {
    ("Empty", "init", "Empty"), ("CompleteCommit", "init", "Empty"),
    ("CompleteAbort", "init", "Empty"), ("Ongoing", "init", "PrepareAbort"),
    ("Empty", "add", "Ongoing"), ("Ongoing", "add", "Ongoing"),
    ("CompleteCommit", "add", "Ongoing"), ("CompleteAbort", "add", "Ongoing"),
    ("Ongoing", "commit", "PrepareCommit"), ("Ongoing", "abort", "PrepareAbort"),
    ("PrepareCommit", "markers", "CompleteCommit"), ("PrepareAbort", "markers", "CompleteAbort"),
    ("Ongoing", "timeout", "PrepareAbort"),
}


def test_a_move_not_in_the_table_is_a_bug() -> None:
    s, _, _ = _in(Status.COMPLETE_COMMIT)
    m = s.ids["t"]
    with pytest.raises(AssertionError, match="CompleteCommit -> PrepareCommit"):
        TxnState._begin(m, TxnLogEntry(7, 3, TIMEOUT_MS, Status.PREPARE_COMMIT, frozenset(), 2, 1))
    assert m.pending is None  # nothing is written for it
