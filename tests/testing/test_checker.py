"""The checker can fail: each anomaly kind, fed a history that has it, is caught, and the same
history without the fault passes. Histories are written by hand as a client records them."""

from __future__ import annotations

from epochlog.testing import History, check
from epochlog.testing.checker import KINDS, Verdict

from .histories import ack, new_history, poll


def kinds(verdict: Verdict) -> set[str]:
    return {a.kind for a in verdict.anomalies}


def one(verdict: Verdict, kind: str) -> str:
    found = [a for a in verdict.anomalies if a.kind == kind]
    assert len(found) == 1, verdict
    return found[0].explanation


def written(h: History, n: int, **kw: object) -> list[tuple[int, bytes]]:
    """n values acknowledged at offsets 0..n-1."""
    pairs = [(i, f"v{i}".encode()) for i in range(n)]
    for offset, value in pairs:
        ack(h, value, offset, **kw)  # type: ignore[arg-type]
    return pairs


def test_a_clean_history_passes() -> None:
    h = new_history()
    log = written(h, 6)
    h.record_rebalance("c", "assigned", [("t", 0)], group="g")
    poll(h, log[:3], group="g")
    h.record_commit("c", {("t", 0): (3, 0)}, group="g")
    h.record_rebalance("c", "revoked", [("t", 0)], group="g")
    h.record_rebalance("d", "assigned", [("t", 0)], group="g")
    poll(h, log[2:], consumer="d", group="g")  # re-reads offset 2: a new owner, allowed
    h.record_fault("kill", (2,), "SIGKILL broker 2")
    verdict = check(h)
    assert verdict.ok and not verdict.anomalies, verdict
    assert verdict.stats["sends_acked"] == 6 and verdict.stats["values_read"] == 6


def test_a_history_that_tested_nothing_fails_saying_why() -> None:
    """No anomaly in a history with nothing in it is no evidence: a client library that did not
    load, or a cluster nobody reached, must not pass a gate."""
    empty = check(new_history())
    assert not empty.ok and not empty.anomalies
    assert empty.unexercised == ["no send was acknowledged (0 sends, 0 failed)",
                                 "no record was read: no poll returned one"]
    assert "nothing tested: no send was acknowledged" in str(empty)

    refused = new_history()
    op = refused.send_started("p", "t", b"a", partition=0)
    refused.send_failed(op, ConnectionError("no broker answered"))
    verdict = check(refused)
    assert not verdict.ok
    assert verdict.unexercised == [
        "no send was acknowledged (1 sends, 1 failed; the first error: ConnectionError: no "
        "broker answered)", "no record was read: no poll returned one"]

    only_read = new_history()  # reads, but of nothing this history sent
    poll(only_read, [(0, b"a")])
    assert check(only_read).unexercised == ["no send was acknowledged (0 sends, 0 failed)"]


def test_every_kind_has_a_test_here() -> None:
    tested = {name.removeprefix("test_").replace("_", "-") for name in globals()
              if name.startswith("test_")}
    assert set(KINDS) <= tested, set(KINDS) - tested


def test_lost_write() -> None:
    h = new_history()
    log = written(h, 3)
    poll(h, [log[0], log[2]])
    poll(h, [log[0], log[2]], consumer="d")
    verdict = check(h)
    assert not verdict.ok
    assert "b'v1' was acknowledged at offset 1" in one(verdict, "lost-write")


def test_duplicate() -> None:
    h = new_history()
    ack(h, b"a", 0)
    poll(h, [(0, b"a"), (1, b"a")])
    verdict = check(h)
    assert not verdict.ok
    assert "b'a' is at offsets 0, 1" in one(verdict, "duplicate")


def test_inconsistent_offsets() -> None:
    h = new_history()
    ack(h, b"a", 0)
    poll(h, [(0, b"b")])
    verdict = check(h)
    assert not verdict.ok
    assert "offset 0 was observed holding 2 values" in one(verdict, "inconsistent-offsets")


def test_nonmonotonic_poll() -> None:
    h = new_history()
    log = written(h, 2)
    poll(h, log)
    poll(h, log[1:])  # offset 1 again, with no rebalance or seek in between
    verdict = check(h)
    assert not verdict.ok
    assert "read offset 1 (op 3) after offset 1 (op 2), between polls" in \
        one(verdict, "nonmonotonic-poll")


def test_nonmonotonic_poll_within_one_poll() -> None:
    h = new_history()
    log = written(h, 2)
    poll(h, [log[1], log[0]])
    assert "within one poll" in one(check(h), "nonmonotonic-poll")


def test_nonmonotonic_send() -> None:
    h = new_history()
    ack(h, b"x", 5)
    ack(h, b"y", 3)
    poll(h, [(3, b"y")])
    poll(h, [(5, b"x")], consumer="d")
    verdict = check(h)
    assert not verdict.ok
    assert "sent b'y' (op 1) after b'x' (op 0), and it got offset 3, not after 5" in \
        one(verdict, "nonmonotonic-send")


def test_poll_skip() -> None:
    h = new_history()
    log = written(h, 3)
    poll(h, log[:1])
    poll(h, log[2:])  # jumps over offset 1, which another consumer read
    poll(h, log, consumer="d")
    verdict = check(h)
    assert not verdict.ok
    assert "skipping 1 known record(s) at 1" in one(verdict, "poll-skip")


def test_unseen() -> None:
    h = new_history()
    log = written(h, 3)
    poll(h, log[:1])
    verdict = check(h)
    assert not verdict.ok
    assert "2 acknowledged value(s) never polled" in one(verdict, "unseen")
    assert "lost-write" not in kinds(verdict)  # past the highest read: not lost, just unseen


def truncated(h: History, report: bool) -> None:
    """A consumer reads a0 a1 a2 from the old leader; an unclean election keeps only a0; the new
    leader takes b1 b2 b3; the consumer goes on (reporting the truncation or not), and a final
    read-back reads the log as it ends."""
    for i in range(3):
        ack(h, f"a{i}".encode(), i, epoch=1)
    h.record_rebalance("c", "assigned", [("t", 0)], group="g")
    poll(h, [(i, f"a{i}".encode()) for i in range(3)], epoch=1, group="g")
    h.record_fault("kill", (1,), "SIGKILL the leader; unclean election")
    for i in (1, 2, 3):
        ack(h, f"b{i}".encode(), i, producer="q", epoch=2)
    if report:
        h.record_truncation("c", "t", 0, "reset", 1, 0, "log truncation detected", group="g")
        poll(h, [(i, f"b{i}".encode()) for i in (1, 2, 3)], epoch=2, group="g")
    else:
        poll(h, [(3, b"b3")], epoch=2, group="g")  # carries on at its position: 3
    poll(h, [(0, b"a0")] + [(i, f"b{i}".encode()) for i in (1, 2, 3)], consumer="final")


def test_unreported_truncation() -> None:
    h = new_history()
    truncated(h, report=False)
    verdict = check(h)
    assert not verdict.ok
    assert "c read offset 1 (op 4), which the log no longer holds, then read on at offset 3" in \
        one(verdict, "unreported-truncation")


def test_a_reported_truncation_is_no_anomaly_of_the_consumer() -> None:
    h = new_history()
    truncated(h, report=True)
    verdict = check(h)
    assert "unreported-truncation" not in kinds(verdict)
    assert not verdict.ok  # the loss itself was not declared expected
    assert kinds(verdict) == {"inconsistent-offsets"}


def test_going_back_to_where_the_logs_part_is_meeting_the_truncation() -> None:
    """librdkafka and kafka-python, with an automatic reset, move a consumer back to where its
    log and the leader's part, telling the application nothing: no records were skipped."""
    h = new_history()
    h.expect_loss("unclean election with acks=1")
    for i in range(3):
        ack(h, f"a{i}".encode(), i, epoch=1)
    poll(h, [(i, f"a{i}".encode()) for i in range(3)], epoch=1)
    for i in (1, 2, 3):
        ack(h, f"b{i}".encode(), i, producer="q", epoch=2)
    poll(h, [(i, f"b{i}".encode()) for i in (1, 2, 3)], epoch=2)  # back to 1, unannounced
    verdict = check(h)
    assert verdict.ok, verdict
    assert "unreported-truncation" not in kinds(verdict)
    assert "c read offset 1 (op 8) after offset 2 (op 4)" in one(verdict, "nonmonotonic-poll")


def test_declared_loss_is_reported_as_expected_and_passes() -> None:
    h = new_history()
    h.expect_loss("unclean election with acks=1")
    truncated(h, report=True)
    ack(h, b"lost-unread", 4, epoch=1)  # acknowledged by the old leader, never read by anyone
    verdict = check(h)
    assert verdict.ok, verdict
    assert verdict.loss_expected
    assert verdict.counts["inconsistent-offsets"] == 2 and not verdict.failing
    assert all(a.expected for a in verdict.anomalies)
    assert "(loss declared expected)" in str(verdict)


def test_declared_loss_still_fails_an_unreported_truncation() -> None:
    h = new_history()
    h.expect_loss("unclean election with acks=1")
    truncated(h, report=False)
    verdict = check(h)
    assert not verdict.ok
    assert verdict.failing == {"unreported-truncation": 1}, verdict


def test_declared_loss_does_not_excuse_a_duplicate_both_in_the_log() -> None:
    h = new_history()
    h.expect_loss("unclean election with acks=1")
    ack(h, b"a", 0)
    poll(h, [(0, b"a"), (1, b"a")])
    assert check(h).failing == {"duplicate": 1}


def test_a_new_member_starting_from_a_stale_commit_must_report() -> None:
    """Member c reads a0..a2 (a1, a2 then lost), commits 3 and leaves; member d, given the
    partition, starts at the committed 3 without validating it: it skipped b1 and b2 silently."""
    h = new_history()
    for i in range(3):
        ack(h, f"a{i}".encode(), i, epoch=1)
    h.record_rebalance("c", "assigned", [("t", 0)], group="g")
    poll(h, [(i, f"a{i}".encode()) for i in range(3)], epoch=1, group="g")
    for i in (1, 2, 3):
        ack(h, f"b{i}".encode(), i, producer="q", epoch=2)
    h.record_commit("c", {("t", 0): (3, 1)}, group="g")
    h.record_rebalance("c", "revoked", [("t", 0)], group="g")
    h.record_rebalance("d", "assigned", [("t", 0)], group="g")
    poll(h, [(3, b"b3")], consumer="d", epoch=2, group="g")
    poll(h, [(0, b"a0")] + [(i, f"b{i}".encode()) for i in (1, 2, 3)], consumer="final")
    verdict = check(h)
    assert "d started at offset 3 (op 11) from offset 3 committed (op 8) by a member whose " \
        "log parted from the final one at offset 1" in one(verdict, "unreported-truncation")


def test_rebalances_and_seeks_start_a_reading_afresh() -> None:
    h = new_history()
    log = written(h, 4)
    poll(h, log[:2])
    h.record_rebalance("c", "revoked", [("t", 0)])
    h.record_rebalance("c", "assigned", [("t", 0)])
    poll(h, log[:1])  # back to 0 after a rebalance: allowed
    h.record_truncation("c", "t", 0, "seek", 3)
    poll(h, log[3:])  # forward to 3 after a seek: allowed
    poll(h, log, consumer="final")
    assert check(h).ok


def test_gaps_nobody_observed_are_not_skips() -> None:
    """Transaction markers or unrecorded writers take offsets that no one observes."""
    h = new_history()
    ack(h, b"a", 0)
    ack(h, b"b", 5)
    poll(h, [(0, b"a"), (5, b"b")])
    assert check(h).ok


def test_sends_without_an_outcome_and_failed_sends_are_not_lost() -> None:
    h = new_history()
    h.send_started("p", "t", b"unknown", partition=0)
    failed = h.send_started("p", "t", b"failed", partition=0)
    h.send_failed(failed, TimeoutError("delivery timed out"))
    ack(h, b"a", 0)
    poll(h, [(0, b"a")])
    verdict = check(h)
    assert verdict.ok
    assert verdict.stats["sends_unknown"] == 1 and verdict.stats["sends_failed"] == 1


def test_anomalies_listed_are_bounded_but_counted() -> None:
    h = new_history()
    log = written(h, 50)
    poll(h, log[49:])
    poll(h, log[49:], consumer="d")
    verdict = check(h, anomalies_per_kind_max=10)
    assert verdict.counts["lost-write"] == 49
    assert sum(a.kind == "lost-write" for a in verdict.anomalies) == 10


def test_the_summary_counts_the_rest_of_what_was_found_not_of_what_was_listed() -> None:
    """The verdict lists at most anomalies_per_kind_max of each kind but counts them all: its
    "and N more" is the true remainder of the count (a run once said "and 82 more" where 265
    anomalies were counted)."""
    h = new_history()
    log = written(h, 150)
    poll(h, [log[0], log[-1]])  # 148 lost writes and one poll skip: 149 counted
    verdict = check(h)
    assert sum(verdict.counts.values()) == 149 and len(verdict.anomalies) == 101, verdict.counts
    lines = str(verdict).splitlines()
    assert lines[-1] == "  ... and 129 more (149 counted)", lines[-1]
    assert len([line for line in lines if ": t-0: " in line]) == 20
