"""The group coordinator's core (broker/groups/core.py) with no event loop and no broker: events
in, actions out. Each test feeds what GroupCoordinator (or the group simulation) would feed it —
a partition state, a request with its token, an append's outcome, a tick — and checks the
actions: which token is answered with what, what is appended where, what is loaded."""

from __future__ import annotations

import itertools
import logging

import pytest

from epochlog.broker.coordinator_shards import Append, Load
from epochlog.broker.groups import offsets_log
from epochlog.broker.groups.core import (
    PARK_MARGIN_MS,
    CommitAnswer,
    DeleteAnswer,
    GroupCore,
    LeaveAnswer,
    OffsetToCommit,
)
from epochlog.broker.groups.state import (
    CommittedOffset,
    GroupSettings,
    GroupSnapshot,
    GroupState,
    JoinRequest,
    JoinResult,
    MemberSnapshot,
    SyncResult,
)
from epochlog.protocol.control_records import marker_batch
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import decode_batch

from .core_recorder import Recorder

SESSION_MS = 10_000
REBALANCE_MS = 20_000
DELAY_MS = 100
GROUP = "g"


class Driver(Recorder):
    """Feeds the core as a driver does: tokens, a clock, appends answered on request."""

    def __init__(self) -> None:
        super().__init__()
        ids = itertools.count(1)
        self.core = GroupCore(GroupSettings(1000, 60_000, DELAY_MS),
                              partition_of=lambda group_id: 0,
                              partition_known=lambda topic, p: topic == "t",
                              metadata_max_bytes=10,
                              new_member_id=lambda prefix: f"{prefix}-{next(ids)}")

    def lead(self, epoch: int = 1, records: list | None = None) -> None:
        """Partition 0 led at epoch, its log (records: (key, value) or a marker) loaded."""
        self.run(self.core.partition_applied(0, epoch))
        for offset, record in enumerate(records or []):
            self.core.replay(0, epoch, offset, *record[:2], **(record[2] if len(record) > 2
                                                                else {}))
        self.run(self.core.loaded(self.now, 0, epoch, 0, len(records or []), 1))

    def ask(self, event: str, *args: object, **kw: object) -> int:
        token = next(self.tokens)
        method = getattr(self.core, event)
        if event in ("delete_group", "delete_offsets"):
            self.run(method(*args, token))
        else:
            self.run(method(self.now, self.now, *args, token, **kw))
        return token

    def join(self, member_id: str = "", instance: str | None = None) -> int:
        return self.ask("join", GROUP, JoinRequest(
            member_id, instance, "c", "/127.0.0.1", SESSION_MS, REBALANCE_MS, "consumer",
            (("range", b"r"),), True))

    def append_done(self, error: int = 0, first: int = 100) -> Append:
        a = self.next_append()
        self.run(self.core.appended(self.now, self.now, a.append_id, error, first))
        return a

    def advance(self, ms: int) -> None:
        self.now += ms
        self.run(self.core.tick(self.now, self.now))

    def formed(self) -> str:
        """Partition 0 led and loaded, and one member alone in generation 1: its id."""
        self.lead()
        member = self.member()
        self.join(member)
        self.advance(DELAY_MS)
        return member

    def member(self) -> str:
        """A member that joined (MEMBER_ID_REQUIRED, then its id) and whose join is parked."""
        first = self.join()
        answer = self.answers[first]
        assert isinstance(answer, JoinResult) and answer.error == E.MEMBER_ID_REQUIRED
        return answer.member_id


def offsets(*pairs: tuple[int, int]) -> list[OffsetToCommit]:
    return [OffsetToCommit("t", p, o, 3, "") for p, o in pairs]


def test_requests_before_a_load_and_while_loading_are_told_where_to_go() -> None:
    d = Driver()
    assert d.answers[d.join()] == JoinResult(E.NOT_COORDINATOR)
    d.run(d.core.partition_applied(0, 4))
    assert d.taken(Load) == [Load(0, 4)]
    t = d.ask("commit", GROUP, -1, "", None, offsets((0, 5)))
    assert d.answers[t] == CommitAnswer({("t", 0): E.COORDINATOR_LOAD_IN_PROGRESS})
    assert d.core.heartbeat(d.now, GROUP, 1, "m", None) == E.COORDINATOR_LOAD_IN_PROGRESS
    assert d.core.fetch_offsets(GROUP, None) == (E.COORDINATOR_LOAD_IN_PROGRESS, {})
    assert d.core.list_groups() == (E.COORDINATOR_LOAD_IN_PROGRESS, [])


def test_a_load_replays_group_records_offsets_and_transactions() -> None:
    snap = GroupSnapshot(GROUP, "consumer", 7, "range", "m-1", 0, (MemberSnapshot(
        "m-1", None, "c", "h", REBALANCE_MS, SESSION_MS, b"s", b"a"),))
    first = CommittedOffset(5, 1, "", 0)
    later = CommittedOffset(9, 1, "", 0)
    in_txn = CommittedOffset(20, 1, "", 0)
    records: list = [
        (offsets_log.group_key(GROUP), offsets_log.group_value(snap, 0)),
        (offsets_log.offset_key(GROUP, "t", 0), offsets_log.offset_value(first)),
        (offsets_log.offset_key(GROUP, "t", 0), offsets_log.offset_value(later)),
        (offsets_log.offset_key("other", "t", 1), offsets_log.offset_value(first)),
        (offsets_log.offset_key("other", "t", 1), None),  # a tombstone
        (offsets_log.offset_key(GROUP, "t", 2), offsets_log.offset_value(in_txn),
         {"producer_id": 77, "transactional": True}),
        (b"\x00", b"bad"),  # skipped, logged
    ]
    d = Driver()
    d.lead(records=records)
    assert d.core.describe(GROUP)[1].state is GroupState.STABLE  # type: ignore[union-attr]
    error, found = d.core.fetch_offsets(GROUP, [("t", 0), ("t", 2)])
    assert error == 0 and found[("t", 0)].offset == 9 and found[("t", 2)] is None  # type: ignore
    assert d.core.unstable(GROUP, [("t", 0), ("t", 2)]) == {("t", 2)}
    assert d.core.describe("other") == (0, None)  # only a tombstone left: not a group
    d.core.txn_marker(0, 77, True)  # the transaction's COMMIT marker arrives
    assert d.core.fetch_offsets(GROUP, [("t", 2)])[1][("t", 2)].offset == 20  # type: ignore
    assert d.core.counters.loads_total == 1


def test_a_marker_in_the_log_ends_its_transactions_offsets_while_loading() -> None:
    """A transaction's offsets take effect at its marker, but a commit written after them (and
    before the marker) is newer: it stays."""
    _, marker = decode_batch(marker_batch(77, 0, True, 1, 0))
    d = Driver()
    d.lead(records=[
        (offsets_log.offset_key(GROUP, "t", 2), offsets_log.offset_value(
            CommittedOffset(20, 1, "", 0, 0)), {"producer_id": 77, "transactional": True}),
        (offsets_log.offset_key(GROUP, "t", 3), offsets_log.offset_value(
            CommittedOffset(21, 1, "", 0, 1)), {"producer_id": 77, "transactional": True}),
        (offsets_log.offset_key(GROUP, "t", 3), offsets_log.offset_value(
            CommittedOffset(30, 1, "", 0, 2))),
        (marker[0].key, marker[0].value, {"producer_id": 77, "control": True})])
    _, found = d.core.fetch_offsets(GROUP, [("t", 2), ("t", 3)])
    assert {tp: c.offset for tp, c in found.items() if c} == {("t", 2): 20, ("t", 3): 30}
    assert d.core.unstable(GROUP, [("t", 2)]) == set()


def test_a_marker_that_comes_while_loading_applies_once_loaded() -> None:
    d = Driver()
    d.run(d.core.partition_applied(0, 1))
    d.core.replay(0, 1, 0, offsets_log.offset_key(GROUP, "t", 2), offsets_log.offset_value(
        CommittedOffset(20, 1, "", 0)), producer_id=77, transactional=True)
    d.core.txn_marker(0, 77, True)
    d.run(d.core.loaded(d.now, 0, 1, 0, 1, 1))
    assert d.core.fetch_offsets(GROUP, [("t", 2)])[1][("t", 2)].offset == 20  # type: ignore


def test_a_join_parks_until_the_group_answers_then_the_leader_stores_its_assignment() -> None:
    d = Driver()
    d.lead()
    member = d.member()
    parked = d.join(member)
    assert parked not in d.answers  # the initial rebalance delay
    d.advance(DELAY_MS)
    joined = d.answers[parked]
    assert isinstance(joined, JoinResult) and (joined.generation, joined.leader) == (1, member)
    assert d.core.counters.rebalances_total == 1
    sync = d.ask("sync", GROUP, 1, member, None, None, None, [(member, b"a")])
    assert sync not in d.answers and len(d.appends) == 1
    store = d.appends[0]
    assert (store.index, store.leader_epoch, store.producer) == (0, 1, None)
    assert offsets_log.parse(store.records[0][0], store.records[0][1], 0).snapshot.generation \
        == 1  # type: ignore[union-attr]
    assert store.errors[E.MESSAGE_TOO_LARGE] == E.UNKNOWN_SERVER_ERROR  # _STORE_ERRORS
    d.append_done()
    assert d.answers[sync] == SyncResult(0, "consumer", "range", b"a")
    assert d.core.counters.stores_total == 1


def test_a_failed_store_fails_the_sync_and_counts() -> None:
    d = Driver()
    member = d.formed()
    sync = d.ask("sync", GROUP, 1, member, None, None, None, [(member, b"a")])
    d.append_done(E.NOT_COORDINATOR)
    assert d.answers[sync] == SyncResult(E.NOT_COORDINATOR)
    assert (d.core.counters.stores_total, d.core.counters.store_failures_total) == (1, 1)


def test_the_park_limit_answers_rebalance_in_progress_and_a_later_reply_is_dropped() -> None:
    """The leader's sync waits for its store; an append that never ends leaves the group no
    deadline of its own (a member that waits is not expired): the park limit answers."""
    d = Driver()
    member = d.formed()
    parked = d.ask("sync", GROUP, 1, member, None, None, None, [(member, b"a")])
    limit_ms = REBALANCE_MS + PARK_MARGIN_MS
    assert d.core.next_deadline_ms() == d.now + limit_ms
    d.advance(limit_ms - 1)
    assert parked not in d.answers
    d.advance(1)
    assert d.answers[parked] == SyncResult(E.REBALANCE_IN_PROGRESS)
    d.append_done()  # the group answers the token now: dropped (the driver would assert)
    assert d.core.describe(GROUP)[1].state is GroupState.STABLE  # type: ignore[union-attr]


def test_a_static_member_s_new_process_waits_for_its_store_at_most_the_park_limit() -> None:
    d = Driver()
    d.lead()
    first = d.join(instance="i")
    d.advance(DELAY_MS)
    member = d.answers[first].member_id  # type: ignore[attr-defined]
    d.ask("sync", GROUP, 1, member, "i", None, None, [(member, b"a")])
    d.append_done()
    again = d.join(instance="i")  # a new process of the static member: stored, then answered
    assert again not in d.answers and len(d.appends) == 1
    limit_ms = max(REBALANCE_MS, SESSION_MS) + DELAY_MS + PARK_MARGIN_MS
    assert d.core.next_deadline_ms() == d.now + limit_ms
    d.advance(limit_ms)
    assert d.answers[again] == JoinResult(E.REBALANCE_IN_PROGRESS)


def test_unloading_answers_parked_requests_not_coordinator() -> None:
    d = Driver()
    d.lead()
    member = d.member()
    parked = d.join(member)
    d.run(d.core.leadership_lost(0))
    assert d.answers[parked] == JoinResult(E.NOT_COORDINATOR, member_id=member,
                                           protocol_type="consumer")
    assert d.core.counters.unloads_total == 1
    assert d.answers[d.join()] == JoinResult(E.NOT_COORDINATOR)


def test_a_commit_is_checked_appended_then_applied() -> None:
    d = Driver()
    d.lead()
    t = d.ask("commit", GROUP, -1, "", None, [
        OffsetToCommit("t", 0, 5, 3, ""), OffsetToCommit("t", 1, 6, 3, "far too long"),
        OffsetToCommit("nope", 0, 1, 3, "")])
    assert t not in d.answers
    a = d.appends[0]
    assert a.errors[E.MESSAGE_TOO_LARGE] == E.INVALID_COMMIT_OFFSET_SIZE  # _COMMIT_ERRORS
    assert offsets_log.parse(a.records[0][0], a.records[0][1], 0).committed.offset == 5  # type: ignore
    d.append_done(first=40)
    assert d.answers[t] == CommitAnswer({("t", 0): 0, ("t", 1): E.OFFSET_METADATA_TOO_LARGE,
                                         ("nope", 0): E.UNKNOWN_TOPIC_OR_PARTITION})
    got = d.core.fetch_offsets(GROUP, [("t", 0)])[1][("t", 0)]
    assert got is not None and (got.offset, got.record_offset, got.commit_timestamp_ms) == \
        (5, 40, d.now)
    assert d.core.counters.commits_total == 1


def test_a_failed_commit_applies_nothing_and_counts() -> None:
    d = Driver()
    d.lead()
    t = d.ask("commit", GROUP, -1, "", None, offsets((0, 5), (1, 6)))
    d.append_done(E.COORDINATOR_NOT_AVAILABLE)
    assert d.answers[t] == CommitAnswer({("t", 0): E.COORDINATOR_NOT_AVAILABLE,
                                         ("t", 1): E.COORDINATOR_NOT_AVAILABLE})
    assert d.core.fetch_offsets(GROUP, None) == (0, {})
    assert d.core.counters.commit_failures_total == 2


def test_commits_from_an_unknown_member_or_generation_are_refused() -> None:
    d = Driver()
    d.lead()
    t = d.ask("commit", GROUP, 3, "m", None, offsets((0, 5)))
    assert d.answers[t] == CommitAnswer({("t", 0): E.ILLEGAL_GENERATION}) and not d.appends


def test_a_transactional_commit_waits_for_its_marker() -> None:
    d = Driver()
    d.lead()
    t = d.ask("commit", GROUP, -1, "", None, offsets((0, 5)), producer=(77, 2))
    assert d.appends[0].producer == (77, 2)
    d.append_done(first=10)
    assert d.answers[t] == CommitAnswer({("t", 0): 0})
    assert d.core.unstable(GROUP, [("t", 0)]) == {("t", 0)}
    assert d.core.fetch_offsets(GROUP, [("t", 0)])[1] == {("t", 0): None}
    d.core.txn_marker(0, 77, False)  # aborted: dropped
    assert d.core.unstable(GROUP, [("t", 0)]) == set()
    assert d.core.fetch_offsets(GROUP, [("t", 0)])[1] == {("t", 0): None}


def test_leave_answers_at_once() -> None:
    d = Driver()
    d.lead()
    t = d.ask("leave", GROUP, [("nobody", None)])
    assert d.answers[t] == LeaveAnswer(0, (E.UNKNOWN_MEMBER_ID,))


def test_delete_a_group_once_its_tombstones_are_replicated() -> None:
    d = Driver()
    d.lead()
    d.ask("commit", GROUP, -1, "", None, offsets((0, 5)))
    d.append_done()
    t = d.ask("delete_group", GROUP)
    tombstones = d.appends[0].records
    assert [value for _, value in tombstones] == [None, None]
    assert d.core.describe(GROUP)[1] is not None
    d.append_done()
    assert d.answers[t] == DeleteAnswer(0) and d.core.describe(GROUP) == (0, None)
    assert d.answers[d.ask("delete_group", GROUP)] == DeleteAnswer(E.GROUP_ID_NOT_FOUND)


def test_delete_offsets_keeps_a_failed_append_s_offsets() -> None:
    d = Driver()
    d.lead()
    d.ask("commit", GROUP, -1, "", None, offsets((0, 5)))
    d.append_done()
    t = d.ask("delete_offsets", GROUP, [("t", 0), ("t", 1), ("x", 0)])
    d.append_done(E.NOT_COORDINATOR)
    assert d.answers[t] == DeleteAnswer(E.NOT_COORDINATOR)
    t = d.ask("delete_offsets", GROUP, [("t", 0), ("t", 1), ("x", 0)])
    d.append_done(first=200)
    assert d.answers[t] == DeleteAnswer(0, {("t", 0): 0, ("t", 1): 0,
                                            ("x", 0): E.UNKNOWN_TOPIC_OR_PARTITION})
    assert d.core.fetch_offsets(GROUP, None) == (0, {})


def test_an_append_that_ends_after_an_unload_changes_nothing_here() -> None:
    d = Driver()
    d.lead()
    t = d.ask("commit", GROUP, -1, "", None, offsets((0, 5)))
    d.run(d.core.partition_applied(0, 2))  # a new leader epoch: reloaded from the log
    d.append_done()
    assert d.answers[t] == CommitAnswer({("t", 0): 0})  # it is in the log all the same
    assert d.core.counters.commits_total == 0


def test_a_group_that_never_formed_is_forgotten_at_a_tick(caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    d = Driver()
    d.lead()
    d.member()  # asked for a member id, never came back with it
    d.advance(SESSION_MS)
    assert d.core.describe(GROUP)[1] is not None  # Empty, generation 0: forgotten next tick
    d.advance(1)
    assert d.core.describe(GROUP) == (0, None) and d.core.next_deadline_ms() is None
    with caplog.at_level(logging.INFO, "epochlog.broker"):
        d.run(d.core.unload_all("broker stopping"))
    assert caplog.messages == [
        "__consumer_offsets-0: unloaded 0 groups (leader epoch 1): broker stopping"]
