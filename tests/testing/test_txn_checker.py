"""The transaction checker can fail: each anomaly kind, fed a history that has it, is caught, and
the history without the fault passes. Histories are written by hand as the recording adapters
write them (a wall clock that moves 1 ms per reading, so "before" means something)."""

from __future__ import annotations

from collections.abc import Iterable

from epochlog.testing import History
from epochlog.testing.history import Polled, TxnOutcome
from epochlog.testing.txn_checker import TXN_KINDS, Pipeline, check_transactions

from .histories import StepClock


def new_history() -> History:
    return History(monotonic_ns=StepClock(), wall_ns=StepClock())


def txn(h: History, name: str, values: Iterable[tuple[int, bytes]], end: TxnOutcome | None,
        *, topic: str = "out", partition: int = 0, ended: bool = True) -> None:
    """A transaction of acknowledged sends at the given offsets, then its commit or abort
    (`ended` False: the call never returned)."""
    for offset, value in values:
        op = h.send_started("p", topic, value, partition=partition, txn=name)
        h.send_acked(op, partition, offset, 0)
    if end is not None:
        op_end = h.txn_ending("p", name, "tid", end)
        if ended:
            h.txn_ended(op_end)


def read(h: History, records: Iterable[tuple[int, bytes]], *, topic: str = "out",
         partition: int = 0, committed: bool = True) -> None:
    h.record_poll("c", [Polled(topic=topic, partition=partition, offset=o, leader_epoch=0,
                               key=None, value=v) for o, v in records], read_committed=committed)


def kinds(h: History, pipeline: Pipeline | None = None) -> dict[str, int]:
    return check_transactions(h, pipeline=pipeline).counts


def test_a_clean_history_passes() -> None:
    h = new_history()
    txn(h, "t1", [(0, b"a"), (1, b"b")], "commit")
    txn(h, "t2", [(3, b"c")], "abort")
    txn(h, "t3", [(5, b"d")], "commit", ended=False)  # commit asked; the call never returned
    read(h, [(0, b"a"), (1, b"b"), (5, b"d")])
    read(h, [(3, b"c")], committed=False)  # read_uncommitted may read aborted records
    verdict = check_transactions(h)
    assert verdict.ok, verdict
    assert verdict.stats["committed"] == 1 and verdict.stats["aborted"] == 1


def test_every_kind_has_a_test_here() -> None:
    tested = {name.removeprefix("test_").replace("_", "-") for name in globals()
              if name.startswith("test_")}
    assert set(TXN_KINDS) <= tested, set(TXN_KINDS) - tested


def test_aborted_read() -> None:
    h = new_history()
    txn(h, "t1", [(0, b"a")], "abort")
    read(h, [(0, b"a")])
    verdict = check_transactions(h)
    assert verdict.counts == {"aborted-read": 1}, verdict
    assert "which was aborted" in verdict.anomalies[0].explanation


def test_uncommitted_read() -> None:
    h = new_history()
    txn(h, "t1", [(0, b"a")], None)
    read(h, [(0, b"a")])  # read while open: the commit is asked for only after
    h.txn_ended(h.txn_ending("p", "t1", "tid", "commit"))
    txn(h, "t2", [(1, b"b")], None)  # never asked to commit
    read(h, [(1, b"b")])
    verdict = check_transactions(h)
    assert verdict.counts == {"uncommitted-read": 2}, verdict
    assert "before transaction t1's commit was asked for" in verdict.anomalies[0].explanation


def test_incomplete_transaction() -> None:
    h = new_history()
    txn(h, "t1", [(0, b"a"), (1, b"b")], "commit")
    txn(h, "t2", [(2, b"c")], "commit", ended=False)
    read(h, [(0, b"a"), (2, b"c")])  # b was in t1 and is missing; c proves the read went past
    assert kinds(h) == {"incomplete-transaction": 1}
    h2 = new_history()
    txn(h2, "t1", [(0, b"a"), (1, b"b")], "commit")
    read(h2, [(0, b"a")])  # not read past b yet: not judged
    assert kinds(h2) == {}


def source(value: bytes) -> bytes:
    return value.split(b"|")[0]


def test_duplicate_processing() -> None:
    h = new_history()
    op = h.send_started("src", "in", b"x", partition=0)
    h.send_acked(op, 0, 0, 0)
    txn(h, "t1", [(0, b"x|t1")], "commit")
    txn(h, "t2", [(1, b"x|t2")], "commit")  # a zombie processed x again, and it committed
    read(h, [(0, b"x|t1"), (1, b"x|t2")])
    assert kinds(h, Pipeline("in", "out", source)) == {"duplicate-processing": 1}
    h2 = new_history()
    op = h2.send_started("src", "in", b"x", partition=0)
    h2.send_acked(op, 0, 0, 0)
    txn(h2, "t1", [(0, b"x|t1")], "abort")  # the zombie's copy aborted: once
    txn(h2, "t2", [(2, b"x|t2")], "commit")
    read(h2, [(2, b"x|t2")])
    assert kinds(h2, Pipeline("in", "out", source, drained=True)) == {}


def test_lost_processing() -> None:
    h = new_history()
    for i, value in enumerate((b"x", b"y")):
        op = h.send_started("src", "in", value, partition=0)
        h.send_acked(op, 0, i, 0)
    txn(h, "t1", [(0, b"x|t1")], "commit")
    read(h, [(0, b"x|t1")])
    assert kinds(h, Pipeline("in", "out", source)) == {}  # not drained: y may be on its way
    verdict = check_transactions(h, pipeline=Pipeline("in", "out", source, drained=True))
    assert verdict.counts == {"lost-processing": 1}, verdict
    assert "'y'" in verdict.anomalies[0].explanation


def test_histories_recorded_apart_merge_in_time_order() -> None:
    """Two processes' histories (a worker's and the reader's), on one wall clock."""
    a = new_history()
    later = StepClock()
    later.ns = 100_000_000  # b's process started 100 ms later
    b = History(monotonic_ns=StepClock(), wall_ns=later)
    txn(a, "t1", [(0, b"a")], "commit")
    read(b, [(0, b"a")])
    merged = History.merged([b, a])
    assert [type(op).__name__ for op in merged.ops] == ["Send", "Txn", "Poll"]
    assert check_transactions(merged).ok


def test_a_history_that_tested_no_transaction_fails_saying_why() -> None:
    """No anomaly among no transactions is no evidence: a pipeline that never committed, or a
    reader that never read, must not pass a gate."""
    h = new_history()
    txn(h, "t1", [(0, b"a")], "abort")
    read(h, [(1, b"b")], committed=False)
    verdict = check_transactions(h)
    assert not verdict.ok and not verdict.counts
    assert verdict.unexercised == ["no transaction committed (1 transactions, 1 aborted)",
                                   "no record was read by a read_committed consumer"]
