"""The group member's state machine (client/group_member.py), transition by transition, no network.

Each case is a script: one event per line, then `->` and the actions the machine must answer
with (summarised as words), then `@` and the phase it must be in. Clock values are the injected
`now_ms`; responses answer the machine's latest request of that API. The cases cover what
docs/design.md promises of a member: join and sync, heartbeats, a rebalance in progress, a fenced
generation, a coordinator that moves, a static member replaced, leaving on close, cooperative
revocation over two rounds, and the session and poll timeouts on the injected clock.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from epochlog.client.consumer_protocol import Assignment, Subscription, encode_assignment
from epochlog.client.consumer_protocol import encode_subscription as enc_sub
from epochlog.client.group_member import (
    Action,
    Assigned,
    CheckMetadata,
    CommitConsumed,
    Done,
    DropCoordinator,
    FindCoordinator,
    Lost,
    MemberMachine,
    MemberSettings,
    NeedPartitionCounts,
    Revoked,
    Send,
)
from epochlog.client.types import TopicPartition
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.heartbeat import HeartbeatResponse
from epochlog.protocol.apis.join_group import JoinGroupResponse, JoinGroupResponseMember
from epochlog.protocol.apis.leave_group import LeaveGroupResponse
from epochlog.protocol.apis.offset_commit import (
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from epochlog.protocol.apis.sync_group import SyncGroupResponse
from epochlog.protocol.error_codes import ErrorCode

SETTINGS = MemberSettings(group_id="g", session_timeout_ms=1000, heartbeat_interval_ms=100,
                          max_poll_interval_ms=5000, request_timeout_ms=2000,
                          retry_backoff_ms=50, auto_commit_interval_ms=10_000,
                          partition_assignment_strategy=("range",))
COOPERATIVE = dataclasses.replace(SETTINGS, partition_assignment_strategy=("cooperative-sticky",))
STATIC = dataclasses.replace(SETTINGS, group_instance_id="i1")
NO_AUTO = dataclasses.replace(SETTINGS, enable_auto_commit=False)


def _parts(text: str) -> list[TopicPartition]:
    out = []
    for item in filter(None, text.split(",")):
        topic, _, index = item.rpartition("-")
        out.append(TopicPartition(topic, int(index)))
    return out


def _names(parts: Any) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(parts)) or "-"


def summary(action: Action) -> str:
    match action:
        case FindCoordinator():
            return "find"
        case Send(api=api):
            return {ApiKey.JOIN_GROUP: "join", ApiKey.SYNC_GROUP: "sync",
                    ApiKey.HEARTBEAT: "heartbeat", ApiKey.LEAVE_GROUP: "leave",
                    ApiKey.OFFSET_COMMIT: "commit", ApiKey.OFFSET_FETCH: "fetch"}[api]
        case DropCoordinator():
            return "drop"
        case NeedPartitionCounts(topics=topics):
            return f"counts {','.join(sorted(topics))}"
        case CommitConsumed(partitions=parts):
            return f"commit-consumed {'all' if parts is None else _names(parts)}"
        case Revoked(partitions=parts):
            return f"revoked {_names(parts)}"
        case Lost(partitions=parts):
            return f"lost {_names(parts)}"
        case Assigned(partitions=parts, added=added):
            return f"assigned {_names(parts)} +{_names(added)}"
        case CheckMetadata():
            return "check-metadata"
        case Done(error=error):
            return "done" if error is None else f"done {type(error).__name__}"
    raise AssertionError(action)


class Driver:
    """Feeds a script's events to a machine and answers its requests as the script says."""

    def __init__(self, settings: MemberSettings) -> None:
        self.m = MemberMachine(settings)
        self.m.subscribe(["t"], None)
        self.sent: dict[str, tuple[int, Any]] = {}  # api word -> (rid, request), latest
        self.find_rid = -1
        self.commit_rid = -1

    def run(self, line: str) -> list[Action]:
        word, *args = line.split()
        now = int(args.pop(0)) if word in ("poll", "tick", "close") else self.m.now_ms
        return self.record(self.step(word, args, now))

    def record(self, actions: list[Action]) -> list[Action]:
        """Note the requests among actions, for the answers the script gives later."""
        for a in actions:
            if isinstance(a, Send):
                self.sent[summary(a)] = (a.rid, a.request)
            elif isinstance(a, FindCoordinator):
                self.find_rid = a.rid
            elif isinstance(a, NeedPartitionCounts):
                self.sent["counts"] = (a.rid, a.topics)
        return actions

    def step(self, word: str, args: list[str], now: int) -> list[Action]:
        m = self.m
        if word == "poll":
            return m.poll(now)
        if word == "tick":
            return m.tick(now)
        if word == "found":
            return m.on_coordinator(now, self.find_rid, 0, int(args[0]))
        if word == "find-failed":
            return m.on_coordinator(now, self.find_rid, -1, -1, "connection refused")
        if word == "counts":
            counts = {k: int(v) for k, v in (a.split("=") for a in args)}
            return m.on_partition_counts(now, self.sent["counts"][0], counts)
        if word == "commit":
            offsets = {tp: (5, 0) for tp in _parts(args[0])}
            self.commit_rid, out = m.commit(now, offsets)
            return out
        if word == "close":
            return m.close(now)
        if word == "leave":
            return m.leave(now, "closing")
        if word == "lost-connection":
            return m.on_failure(now, self.sent[args[0]][0], "connection reset")
        word = word.removesuffix("-reply")
        rid, request = self.sent[word]
        return m.on_response(now, rid, self.answer(word, args, request))

    def answer(self, api: str, args: list[str], request: Any) -> Any:
        code = int(ErrorCode[args[0]]) if args and args[0].isupper() else 0
        if api == "join":
            return self.join_answer(code, args, request)
        if api == "sync":
            parts = _parts(args[0]) if args and not code else []
            return SyncGroupResponse(error_code=code, assignment=encode_assignment(
                Assignment(partitions=parts)))
        if api == "heartbeat":
            return HeartbeatResponse(error_code=code)
        if api == "leave":
            return LeaveGroupResponse(error_code=code)
        if api == "commit":
            return OffsetCommitResponse(topics=[OffsetCommitResponseTopic(
                name=t.name, partitions=[OffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=code)
                    for p in t.partitions]) for t in request.topics])
        raise AssertionError(api)

    def join_answer(self, code: int, args: list[str], request: Any) -> JoinGroupResponse:
        if code == ErrorCode.MEMBER_ID_REQUIRED:
            return JoinGroupResponse(error_code=code, member_id="m1")
        if code:
            return JoinGroupResponse(error_code=code)
        options = dict(a.split("=") for a in args)
        me = request.member_id or "m1"
        leader = me if options.get("leader", "me") == "me" else options["leader"]
        members = [JoinGroupResponseMember(member_id=me, metadata=request.protocols[0].metadata)]
        for other in filter(None, options.get("others", "").split(",")):
            members.append(JoinGroupResponseMember(
                member_id=other, metadata=enc_sub(Subscription(topics=["t"]))))
        return JoinGroupResponse(
            generation_id=int(options.get("gen", "1")), protocol_name=request.protocols[0].name,
            leader=leader, member_id=me, members=members if leader == me else [])


# A stable member of generation 1 owning t-0 and t-1 (the prefix of most cases).
JOINED = """
poll 0              -> find                     @ joining
found 1             -> join                     @ joining
join MEMBER_ID_REQUIRED -> join                 @ joining
join gen=1          -> counts t                 @ syncing
counts t=2          -> sync                     @ syncing
sync t-0,t-1        ->                          @ stable
poll 10             -> assigned t-0,t-1 +t-0,t-1 @ stable
"""

CASES: dict[str, tuple[MemberSettings, str]] = {
    "join and sync as the leader, then heartbeats": (SETTINGS, JOINED + """
tick 99             ->                          @ stable
tick 130            -> heartbeat                @ stable
heartbeat           ->                          @ stable
tick 231            -> heartbeat                @ stable
"""),
    "a follower syncs without computing an assignment": (SETTINGS, """
poll 0              -> find                     @ joining
found 1             -> join                     @ joining
join gen=3 leader=m0 -> sync                    @ syncing
sync t-1            ->                          @ stable
poll 5              -> assigned t-1 +t-1        @ stable
"""),
    "rebalance in progress: eager revoke (with its commit) before the JoinGroup": (SETTINGS,
                                                                                   JOINED + """
tick 130            -> heartbeat                @ stable
heartbeat REBALANCE_IN_PROGRESS ->              @ stable
poll 140            -> commit-consumed t-0,t-1 revoked t-0,t-1 join @ joining
join gen=2 others=m2 -> counts t                @ syncing
counts t=2          -> sync                     @ syncing
sync t-0            ->                          @ stable
poll 150            -> assigned t-0 +t-0        @ stable
"""),
    "a join answered REBALANCE_IN_PROGRESS goes again at once": (SETTINGS, """
poll 0              -> find                     @ joining
found 1             -> join                     @ joining
join REBALANCE_IN_PROGRESS -> join              @ joining
join COORDINATOR_LOAD_IN_PROGRESS ->            @ joining
tick 49             ->                          @ joining
tick 50             -> join                     @ joining
"""),
    "generation fenced by ILLEGAL_GENERATION: partitions lost, then a new round": (SETTINGS,
                                                                                   JOINED + """
tick 130            -> heartbeat                @ stable
heartbeat ILLEGAL_GENERATION ->                 @ unjoined
poll 140            -> lost t-0,t-1 join        @ joining
"""),
    "generation fenced by UNKNOWN_MEMBER_ID: the member id is forgotten": (SETTINGS, JOINED + """
tick 130            -> heartbeat                @ stable
heartbeat UNKNOWN_MEMBER_ID ->                  @ unjoined
poll 140            -> lost t-0,t-1 join        @ joining
"""),
    "a generation lost before poll() took its assignment: nothing assigned": (SETTINGS, """
poll 0              -> find                     @ joining
found 1             -> join                     @ joining
join gen=3 leader=m0 -> sync                    @ syncing
sync t-1            ->                          @ stable
tick 100            -> heartbeat                @ stable
heartbeat ILLEGAL_GENERATION ->                 @ unjoined
poll 105            -> join                     @ joining
"""),
    "a commit refused as ILLEGAL_GENERATION fails and asks for a rejoin": (NO_AUTO, JOINED + """
commit t-0          -> commit                   @ stable
commit-reply ILLEGAL_GENERATION -> done CommitFailedError @ unjoined
poll 20             -> lost t-0,t-1 join        @ joining
"""),
    "coordinator moved (NOT_COORDINATOR on a heartbeat): find it again, keep the generation": (
        SETTINGS, JOINED + """
tick 130            -> heartbeat                @ stable
heartbeat NOT_COORDINATOR -> drop               @ stable
tick 231            -> find                     @ stable
found 2             -> heartbeat                @ stable
heartbeat           ->                          @ stable
"""),
    "coordinator not available during the join: back off, find again, join again": (SETTINGS, """
poll 0              -> find                     @ joining
found 1             -> join                     @ joining
join COORDINATOR_NOT_AVAILABLE -> drop          @ joining
tick 50             -> find                     @ joining
found 2             -> join                     @ joining
"""),
    "a commit through a coordinator move is sent again to the new one": (NO_AUTO, JOINED + """
commit t-0          -> commit                   @ stable
commit-reply NOT_COORDINATOR -> drop                  @ stable
tick 60             -> find                     @ stable
found 2             -> commit                   @ stable
commit-reply        -> done                     @ stable
"""),
    "the coordinator lost on the wire mid-join: the round goes on after the backoff": (SETTINGS, """
poll 0              -> find                     @ joining
found 1             -> join                     @ joining
lost-connection join -> drop                    @ joining
tick 50             -> find                     @ joining
found 1             -> join                     @ joining
"""),
    "static member replaced by a new process: the old one is fenced and fails": (STATIC,
                                                                                 JOINED + """
tick 130            -> heartbeat                @ stable
heartbeat FENCED_INSTANCE_ID ->                 @ unjoined
"""),
    "leave on close: commit, revoke, LeaveGroup": (SETTINGS, JOINED + """
close 20            -> commit-consumed all revoked t-0,t-1 @ stable
leave               -> leave                    @ unjoined
leave-reply         -> done                     @ unjoined
"""),
    "a static member does not leave on close (its instance id keeps its place)": (STATIC,
                                                                                  JOINED + """
close 20            -> commit-consumed all revoked t-0,t-1 @ stable
leave               ->                          @ unjoined
"""),
    "closing mid-join drops the connection the JoinGroup is parked on": (SETTINGS, """
poll 0              -> find                     @ joining
found 1             -> join                     @ joining
join MEMBER_ID_REQUIRED -> join                 @ joining
close 5             ->                          @ joining
leave               -> drop find                @ unjoined
found 1             -> leave                    @ unjoined
"""),
    "cooperative revocation takes two rounds": (COOPERATIVE, JOINED + """
tick 130            -> heartbeat                @ stable
heartbeat REBALANCE_IN_PROGRESS ->              @ stable
poll 140            -> join                     @ joining
join gen=2 leader=m2 -> sync                    @ syncing
sync t-0            ->                          @ stable
poll 150            -> commit-consumed t-1 revoked t-1 assigned t-0 +- join @ joining
join gen=3 leader=m2 -> sync                    @ syncing
sync t-0            ->                          @ stable
poll 170            -> assigned t-0 +-          @ stable
"""),
    "session timeout on the injected clock: no heartbeat answered, find the coordinator": (
        SETTINGS, JOINED + """
tick 130            -> heartbeat                @ stable
tick 1011           -> drop                     @ stable
tick 1020           -> find                     @ stable
found 2             -> heartbeat                @ stable
"""),
    "max.poll.interval.ms on the injected clock: leave, then the next poll() rejoins": (SETTINGS,
                                                                                       JOINED + """
tick 5011           -> leave                    @ unjoined
poll 5020           -> lost t-0,t-1 join        @ joining
"""),
    "an older commit still waiting is superseded by a newer one, and ends with it": (
        NO_AUTO, JOINED + """
commit t-0          -> commit                   @ stable
lost-connection commit -> drop                  @ stable
commit t-0,t-1      -> find                     @ stable
found 1             -> commit                   @ stable
commit-reply        -> done done                @ stable
"""),
    "a commit waiting for a coordinator that never comes gives up at its deadline": (NO_AUTO,
                                                                                     """
poll 0              -> find                     @ joining
find-failed         ->                          @ joining
commit t-0          ->                          @ joining
tick 50             -> find                     @ joining
find-failed         ->                          @ joining
tick 1999           -> find                     @ joining
tick 2000           -> done KafkaTimeoutError   @ joining
"""),
}


def _lines(script: str) -> list[tuple[str, str, str]]:
    out = []
    for raw in filter(str.strip, script.splitlines()):
        event, _, rest = raw.partition("->")
        expect, _, phase = rest.partition("@")
        out.append((event.strip(), " ".join(expect.split()), phase.strip()))
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_transitions(name: str) -> None:
    settings, script = CASES[name]
    driver = Driver(settings)
    for number, (event, expect, phase) in enumerate(_lines(script), 1):
        actions = driver.run(event)
        got = " ".join(summary(a) for a in actions)
        assert (got, driver.m.phase.value) == (expect, phase), f"line {number}: {event}"


def test_a_fenced_static_member_raises_from_poll() -> None:
    driver = Driver(STATIC)
    for event, _, _ in _lines(JOINED + "tick 130\nheartbeat FENCED_INSTANCE_ID"):
        driver.run(event)
    with pytest.raises(Exception, match="FENCED_INSTANCE_ID"):
        driver.m.poll(200)


def test_waiting_for_names_the_step() -> None:
    """A bounded wait says what it waited for: the coordinator, then the JoinGroup."""
    driver = Driver(SETTINGS)
    driver.run("poll 0")
    driver.run("find-failed")
    assert "the coordinator of group g" in driver.m.waiting_for()
    assert "connection refused" in driver.m.waiting_for()
    driver.run("tick 50")
    driver.run("found 1")
    driver.run("tick 80")
    assert driver.m.waiting_for().startswith("JoinGroup of group g at broker 1 for 80 ms")


def test_finding_a_gone_cluster_backs_off_to_a_second() -> None:
    """A cluster gone away is asked at most about once a second, not every retry_backoff_ms."""
    driver = Driver(SETTINGS)
    driver.run("poll 0")
    finds, now = 0, 0
    while now < 10_000:
        driver.run("find-failed")
        deadline = driver.m.next_deadline_ms()
        assert deadline is not None and deadline > now
        now = deadline
        finds += sum(isinstance(a, FindCoordinator) for a in driver.run(f"tick {now}"))
    assert 10 <= finds <= 20
    assert driver.m.unreachable_ms(now) >= 9_000  # what `consume --group` gives up on
    driver.run("found 1")
    assert driver.m.unreachable_ms(now) == 0


def test_a_leader_hands_out_partitions_withheld_for_a_revocation_that_never_came() -> None:
    """Cooperative: m2 owns t-0 and t-1 and must give one up; the leader withholds it for a
    round. If m2 never rejoins (a static member restarted into its place without a round), the
    leader rejoins after a session so that the partition is handed out."""
    driver = Driver(COOPERATIVE)
    for line in ("poll 0", "found 1"):
        driver.run(line)
    rid, request = driver.sent["join"]
    owner = Subscription(topics=["t"], owned_partitions=[TopicPartition("t", 0),
                                                         TopicPartition("t", 1)],
                         generation_id=1)
    answer = JoinGroupResponse(generation_id=2, protocol_name="cooperative-sticky",
                               leader="m1", member_id="m1", members=[
                                   JoinGroupResponseMember(member_id="m1",
                                                           metadata=request.protocols[0].metadata),
                                   JoinGroupResponseMember(member_id="m2", metadata=enc_sub(owner)),
                                   JoinGroupResponseMember(member_id="m3",
                                                           metadata=enc_sub(Subscription(["t"])))])
    assert [summary(a) for a in driver.record(driver.m.on_response(0, rid, answer))] == \
        ["counts t"]
    driver.run("counts t=2")
    assert driver.run("sync") == [] and driver.m.phase.value == "stable"
    driver.run("poll 10")
    assert driver.m.rejoin_reason is None
    driver.run("tick 999")
    driver.run("heartbeat")
    assert driver.m.rejoin_reason is None  # within the session: m2 may still revoke and rejoin
    driver.run("tick 1000")
    assert driver.m.rejoin_reason is not None and "withheld" in driver.m.rejoin_reason
    assert "join" in [summary(a) for a in driver.run("poll 1001")]


def test_transition_table_is_enforced() -> None:
    m = MemberMachine(SETTINGS)
    with pytest.raises(AssertionError, match="not a transition"):
        m._enter(m.phase.__class__.STABLE)
