"""A property: histories of a correct log are clean. Hypothesis drives a model of a Kafka
cluster that loses nothing (partitions as lists, producers appending, one consumer group whose
members are given partitions, read from their committed offsets and commit as they go, and
offsets taken by records nobody observes, such as transaction markers) and records what its
clients saw, as an adapter would; check must find nothing in any of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from epochlog.testing import History, check
from epochlog.testing.history import Polled

from .histories import new_history

PARTITIONS = 3
PRODUCERS = 2
MEMBERS = 3


@dataclass
class Model:
    history: History = field(default_factory=new_history)
    logs: list[list[bytes | None]] = field(
        default_factory=lambda: [[] for _ in range(PARTITIONS)])  # None: unobserved offset
    owner: dict[int, int] = field(default_factory=dict)  # partition -> member reading it
    position: dict[int, int] = field(default_factory=dict)  # partition -> its owner's position
    committed: dict[int, int] = field(default_factory=dict)
    sent: int = 0

    def send(self, producer: int, partition: int, outcome: str, burst: int) -> None:
        for _ in range(burst):
            self._send(producer, partition, outcome)

    def _send(self, producer: int, partition: int, outcome: str) -> None:
        self.sent += 1
        value = f"v{self.sent}".encode()
        op = self.history.send_started(f"p{producer}", "t", value, partition=partition)
        log = self.logs[partition]
        if outcome == "ack":
            log.append(value)
            self.history.send_acked(op, partition, len(log) - 1, 0)
        elif outcome == "timeout-but-written":  # the write happened; the producer never heard
            log.append(value)
            self.history.send_failed(op, "KafkaTimeoutError: delivery timed out", partition)
        elif outcome == "refused":
            self.history.send_failed(op, "RecordTooLargeError", partition)
        # "crashed": no outcome recorded at all, and nothing written

    def marker(self, partition: int) -> None:
        self.logs[partition].append(None)

    def assign(self, partition: int, member: int) -> None:
        old = self.owner.get(partition)
        if old == member:
            return
        if old is not None:
            self.commit(old)
            self.history.record_rebalance(f"m{old}", "revoked", [("t", partition)], group="g")
        self.owner[partition] = member
        self.position[partition] = self.committed.get(partition, 0)
        self.history.record_rebalance(f"m{member}", "assigned", [("t", partition)], group="g")

    def poll(self, member: int, records_max: int) -> None:
        out: list[Polled] = []
        for partition, owner in sorted(self.owner.items()):
            if owner != member:
                continue
            log = self.logs[partition]
            while self.position[partition] < len(log) and len(out) < records_max:
                offset = self.position[partition]
                self.position[partition] += 1
                value = log[offset]
                if value is not None:
                    out.append(Polled(topic="t", partition=partition, offset=offset,
                                      leader_epoch=0, key=None, value=value))
        self.history.record_poll(f"m{member}", out, group="g")

    def commit(self, member: int) -> None:
        mine = {p: self.position[p] for p, m in self.owner.items() if m == member}
        if mine:
            self.committed.update(mine)
            self.history.record_commit(f"m{member}", {("t", p): (o, 0) for p, o in mine.items()},
                                       group="g")

    def read_back(self) -> None:
        for partition, log in enumerate(self.logs):
            self.history.record_poll("read-back", [
                Polled(topic="t", partition=partition, offset=o, leader_epoch=0, key=None,
                       value=v) for o, v in enumerate(log) if v is not None])


sends = st.tuples(st.just("send"), st.integers(0, PRODUCERS - 1), st.integers(0, PARTITIONS - 1),
                  st.sampled_from(["ack", "ack", "ack", "timeout-but-written", "refused",
                                   "crashed"]), st.integers(1, 8))
steps = st.lists(st.one_of(
    sends, sends,  # sends come in bursts, so that partitions grow long enough to matter
    st.tuples(st.just("marker"), st.integers(0, PARTITIONS - 1)),
    st.tuples(st.just("assign"), st.integers(0, PARTITIONS - 1), st.integers(0, MEMBERS - 1)),
    st.tuples(st.just("poll"), st.integers(0, MEMBERS - 1), st.integers(1, 5)),
    st.tuples(st.just("commit"), st.integers(0, MEMBERS - 1)),
    st.tuples(st.just("fault"), st.sampled_from(["kill", "pause", "partition"]))),
    min_size=10, max_size=120)


@settings(max_examples=300, deadline=None)
@given(steps)
def test_histories_of_a_correct_log_are_clean(script: list[tuple[object, ...]]) -> None:
    model = Model()
    for step in script:
        name, *args = step
        if name == "fault":
            model.history.record_fault(str(args[0]), (1,), "a fault the log survives")
        else:
            getattr(model, str(name))(*args)
    model.read_back()
    verdict = check(model.history)
    assert not verdict.anomalies and not verdict.failing, verdict
    # a script whose every send failed or crashed tested nothing, and says so; the read-back
    # reads every acknowledged value, so an acknowledged send is all a verdict needs to be ok
    assert verdict.ok == (verdict.stats["sends_acked"] > 0), verdict
