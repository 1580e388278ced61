"""KIP-320 across a restart: a group's committed offset carries the leader epoch of the records
it was read from, and a group that resumes after an unclean election truncated that epoch's tail
away detects it, although the new leader has written past the committed offset again (so a plain
offset check sees nothing wrong).

The scenario runs once per module, on two brokers with unclean election allowed on the topic:

    A leads at epoch E; B holds the `early` records, is killed and leaves the ISR;
    A alone takes the acks=1 `tail` records (epoch E); a member of each group (confluent-kafka)
      reads up to X inside the tail and commits that record: (X, E);
    A is killed; B returns and is elected uncleanly at E' > E: on B epoch E ends at D, the end
      of `early`; B takes the `new` records at E', past X;
    A returns and truncates to B's lineage; then the offsets partition's leader is restarted
      (controlled), so the group coordinator moves once more. (X, E) must survive all of it.

Each test resumes one group in a new consumer: epochlog's Consumer with auto_offset_reset "none"
(LogTruncationError at D) and "earliest" (reads from D on); confluent-kafka, which validates a
committed offset only when the member seeks to it (see the note above its tests).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaError as CKError
from confluent_kafka import TopicPartition as CKTopicPartition

from epochlog.client import Consumer, LogTruncationError, TopicPartition
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from epochlog.protocol.error_codes import ErrorCode
from epochlog.testing import Cluster, until
from epochlog.testing.traffic import produce
from tests.chaos.replicas import (
    dump_batches,
    epoch_end,
    epoch_entries,
    kill_until_dead,
    state_from,
    wait_quiet,
)

SESSION_MS = 3000
SETTINGS = {"broker_session_timeout_ms": SESSION_MS,
            "broker_heartbeat_interval_ms": SESSION_MS // 4,
            "replica_lag_time_max_ms": 10000,
            "offsets_topic_num_partitions": 1,
            "group_initial_rebalance_delay_ms": 0}
TOPIC = "orders"
TP = TopicPartition(TOPIC, 0)
EARLY, TAIL, NEW = 10, 30, 40   # records: replicated to both, on A alone, on B after the election
READ = 20                       # each group reads this far into the tail: X = EARLY + READ
GROUP_NONE, GROUP_EARLIEST = "resume-none", "resume-earliest"
GROUP_CK_ERROR, GROUP_CK_EARLIEST = "resume-ck-error", "resume-ck-earliest"
GROUPS = (GROUP_NONE, GROUP_EARLIEST, GROUP_CK_ERROR, GROUP_CK_EARLIEST)
WAIT_S = 30.0
NOT_YET = (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
           ErrorCode.NOT_COORDINATOR)


@dataclass(frozen=True)
class Truncated:
    """The cluster after the scenario, and what the log says the answers must be."""
    cluster: Cluster
    bootstrap: str
    committed: tuple[int, int]     # (X, E): what every group committed
    divergence: tuple[int, int]    # (D, epoch): OffsetForLeaderEpoch(E) on the new leader, as
                                   # LogTruncationError.divergent_offsets has it
    new_epoch: int                 # E', the epoch of the `new` records
    new_records: list[tuple[int, bytes]]  # (offset, value) from D to the log end


# ------------------------------------------------------------------------- the scenario
def offset_fetch(cluster: Cluster, group: str) -> tuple[int, int]:
    """(committed offset, committed leader epoch) of TP, by OffsetFetch v7 at the coordinator;
    asked again while the coordinator is loading, moving or unreachable (bounded)."""
    def ask() -> tuple[int, int] | None:
        answer = cluster.brokers[cluster.coordinator_of(group)].call(
            ApiKey.OFFSET_FETCH, OffsetFetchRequest(
                group_id=group, topics=[OffsetFetchRequestTopic(name=TOPIC,
                                                                partition_indexes=[0])],
                require_stable=True), version=7)
        if answer.error_code in NOT_YET:
            return None
        p = answer.topics[0].partitions[0]
        if answer.error_code != 0 or p.error_code != 0:
            raise RuntimeError(f"OffsetFetch of {group} failed: {answer}")
        return p.committed_offset, p.committed_leader_epoch

    return until(ask, f"OffsetFetch of {group}", WAIT_S)


def read_and_commit(bootstrap: str, group: str, upto: int) -> None:
    """One member of group (confluent-kafka) reads records up to offset upto - 1 and commits
    that message: librdkafka commits offset + 1 with the message's leader epoch."""
    consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe([TOPIC])

        def read_to_end() -> bool:
            message = consumer.poll(0.5)
            if message is None or message.error() or message.offset() != upto - 1:
                return False
            consumer.commit(message=message, asynchronous=False)
            return True

        until(read_to_end, f"{group} to read up to offset {upto - 1}", WAIT_S, interval_s=0)
    finally:
        consumer.close()


def wait_leads(cluster: Cluster, broker: int, epoch_above: int) -> int:
    """Until broker leads TOPIC in an epoch above epoch_above and has taken it; that epoch."""
    def leads() -> int | None:
        p = state_from(cluster, broker, TOPIC)
        took = cluster.node(broker).has_line(
            f"{TOPIC}-0: became LEADER at leader epoch {p.leader_epoch}")
        return p.leader_epoch if (p.leader_id == broker and p.leader_epoch > epoch_above
                                  and took) else None

    return until(leads, f"broker {broker} to lead {TOPIC} above epoch {epoch_above}", WAIT_S)


def log_end(cluster: Cluster, broker: int) -> int:
    return max(batch[1] for batch in dump_batches(cluster, broker, TOPIC, 0)) + 1


def build(cluster: Cluster) -> Truncated:
    """The scenario of the module docstring, checked at each step."""
    cluster.create_topic(TOPIC, partitions=1, replication_factor=2,
                         configs={"min.insync.replicas": 1,
                                  "unclean.leader.election.enable": True})
    a = cluster.leader_of(TOPIC, 0)
    b = 3 - a
    cluster.coordinator_of(GROUP_NONE)  # creates __consumer_offsets while both are up: RF 2
    produce(cluster.bootstrap_servers, TOPIC, [b"early-%d" % i for i in range(EARLY)])

    kill_until_dead(cluster, b)
    until(lambda: list(state_from(cluster, a, TOPIC).isr_nodes) == [a], f"ISR [{a}]", WAIT_S)
    only_a = cluster.brokers[a].address
    produce(only_a, TOPIC, [b"tail-%d" % i for i in range(TAIL)], acks="1")
    x = EARLY + READ
    for group in GROUPS:
        read_and_commit(only_a, group, upto=x)
    epoch = next(batch[2] for batch in dump_batches(cluster, a, TOPIC, 0)
                 if batch[0] <= x - 1 <= batch[1])
    for group in GROUPS:
        assert offset_fetch(cluster, group) == (x, epoch), group

    kill_until_dead(cluster, a)
    cluster.restart(b)
    new_epoch = wait_leads(cluster, b, epoch_above=epoch)
    cluster.node(cluster.controller).wait_line(
        f"UNCLEAN leader election for {TOPIC}-0: broker {b} ", timeout_s=WAIT_S)
    new = [b"new-%d" % i for i in range(NEW)]
    offsets = produce(cluster.brokers[b].address, TOPIC, new)

    cluster.restart(a)
    wait_quiet(cluster, TOPIC, 1, replicas=2)
    # The offsets partition moves once more: a controlled restart of its leader, once the
    # other broker is back in its ISR.
    offsets_leader = cluster.coordinator_of(GROUP_NONE)
    until(lambda: len(state_from(cluster, offsets_leader, "__consumer_offsets").isr_nodes) == 2,
          "a full ISR for __consumer_offsets-0", WAIT_S)
    assert cluster.stop(offsets_leader) == 0, cluster.node(offsets_leader).tail(20)
    assert cluster.node(offsets_leader).has_line("closed data dir")
    cluster.restart(offsets_leader)
    final = cluster.coordinator_of(GROUP_NONE)
    assert final != offsets_leader, "the coordinator did not move"

    leader = state_from(cluster, b, TOPIC).leader_id
    end = log_end(cluster, leader)
    d_epoch, d = epoch_end(epoch_entries(cluster, leader, TOPIC), epoch, end)
    # The same answer from the batches: the last batch of epoch E or older on the new leader.
    assert d == 1 + max(batch[1] for batch in dump_batches(cluster, leader, TOPIC, 0)
                        if batch[2] <= epoch)
    assert d < x < end, (d, x, end)  # the committed offset exists again: only epochs tell
    return Truncated(cluster, cluster.bootstrap_servers, (x, epoch), (d, d_epoch), new_epoch,
                     list(zip(offsets, new, strict=True)))


@pytest.fixture(scope="module")
def truncated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Truncated]:
    """Built once for the module's five tests. The `epochlog_cluster` fixture is per test, so
    this uses the public Cluster it wraps, as a context manager: closed (and every process
    reaped) when the module ends, pass or fail."""
    with Cluster(2, settings=SETTINGS,
                 base_dir=tmp_path_factory.mktemp("group-truncation")) as cluster:
        yield build(cluster)


def test_committed_epoch_survives_restarts(truncated: Truncated) -> None:
    """OffsetFetch v7 still answers (X, E) for every group after the unclean election, both
    restarts and the coordinator moves: the epoch was stored (offset value v3) and replayed."""
    for group in GROUPS:
        assert offset_fetch(truncated.cluster, group) == truncated.committed, group


# ------------------------------------------------------------------- epochlog's Consumer
async def test_resume_with_reset_none_raises_log_truncation(truncated: Truncated) -> None:
    """auto_offset_reset "none": poll raises LogTruncationError at the end of epoch E on the new
    leader, before handing out a single record, and commits nothing."""
    async with Consumer(truncated.bootstrap, group_id=GROUP_NONE, auto_offset_reset="none",
                        enable_auto_commit=False) as consumer:
        consumer.subscribe([TOPIC])
        with pytest.raises(LogTruncationError) as caught:
            async with asyncio.timeout(WAIT_S):
                while True:
                    records = await consumer.poll(timeout_ms=500)
                    assert not records, (
                        f"read from offset {records[0].offset} although the committed "
                        f"{truncated.committed} was truncated away")
        assert caught.value.divergent_offsets == {TP: truncated.divergence}
    assert offset_fetch(truncated.cluster, GROUP_NONE) == truncated.committed


async def test_resume_with_reset_earliest_reads_from_divergence(truncated: Truncated) -> None:
    """auto_offset_reset "earliest": the position moves to the divergence point, and every record
    the new leader wrote from there is read, in order (none skipped, none of A's tail)."""
    d = truncated.divergence[0]
    expected = [(off, value) for off, value in truncated.new_records if off >= d]
    got: list[tuple[int, bytes | None]] = []
    async with Consumer(truncated.bootstrap, group_id=GROUP_EARLIEST,
                        auto_offset_reset="earliest", enable_auto_commit=False) as consumer:
        consumer.subscribe([TOPIC])
        async with asyncio.timeout(WAIT_S):
            while not got or got[-1][0] < expected[-1][0]:  # up to the log end
                for record in await consumer.poll(timeout_ms=500):
                    assert record.leader_epoch == truncated.new_epoch, record
                    got.append((record.offset, record.value))
    assert got == expected


# ------------------------------------------------------------------------ confluent-kafka
# librdkafka 2.16 does NOT validate a committed offset when a group member starts fetching from
# it. Seen here (debug "fetch,consumer,cgrp"): OffsetFetch v7 returns (X, E), then "Starting
# pending assigned partition orders [0] at offset X (leader epoch E)", "start fetching at offset
# X", the partition goes straight to the active fetch state with no OffsetForLeaderEpoch, and the
# member reads the new leader's records from X on: D..X-1 are skipped silently. Our broker
# answered that Fetch with records, not a diverging epoch, so it carried no LastFetchedEpoch (one
# given is checked: broker/handlers/fetch.py). librdkafka's own tracker
# says so (confluentinc/librdkafka#5158, "Assigned offsets are not validated and can cause an
# offset reset in case of partition truncation": "not solved by KIP-320 in 2.1.0"); in its source
# only a seek (rd_kafka_toppar_op_seek) and a leader change start a validation. Nothing is asserted
# about that plain resume. What librdkafka documents since 2.1 (KIP-320: seek with a leader epoch;
# auto.offset.reset=error raises ERR__AUTO_OFFSET_RESET) is asserted: a member that seeks to the
# committed (offset, epoch) when it is assigned gets the truncation from our OffsetForLeaderEpoch.
class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def resume_with_seek(bootstrap: str, group: str, reset: str) -> tuple[list[object], _Collect]:
    """A confluent-kafka member of group that, on assignment, seeks to the committed (offset,
    leader epoch); the first thing poll() returns (an error or a record), and its debug log."""
    collect = _Collect()
    logger = logging.getLogger(f"librdkafka.{group}")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(collect)
    logger.propagate = False
    consumer = CKConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                           "enable.auto.commit": False, "auto.offset.reset": reset,
                           "debug": "fetch,consumer,cgrp"}, logger=logger)
    seen: list[object] = []

    def on_assign(c: CKConsumer, partitions: list[CKTopicPartition]) -> None:
        committed = c.committed(partitions, timeout=WAIT_S)
        seen.extend((p.offset, p.leader_epoch) for p in committed)
        c.assign(committed)
        for p in committed:
            c.seek(p)  # with its leader epoch: librdkafka validates the position

    try:
        consumer.subscribe([TOPIC], on_assign=on_assign)
        message = until(lambda: consumer.poll(0.5), f"{group} to poll a record or an error",
                        WAIT_S, interval_s=0, detail=lambda: "\n".join(collect.lines[-40:]))
        return [*seen, message], collect
    finally:
        consumer.close()


def test_confluent_kafka_seek_to_committed_reports_truncation(truncated: Truncated) -> None:
    """auto.offset.reset=error: librdkafka asks OffsetForLeaderEpoch(E), our leader answers
    (epoch, D), and the member gets an error naming the truncation instead of a record."""
    (committed, message), collect = resume_with_seek(truncated.bootstrap, GROUP_CK_ERROR,
                                                      "error")
    x, epoch = truncated.committed
    d, d_epoch = truncated.divergence
    assert committed == truncated.committed  # librdkafka read the epoch from OffsetFetch
    error = message.error()  # type: ignore[attr-defined]
    assert error is not None, f"read offset {message.offset()} past a truncation"  # type: ignore
    assert error.code() in (CKError._AUTO_OFFSET_RESET, CKError._LOG_TRUNCATION), error
    assert (f"truncation detected at offset {x} (leader epoch {epoch}): broker end offset is "
            f"{d} (offset leader epoch {d_epoch})") in error.str(), (
        error.str(), [line for line in collect.lines if "VALID" in line])


def test_confluent_kafka_seek_to_committed_resets_to_divergence(truncated: Truncated) -> None:
    """auto.offset.reset=earliest: librdkafka moves to the divergence point D that our leader
    answered, so its first record is the new leader's record at D."""
    (committed, message), _ = resume_with_seek(truncated.bootstrap, GROUP_CK_EARLIEST,
                                               "earliest")
    d = truncated.divergence[0]
    assert committed == truncated.committed
    assert message.error() is None, message.error()  # type: ignore[attr-defined]
    assert (message.offset(), message.value()) == (  # type: ignore[attr-defined]
        d, dict(truncated.new_records)[d])
