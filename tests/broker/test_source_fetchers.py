"""Which source each followed partition belongs to, and each source's next step
(broker/source_fetchers.py), event by event with a number for the clock. The per-partition
follower (follower.SourceFetcher, tested in test_follower.py) is played by a small fake that
hands out the requests a test gives it, so what is checked here is the machine's own part:
the routing table of on_partition, connect and its backoff (RETRY_FIRST_MS doubling to
backoff_ms, cut short by a partition coming or going), one request at a time, sleeping until
the follower's next wakeup, a source without partitions ending, close()."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from epochlog.broker.follower import RETRY_FIRST_MS
from epochlog.broker.partition import Role
from epochlog.broker.source_fetchers import (
    Connect,
    End,
    Idle,
    Send,
    SourceFetchers,
    StartSource,
    WakeSource,
)

BACKOFF_MS = 500
ME, A, B = 1, 2, 3


class FakeFollower:
    """What SourceFetchers uses of follower.SourceFetcher."""

    def __init__(self, source_id: int) -> None:
        self.source_id = source_id
        self.partitions: set[tuple[str, int]] = set()
        self.requests: list[tuple[int, Any]] = []  # what next_request hands out, in order
        self.wakeup: int | None = None
        self.failures: list[str] = []
        self.in_flight = False

    def add(self, partition: Any) -> None:
        self.partitions.add((partition.topic, partition.index))

    def remove(self, topic: str, index: int) -> None:
        self.partitions.discard((topic, index))

    def __len__(self) -> int:
        return len(self.partitions)

    def next_request(self) -> tuple[int, Any] | None:
        if self.in_flight or not self.requests:
            return None
        self.in_flight = True
        return self.requests.pop(0)

    def next_wakeup_ms(self) -> int | None:
        return self.wakeup

    def on_response(self, api_key: int, answer: Any) -> list[tuple[str, int]]:
        self.in_flight = False
        return list(answer)

    def on_failure(self, why: str) -> None:
        self.in_flight = False
        self.failures.append(why)


def partition(topic: str, index: int, leader: int, epoch: int) -> Any:
    role = Role.LEADER if leader == ME else Role.FOLLOWER
    return SimpleNamespace(topic=topic, index=index, leader_id=leader, leader_epoch=epoch,
                           role=role)


def machine() -> SourceFetchers:
    return SourceFetchers(ME, FakeFollower, backoff_ms=BACKOFF_MS)  # type: ignore[arg-type]


def test_on_partition_routes_each_partition_to_its_leaders_source() -> None:
    m = machine()
    # (the partition's new state, the actions, what is followed from where afterwards)
    table: list[tuple[Any, list[Any], dict[tuple[str, int], tuple[int, int]]]] = [
        (partition("t", 0, A, 1), [StartSource(A)], {("t", 0): (A, 1)}),
        (partition("t", 0, A, 1), [], {("t", 0): (A, 1)}),  # an ISR change: same epoch
        (partition("t", 1, A, 4), [WakeSource(A)], {("t", 0): (A, 1), ("t", 1): (A, 4)}),
        (partition("t", 0, A, 2), [WakeSource(A), WakeSource(A)],  # re-added: truncate again
         {("t", 0): (A, 2), ("t", 1): (A, 4)}),
        (partition("t", 0, B, 3), [WakeSource(A), StartSource(B)],
         {("t", 0): (B, 3), ("t", 1): (A, 4)}),
        (partition("t", 1, ME, 5), [WakeSource(A)], {("t", 0): (B, 3)}),  # we lead it now
        (partition("t", 1, ME, 6), [], {("t", 0): (B, 3)}),
        (None, [WakeSource(B)], {}),  # t-0 is gone
    ]
    for n, (state, actions, following) in enumerate(table):
        topic, index = ("t", 0) if state is None else (state.topic, state.index)
        assert m.on_partition(topic, index, state) == actions, f"row {n}"
        assert m.following == following, f"row {n}"
    assert len(m.fetcher(A)) == 0 and len(m.fetcher(B)) == 0


def test_connect_send_answer_sleep_one_request_at_a_time() -> None:
    m = machine()
    m.on_partition("t", 0, partition("t", 0, A, 1))
    follower = m.fetcher(A)
    follower.requests = [(1, "fetch-1"), (1, "fetch-2")]
    assert m.next_step(0, A) == Connect()
    assert m.next_step(1, A) == Idle(None), "connecting: nothing else to do"
    m.connected(A)
    assert m.next_step(2, A) == Send(1, "fetch-1")
    assert m.next_step(3, A) == Idle(None), "one request outstanding"
    assert m.next_deadline_ms() is None
    assert m.answered(A, 1, [("t", 0)]) == [("t", 0)]  # the partitions to poke
    assert m.next_step(4, A) == Send(1, "fetch-2")
    assert m.answered(A, 1, []) == []
    follower.wakeup = 80  # every partition backs off until then
    assert m.next_step(5, A) == Idle(80)
    assert m.next_deadline_ms() == 80


def test_a_failed_connect_backs_off_doubling_to_backoff_ms_unless_woken() -> None:
    m = machine()
    m.on_partition("t", 0, partition("t", 0, A, 1))
    follower = m.fetcher(A)
    now, waits = 0, []
    for _ in range(6):
        assert m.next_step(now, A) == Connect()
        m.connect_failed(now, A, "refused")
        idle = m.next_step(now, A)
        assert isinstance(idle, Idle) and idle.until_ms is not None
        assert m.next_step(idle.until_ms - 1, A) == idle
        waits.append(idle.until_ms - now)
        now = idle.until_ms
    assert waits == [RETRY_FIRST_MS, 2 * RETRY_FIRST_MS, 4 * RETRY_FIRST_MS, 8 * RETRY_FIRST_MS,
                     BACKOFF_MS, BACKOFF_MS]
    assert follower.failures == ["refused"] * 6, "each failed connect backs the partitions off"
    assert m.next_step(now, A) == Connect()
    m.connect_failed(now, A, "refused")
    assert m.next_step(now + 1, A) == Idle(now + BACKOFF_MS)
    m.on_partition("t", 1, partition("t", 1, A, 1))  # a partition came: try now
    assert m.next_step(now + 2, A) == Connect()
    m.connected(A)  # which resets the backoff
    m.disconnected(A)
    assert m.next_step(now + 3, A) == Connect()
    m.connect_failed(now + 3, A, "refused")
    assert m.next_step(now + 3, A) == Idle(now + 3 + RETRY_FIRST_MS)


def test_a_failed_request_or_a_closed_connection_connects_again() -> None:
    m = machine()
    m.on_partition("t", 0, partition("t", 0, A, 1))
    follower = m.fetcher(A)
    follower.requests = [(1, "fetch-1"), (1, "fetch-2"), (1, "fetch-3")]
    assert m.next_step(0, A) == Connect()
    m.connected(A)
    assert m.next_step(0, A) == Send(1, "fetch-1")
    m.request_failed(A, "timed out")
    assert follower.failures == ["timed out"]
    assert m.next_step(1, A) == Connect(), "the connection is gone with the request"
    m.connected(A)
    assert m.next_step(2, A) == Send(1, "fetch-2")
    m.answered(A, 1, [])
    m.disconnected(A)  # found closed between requests: no failure, connect again
    assert m.next_step(3, A) == Connect() and follower.failures == ["timed out"]


def test_a_source_without_partitions_ends_once_its_request_is_answered() -> None:
    m = machine()
    m.on_partition("t", 0, partition("t", 0, A, 1))
    follower = m.fetcher(A)
    follower.requests = [(1, "fetch-1")]
    assert m.next_step(0, A) == Connect()
    m.connected(A)
    assert m.next_step(0, A) == Send(1, "fetch-1")
    assert m.on_partition("t", 0, partition("t", 0, ME, 2)) == [WakeSource(A)]
    assert m.next_step(1, A) == Idle(None), "still waiting for its answer"
    assert m.answered(A, 1, [("t", 0)]) == [("t", 0)]
    assert m.next_step(2, A) == End()
    assert A not in m.sources and m.next_step(3, A) == End()
    assert m.on_partition("t", 0, partition("t", 0, A, 3)) == [StartSource(A)], "anew"


def test_close_ends_every_source_and_follows_nothing_more() -> None:
    m = machine()
    m.on_partition("t", 0, partition("t", 0, A, 1))
    m.on_partition("t", 1, partition("t", 1, B, 1))
    m.close()
    assert m.next_step(0, A) == End() and m.next_step(0, B) == End()
    assert m.following == {} and m.on_partition("t", 2, partition("t", 2, A, 1)) == []
