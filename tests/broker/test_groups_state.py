"""The group state machine (broker/groups/state.py) on an injected clock, with no I/O.

Each test drives a `Group` through Kafka's transitions with tokens standing for parked requests
and checks the effects: which parked request is answered with what, and which metadata record is
to be stored. Also: the offsets topic's record formats round-trip, and the group -> partition
hash is Java's (so Kafka's tools agree on the coordinator).
"""

from __future__ import annotations

import itertools

import pytest

from epochlog.broker.groups import offsets_log
from epochlog.broker.groups.state import (
    CommittedOffset,
    Group,
    GroupSettings,
    GroupState,
    JoinRequest,
    JoinResult,
    Reply,
    Store,
    SyncResult,
)
from epochlog.broker.internal_topics import java_string_hashcode, partition_for
from epochlog.protocol.error_codes import ErrorCode as E

S = GroupState
SESSION_MS = 10_000
REBALANCE_MS = 30_000


class Harness:
    """A group, a clock and a token counter; answers collected by token."""

    def __init__(self, delay_ms: int = 0) -> None:
        ids = itertools.count(1)
        self.now = 1_000
        self.group = Group("g", GroupSettings(1000, 60_000, delay_ms),
                           new_member_id=lambda prefix: f"{prefix}-{next(ids)}")
        self.tokens = itertools.count(100)
        self.answers: dict[int, JoinResult | SyncResult] = {}
        self.stores: list[Store] = []

    def apply(self, effects: list) -> None:
        for e in effects:
            if isinstance(e, Reply):
                assert e.token not in self.answers, "a token answered twice"
                self.answers[e.token] = e.result
            else:
                self.stores.append(e)

    def join(self, member_id: str = "", client: str = "c", instance: str | None = None,
             protocols: tuple = (("range", b"r"),), v4: bool = True,
             session_ms: int = SESSION_MS) -> int:
        token = next(self.tokens)
        self.apply(self.group.join(self.now, JoinRequest(
            member_id, instance, client, "/127.0.0.1", session_ms, REBALANCE_MS, "consumer",
            protocols, v4), token))
        return token

    def sync(self, member_id: str, generation: int, assignments: list | None = None,
             instance: str | None = None) -> int:
        token = next(self.tokens)
        self.apply(self.group.sync(self.now, generation, member_id, instance, None, None,
                                   assignments or [], token))
        return token

    def store_done(self, error: int = 0) -> None:
        store = self.stores.pop(0)
        self.apply(self.group.stored(self.now, store, error))

    def advance(self, ms: int) -> None:
        self.now += ms
        self.apply(self.group.tick(self.now))

    def new_member(self, client: str = "c", **kw) -> str:
        """MEMBER_ID_REQUIRED, then the join with the id given: the member id."""
        first = self.join(client=client, **kw)
        answer = self.answers[first]
        assert answer.error == E.MEMBER_ID_REQUIRED
        return answer.member_id

    def stable_group(self, clients: tuple[str, ...] = ("a",)) -> list[str]:
        """Members that joined and synced: a Stable group at generation 1."""
        ids = [self.new_member(c) for c in clients]
        joins = [self.join(i) for i in ids]
        assert all(self.answers[t].error == 0 for t in joins)
        leader = self.group.leader_id
        syncs = [self.sync(i, 1, [(m, m.encode()) for m in ids] if i == leader else None)
                 for i in ids]
        self.store_done()
        assert all(self.answers[t].error == 0 for t in syncs)
        assert self.group.state is S.STABLE
        return ids


def test_new_member_needs_a_member_id_then_leads_generation_1() -> None:
    h = Harness()
    member = h.new_member("client")
    assert member.startswith("client-") and member in h.group.pending_members
    assert h.group.state is S.EMPTY
    token = h.join(member)
    answer = h.answers[token]
    assert (answer.error, answer.generation, answer.leader, answer.member_id) == \
        (0, 1, member, member)
    assert answer.members == ((member, None, b"r"),) and answer.protocol_name == "range"
    assert h.group.state is S.COMPLETING_REBALANCE


def test_join_v3_gets_an_id_without_member_id_required() -> None:
    h = Harness()
    token = h.join(v4=False)
    assert h.answers[token].error == 0 and h.answers[token].generation == 1


def test_pending_member_that_never_rejoins_is_forgotten() -> None:
    h = Harness()
    h.new_member()
    h.advance(SESSION_MS + 1)
    assert not h.group.pending_members and h.group.state is S.EMPTY


def test_sync_stores_the_assignment_before_answering() -> None:
    h = Harness()
    a, b = h.new_member("a"), h.new_member("b")
    ja, jb = h.join(a), h.join(b)
    assert h.group.state is S.PREPARING_REBALANCE or h.answers[ja].error == 0
    assert h.answers[ja].generation == h.answers[jb].generation == 1
    leader = h.group.leader_id
    follower = b if leader == a else a
    assert h.answers[ja if leader == a else jb].members and \
        not h.answers[jb if leader == a else ja].members
    waiting = h.sync(follower, 1)
    assert waiting not in h.answers  # parked until the leader's assignment is stored
    leading = h.sync(leader, 1, [(a, b"A"), (b, b"B")])
    assert leading not in h.answers and h.stores[0].reason == "sync"
    assert h.group.state is S.COMPLETING_REBALANCE
    h.store_done()
    assert h.group.state is S.STABLE
    got = {leader: h.answers[leading].assignment, follower: h.answers[waiting].assignment}
    assert got == {a: b"A", b: b"B"}
    # In Stable, a late sync gets its assignment at once.
    again = h.sync(a, 1)
    assert h.answers[again].assignment == b"A"


def test_a_failed_store_fails_the_syncs_and_rebalances() -> None:
    h = Harness()
    a = h.new_member()
    h.join(a)
    token = h.sync(a, 1, [(a, b"x")])
    h.store_done(E.NOT_COORDINATOR)
    assert h.answers[token].error == E.NOT_COORDINATOR
    assert h.group.state is S.PREPARING_REBALANCE


def test_new_member_triggers_rebalance_and_heartbeats_say_so() -> None:
    h = Harness()
    [a] = h.stable_group(("a",))
    b = h.new_member("b")
    jb = h.join(b)
    assert h.group.state is S.PREPARING_REBALANCE and jb not in h.answers
    assert h.group.heartbeat(h.now, 1, a, None) == E.REBALANCE_IN_PROGRESS
    ja = h.join(a)
    assert h.answers[ja].generation == h.answers[jb].generation == 2
    assert h.group.state is S.COMPLETING_REBALANCE
    assert h.group.heartbeat(h.now, 2, a, None) == 0  # heartbeats go on while syncing


def test_heartbeat_errors() -> None:
    h = Harness()
    [a] = h.stable_group()
    assert h.group.heartbeat(h.now, 1, a, None) == 0
    assert h.group.heartbeat(h.now, 0, a, None) == E.ILLEGAL_GENERATION
    assert h.group.heartbeat(h.now, 1, "nobody", None) == E.UNKNOWN_MEMBER_ID
    assert h.group.sync(h.now, 7, a, None, None, None, [], 1)[0].result.error == \
        E.ILLEGAL_GENERATION


def test_stable_member_rejoining_unchanged_gets_the_current_generation() -> None:
    h = Harness()
    a, b = h.stable_group(("a", "b"))
    follower = b if h.group.leader_id == a else a
    token = h.join(follower)
    assert h.answers[token].error == 0 and h.answers[token].generation == 1
    assert h.group.state is S.STABLE
    # The leader rejoining starts a rebalance (it may want to assign again).
    h.join(h.group.leader_id or "")
    assert h.group.state is S.PREPARING_REBALANCE


def test_protocol_selected_by_votes_among_common_ones() -> None:
    h = Harness()
    both = (("roundrobin", b"1"), ("range", b"2"))
    a = h.new_member("a", protocols=both)
    b = h.new_member("b", protocols=(("range", b"3"), ("roundrobin", b"4")))
    c = h.new_member("c", protocols=(("range", b"5"), ("sticky", b"6")))
    tokens = [h.join(a, protocols=both), h.join(b, protocols=(("range", b"3"),
                                                               ("roundrobin", b"4"))),
              h.join(c, protocols=(("range", b"5"), ("sticky", b"6")))]
    assert {h.answers[t].protocol_name for t in tokens} == {"range"}
    # A joiner sharing no protocol with the members is refused.
    d = h.join(protocols=(("sticky", b""),))
    assert h.answers[d].error == E.INCONSISTENT_GROUP_PROTOCOL


def test_session_timeout_expels_a_silent_member() -> None:
    h = Harness()
    a, b = h.stable_group(("a", "b"))
    for _ in range(3):
        h.advance(SESSION_MS // 2)
        assert h.group.heartbeat(h.now, 1, a, None) in (0, E.REBALANCE_IN_PROGRESS)
    assert b not in h.group.members and h.group.state is S.PREPARING_REBALANCE
    token = h.join(a)
    assert h.answers[token].generation == 2 and h.answers[token].members == (
        (a, None, b"r"),)


def test_rebalance_timeout_removes_members_that_do_not_rejoin() -> None:
    h = Harness()
    a, b = h.stable_group(("a", "b"))
    c = h.new_member("c")
    jc = h.join(c)
    h.advance(SESSION_MS - 1)
    h.join(a)  # b neither rejoins nor heartbeats; a heartbeated by joining
    h.group.heartbeat(h.now, 1, b, None)  # b's session is kept, but it never rejoins
    for _ in range(REBALANCE_MS // 5000):
        h.advance(5000)
        h.group.heartbeat(h.now, 1, b, None)
    assert h.answers[jc].error == 0 and h.answers[jc].generation == 2
    assert set(h.group.members) == {a, c}


def test_last_member_leaving_empties_the_group() -> None:
    h = Harness()
    [a] = h.stable_group()
    errors, effects = h.group.leave(h.now, [(a, None)])
    h.apply(effects)
    assert errors == [0] and h.group.state is S.EMPTY and h.group.generation == 2
    assert h.stores[-1].reason == "empty" and h.stores[-1].snapshot.members == ()
    errors, _ = h.group.leave(h.now, [(a, None)])
    assert errors == [E.UNKNOWN_MEMBER_ID]


def test_initial_rebalance_delay_waits_and_extends_for_newcomers() -> None:
    h = Harness(delay_ms=3000)
    a = h.new_member("a")
    ja = h.join(a)
    h.advance(2000)
    assert ja not in h.answers and h.group.state is S.PREPARING_REBALANCE
    b = h.new_member("b")
    jb = h.join(b)
    h.advance(1000)  # the first delay ends, but b came meanwhile: one more delay
    assert ja not in h.answers
    h.advance(3000)
    assert h.answers[ja].generation == h.answers[jb].generation == 1


def test_sync_deadline_removes_members_when_the_leader_never_syncs() -> None:
    h = Harness()
    a, b = h.new_member("a"), h.new_member("b")
    h.join(a)
    h.join(b)
    follower = b if h.group.leader_id == a else a
    waiting = h.sync(follower, 1)
    h.advance(REBALANCE_MS + 1)
    assert set(h.group.members) == {follower}
    assert h.answers[waiting].error == E.REBALANCE_IN_PROGRESS
    assert h.group.state in (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE)


def test_invalid_session_timeout_and_protocol_type() -> None:
    h = Harness()
    t = h.join(session_ms=10)
    assert h.answers[t].error == E.INVALID_SESSION_TIMEOUT
    t = h.join(protocols=())
    assert h.answers[t].error == E.INCONSISTENT_GROUP_PROTOCOL


def test_static_member_rejoins_without_rebalance_and_fences_the_old_id() -> None:
    h = Harness()
    old = h.join(instance="i-1")  # static: no MEMBER_ID_REQUIRED
    old_id = h.answers[old].member_id
    assert h.answers[old].error == 0
    h.sync(old_id, 1, [(old_id, b"assigned")], instance="i-1")
    h.store_done()
    assert h.group.state is S.STABLE
    again = h.join(instance="i-1")  # a new process with the same instance id
    assert again not in h.answers and h.stores[0].reason == "static"
    h.store_done()
    answer = h.answers[again]
    assert answer.error == 0 and answer.generation == 1 and answer.member_id != old_id
    assert answer.leader == old_id and answer.members == ()  # no one assigns again
    assert h.group.state is S.STABLE and h.group.generation == 1
    assert h.group.members[answer.member_id].assignment == b"assigned"
    assert h.group.heartbeat(h.now, 1, old_id, "i-1") == E.FENCED_INSTANCE_ID
    assert h.group.heartbeat(h.now, 1, answer.member_id, "i-1") == 0
    sync = h.sync(answer.member_id, 1, instance="i-1")
    assert h.answers[sync].assignment == b"assigned"


def test_static_member_with_other_protocols_causes_rebalance() -> None:
    h = Harness()
    old = h.join(instance="i-1")
    old_id = h.answers[old].member_id
    h.sync(old_id, 1, [(old_id, b"")], instance="i-1")
    h.store_done()
    h.join(instance="i-1", protocols=(("roundrobin", b""), ("range", b"")))
    assert h.group.state in (S.PREPARING_REBALANCE, S.COMPLETING_REBALANCE)
    assert h.group.generation == 2 and h.group.protocol_name == "roundrobin"


def test_static_leave_by_instance_id() -> None:
    h = Harness()
    t = h.join(instance="i-1")
    member = h.answers[t].member_id
    errors, _ = h.group.leave(h.now, [("wrong-id", "i-1"), ("", "i-9"), ("", "i-1")])
    assert errors == [E.FENCED_INSTANCE_ID, E.UNKNOWN_MEMBER_ID, 0]
    assert member not in h.group.members and "i-1" not in h.group.static_members


def test_commit_rules() -> None:
    h = Harness()
    assert h.group.commit_error(h.now, -1, "", None) == 0  # simple consumer, Empty group
    a = h.new_member()
    h.join(a)
    assert h.group.commit_error(h.now, 1, a, None) == E.REBALANCE_IN_PROGRESS
    # Kafka checks the generation first: an older one is ILLEGAL_GENERATION even mid-rebalance
    assert h.group.commit_error(h.now, 0, a, None) == E.ILLEGAL_GENERATION
    assert h.group.commit_error(h.now, 1, "stranger", None) == E.UNKNOWN_MEMBER_ID
    h.sync(a, 1, [(a, b"")])
    h.store_done()
    assert h.group.commit_error(h.now, 1, a, None) == 0
    assert h.group.commit_error(h.now, 0, a, None) == E.ILLEGAL_GENERATION
    assert h.group.commit_error(h.now, -1, "", None) == E.UNKNOWN_MEMBER_ID


def test_offsets_keep_the_later_record() -> None:
    g = Harness().group
    g.apply_offset(("t", 0), CommittedOffset(10, 3, "", 0, 20), 20)
    g.apply_offset(("t", 0), CommittedOffset(5, 2, "", 0, 19), 19)  # finished later, older
    assert g.offsets[("t", 0)].offset == 10


def test_unload_answers_parked_requests() -> None:
    h = Harness()
    a = h.new_member()
    h.join(a)
    token = h.sync(a, 1)
    h.apply(h.group.unload(E.NOT_COORDINATOR))
    assert h.answers[token].error == E.NOT_COORDINATOR and h.group.state is S.DEAD
    assert h.group.heartbeat(h.now, 1, a, None) == E.COORDINATOR_NOT_AVAILABLE


def test_a_new_coordinator_resumes_a_lost_rebalance_from_the_stored_generation() -> None:
    """The coordinator died in CompletingRebalance: generation 2 was never stored, so the new
    coordinator has generation 1 (Stable, a and b). What the members of the lost generation get
    there is what tells each of them to rejoin; the group then forms generation 2 again."""
    old = Harness()
    a, b = old.stable_group(("a", "b"))
    stored = old.group.snapshot(old.now)  # what generation 1's sync stored
    leader = old.group.leader_id
    assert leader is not None
    follower = b if leader == a else a
    c = old.new_member("c")
    for member in (c, a, b):
        old.join(member)
    assert old.group.state is S.COMPLETING_REBALANCE and old.group.generation == 2

    h = Harness()
    h.group = Group.from_snapshot(stored, h.group.settings, h.now,
                                  new_member_id=lambda prefix: f"{prefix}-new")
    assert (h.group.state, h.group.generation, h.group.leader_id) == (S.STABLE, 1, leader)
    assert h.answers[h.sync(leader, 2, [(a, b"A2")])].error == E.ILLEGAL_GENERATION
    assert h.group.heartbeat(h.now, 2, follower, None) == E.ILLEGAL_GENERATION
    assert h.answers[h.join(c)].error == E.UNKNOWN_MEMBER_ID  # not in the stored record
    back = h.join(follower)  # unchanged protocols: generation 1 again, no rebalance
    assert (h.answers[back].error, h.answers[back].generation) == (0, 1)
    assert h.answers[h.sync(follower, 1)].assignment == follower.encode()
    assert h.group.state is S.STABLE
    lead = h.join(leader)  # the leader's rejoin starts the rebalance
    assert h.group.state is S.PREPARING_REBALANCE and lead not in h.answers
    newcomer = h.new_member("c")
    joins = [lead, h.join(newcomer), h.join(follower)]
    assert [h.answers[t].generation for t in joins] == [2, 2, 2]
    assert {m for m, _, _ in h.answers[lead].members} == {a, b, newcomer}
    assert h.group.state is S.COMPLETING_REBALANCE


def test_invalid_transition_is_a_bug() -> None:
    g = Harness().group
    with pytest.raises(AssertionError):
        g._transition(S.STABLE, 0)


def test_records_round_trip_in_kafkas_formats() -> None:
    h = Harness()
    [a] = h.stable_group()
    snap = h.group.snapshot(h.now)
    key, value = offsets_log.group_key("g"), offsets_log.group_value(snap, 123)
    assert key == b"\x00\x02\x00\x01g" and value[:2] == b"\x00\x03"
    parsed = offsets_log.parse(key, value, 7)
    assert isinstance(parsed, offsets_log.GroupRecord)
    loaded = Group.from_snapshot(parsed.snapshot, h.group.settings, 0)
    assert loaded.state is S.STABLE and loaded.generation == 1 and list(loaded.members) == [a]
    assert loaded.members[a].assignment == a.encode()
    okey = offsets_log.offset_key("g", "t", 3)
    assert okey == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    ovalue = offsets_log.offset_value(CommittedOffset(42, 5, "m", 99))
    assert ovalue == (b"\x00\x03" + (42).to_bytes(8, "big") + (5).to_bytes(4, "big")
                      + b"\x00\x01m" + (99).to_bytes(8, "big"))
    got = offsets_log.parse(okey, ovalue, 8)
    assert isinstance(got, offsets_log.OffsetRecord) and got.committed == CommittedOffset(
        42, 5, "m", 99, 8)
    assert offsets_log.parse(okey, None, 9).committed is None  # a tombstone
    with pytest.raises(offsets_log.BadRecord):
        offsets_log.parse(b"\x00\x01\x00", b"", 10)


def test_group_partition_is_javas_hash() -> None:
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("abc") == 96354
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(1 << 31)
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50
