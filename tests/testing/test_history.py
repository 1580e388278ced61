"""History: recording from threads and event loops, its limits, and its JSON-lines file."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from epochlog.testing import History, HistoryLimitError, HistoryLimits, check
from epochlog.testing.history import Fault, Poll, Send

from .histories import ack, new_history, poll


def test_ops_carry_monotonic_and_wall_times() -> None:
    h = new_history()
    op = h.send_started("p", "t", "text value", key=b"k")
    h.send_acked(op, 0, 7, leader_epoch=3)
    h.record_fault("pause", (3, "controller"), "SIGSTOP")
    send, fault = h.ops
    assert isinstance(send, Send) and isinstance(fault, Fault)
    assert send.value == b"text value" and send.key == b"k"  # str is recorded as UTF-8
    assert 0 < send.start_ms < send.t_ms < fault.t_ms  # type: ignore[operator]
    assert send.wall_ms == 1_700_000_000_000
    assert (send.offset, send.leader_epoch, send.partition) == (7, 3, 0)
    assert fault.targets == [3, "controller"]


def test_values_must_be_bytes_or_text() -> None:
    with pytest.raises(TypeError, match="records a value as bytes or str, not dict"):
        History().send_started("p", "t", {"a": 1})


def test_saved_and_loaded_history_is_the_same_and_checks_the_same(tmp_path: Path) -> None:
    h = new_history()
    h.expect_loss("unclean election")
    ack(h, b"\x00binary\xff", 0)
    ack(h, b"b", 1)
    failed = h.send_started("p", "t", b"c", partition=1)
    h.send_failed(failed, ConnectionError("broker gone"))
    h.send_started("p", "t", b"d")  # no outcome
    poll(h, [(0, b"\x00binary\xff")], group="g")
    h.record_commit("c", {("t", 0): (1, 0)}, group="g")
    h.record_rebalance("c", "lost", [("t", 0)], group="g")
    h.record_truncation("c", "t", 0, "error", 1, 2, "LogTruncationError")
    h.record_fault("partition", (1, 2), "{1} | {2, 3}")
    path = tmp_path / "history.jsonl"
    h.save(path)
    lines = path.read_text().splitlines()
    assert len(lines) == 1 + len(h)
    assert json.loads(lines[0])["type"] == "history"
    assert [json.loads(line)["type"] for line in lines[1:]] == [
        "loss-expected", "send", "send", "send", "send", "poll", "commit", "rebalance",
        "truncation", "fault"]
    loaded = History.load(path)
    assert loaded.ops == h.ops
    assert loaded.started_wall_ms == h.started_wall_ms
    assert check(loaded) == check(h)


def test_a_bad_line_is_refused_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    new_history().save(path)
    with open(path, "a") as f:
        f.write('{"type": "send", "t_ms": "soon"}\n')
    with pytest.raises(ValueError, match=r"history.jsonl:2: not a history line"):
        History.load(path)


def test_a_limit_is_an_error_naming_it_and_leaves_the_history_uncheckable() -> None:
    h = History(HistoryLimits(sends_max=2, polled_records_max=3))
    h.send_started("p", "t", b"1")
    h.send_started("p", "t", b"2")
    with pytest.raises(HistoryLimitError, match="sends_max=2"):
        h.send_started("p", "t", b"3")
    poll(h, [(0, b"1"), (1, b"2")])
    with pytest.raises(HistoryLimitError, match="polled_records_max=3"):
        poll(h, [(2, b"3"), (3, b"4")])  # a poll counts its records
    assert len(h) == 3
    with pytest.raises(ValueError, match="the history is incomplete"):
        check(h)


def test_threads_and_an_event_loop_record_at_once() -> None:
    h = History()
    per_thread, threads_count = 2000, 4

    def produce(name: str) -> None:
        for i in range(per_thread):
            op = h.send_started(name, "t", f"{name}-{i}", partition=0)
            h.send_acked(op, 0, i)

    async def consume() -> None:
        for i in range(per_thread):
            poll(h, [(i, f"x{i}".encode())], consumer="loop")
            if i % 100 == 0:
                await asyncio.sleep(0)

    threads = [threading.Thread(target=produce, args=(f"p{n}",)) for n in range(threads_count)]
    for t in threads:
        t.start()
    asyncio.run(consume())
    for t in threads:
        t.join()
    ops = h.ops
    assert sum(isinstance(op, Send) and op.acked for op in ops) == per_thread * threads_count
    assert sum(isinstance(op, Poll) for op in ops) == per_thread
    times = [op.t_ms for op in ops if isinstance(op, Poll)]
    assert times == sorted(times)  # recorded in order under the lock
