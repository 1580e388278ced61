"""Transactional producers (issue 18) against three real brokers: the transaction coordinator's
InitProducerId and FindCoordinator for transactional ids, AddPartitionsToTxn, EndTxn and the
markers it has written to the partitions, first with confluent-kafka (librdkafka) and then
request by request.

A transactional id has one producer id for good; each InitProducerId bumps its epoch, and an
epoch once bumped fences every producer that holds an older one (as a partition leader fences
stale leader epochs: the seeds' rule). The state lives in `__transaction_state` and survives its
coordinator: a new leader of the id's partition loads it and goes on from the same epoch.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from epochlog import Admin, Consumer, TopicPartition
from epochlog.client.errors import KafkaError
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest
from epochlog.protocol.apis.init_producer_id import InitProducerIdRequest
from epochlog.protocol.apis.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from epochlog.protocol.batch import iter_headers
from epochlog.protocol.control_records import read_marker
from epochlog.protocol.error_codes import ErrorCode
from epochlog.testing import Cluster, until

TXN_TOPIC = "__transaction_state"
AFTER_S = 1.5  # once a reader has what it should, how long it goes on reading for more
SETTINGS = {"transaction_state_log_num_partitions": 3}


def live_brokers(cluster: Cluster) -> list[int]:
    return [b for b in cluster.broker_ids if cluster.node(b).alive]


def coordinator(cluster: Cluster, key: str, key_type: int = 1) -> int:
    """The broker that coordinates a transactional id (key type 1) or a group (0), once one
    does."""
    got: dict[str, Any] = {}

    def ask() -> bool:
        got["answer"] = cluster.node(live_brokers(cluster)[0]).call(
            ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(key=key, key_type=key_type),
            version=3)
        return bool(got["answer"].error_code == 0)

    until(ask, f"a coordinator for {key}", 60, detail=lambda: str(got.get("answer")))
    node_id: int = got["answer"].node_id
    return node_id


def init(cluster: Cluster, broker: int, transactional_id: str, expected: tuple[int, int] | None
         = None, version: int = 4) -> Any:
    pid, epoch = expected if expected is not None else (-1, -1)
    return cluster.node(broker).call(ApiKey.INIT_PRODUCER_ID, InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=60_000, producer_id=pid,
        producer_epoch=epoch), version=version)


def init_until_answered(cluster: Cluster, transactional_id: str) -> Any:
    """InitProducerId at the id's coordinator, looked up again while it moves or loads."""
    got: dict[str, Any] = {}

    def ask() -> bool:
        got["answer"] = init(cluster, coordinator(cluster, transactional_id), transactional_id)
        return got["answer"].error_code not in (ErrorCode.NOT_COORDINATOR,
                                                 ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                                                 ErrorCode.COORDINATOR_NOT_AVAILABLE)

    until(ask, f"InitProducerId for {transactional_id}", 60, detail=lambda: str(got.get("answer")))
    return got["answer"]


def markers(cluster: Cluster, topic: str, partitions: int) -> list[tuple[int, int, bool]]:
    """(partition, offset, commit?) of the transaction markers in every replica's log, once
    the replicas agree on them."""
    found: dict[int, list[list[tuple[int, int, bool]]]] = {}
    for broker in cluster.broker_ids:
        for p in range(partitions):
            directory = cluster.base_dir / f"broker-{broker}" / f"{topic}-{p}"
            seen: list[tuple[int, int, bool]] = []
            for segment in sorted(directory.glob("*.log")):
                data = segment.read_bytes()
                for pos, header in iter_headers(data):
                    if header.is_control:
                        batch = data[pos:pos + header.size]
                        seen.append((p, header.base_offset, read_marker(batch).commit))
            found.setdefault(p, []).append(seen)
    out = []
    for p, copies in sorted(found.items()):
        assert all(c == copies[0] for c in copies), f"{topic}-{p}: replicas differ: {copies}"
        out += copies[0]
    return out


def consume_all(cluster: Cluster, topic: str, expected: int,
                isolation: str = "read_uncommitted") -> list[bytes]:
    confluent = pytest.importorskip("confluent_kafka")
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "group.id": f"check-{topic}-{isolation}",
                                   "auto.offset.reset": "earliest",
                                   "isolation.level": isolation, "enable.auto.commit": False})
    got: list[bytes] = []
    try:
        consumer.subscribe([topic])
        until(lambda: bool(_poll_into(consumer, got)) and len(got) >= expected,
              f"{expected} records of {topic}", 60, detail=lambda: str(len(got)))
        deadline = time.monotonic() + AFTER_S  # then a while for what should not come
        while time.monotonic() < deadline:
            _poll_into(consumer, got)
    finally:
        consumer.close()
    return got


def _poll_into(consumer: Any, got: list[bytes]) -> bool:
    for message in consumer.consume(100, 0.5):
        assert message.error() is None, message.error()
        got.append(message.value())
    return True


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(3, base_dir=tmp_path_factory.mktemp("txn"), settings=SETTINGS) as c:
        yield c


def test_confluent_kafka_init_transactions(cluster: Cluster) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "transactional.id": "confluent-1"})
    producer.init_transactions(60)
    # a second instance with the same id fences the first: the id's epoch moved past it
    first = init_until_answered(cluster, "confluent-1")
    assert first.error_code == 0 and first.producer_epoch >= 1, first
    producer.flush(10)


def test_each_init_bumps_the_epoch_and_fences_the_older_producer(cluster: Cluster) -> None:
    first = init_until_answered(cluster, "raw-1")
    assert first.error_code == 0 and first.producer_id >= 0, first
    second = init_until_answered(cluster, "raw-1")
    assert (second.error_code, second.producer_id, second.producer_epoch) == \
        (0, first.producer_id, first.producer_epoch + 1)
    broker = coordinator(cluster, "raw-1")
    # KIP-360: a producer naming its epoch gets it bumped only if it is the current one
    stale = init(cluster, broker, "raw-1", (first.producer_id, first.producer_epoch))
    assert stale.error_code == ErrorCode.PRODUCER_FENCED, stale
    older = init(cluster, broker, "raw-1", (first.producer_id, first.producer_epoch), version=3)
    assert older.error_code == ErrorCode.INVALID_PRODUCER_EPOCH, older  # before KIP-588
    current = init(cluster, broker, "raw-1", (second.producer_id, second.producer_epoch))
    assert (current.error_code, current.producer_epoch) == (0, second.producer_epoch + 1)
    other = init(cluster, broker, "raw-1", (first.producer_id + 1, current.producer_epoch))
    assert other.error_code == ErrorCode.PRODUCER_FENCED, other
    fresh = init(cluster, broker, "raw-1")  # no epoch named: a new instance, bumped
    assert (fresh.error_code, fresh.producer_epoch) == (0, current.producer_epoch + 1)
    too_long = cluster.node(broker).call(ApiKey.INIT_PRODUCER_ID, InitProducerIdRequest(
        transactional_id="raw-1", transaction_timeout_ms=900_001), version=4)
    assert too_long.error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_a_transactional_id_not_coordinated_here_is_sent_elsewhere(cluster: Cluster) -> None:
    broker = coordinator(cluster, "raw-2")
    other = next(b for b in live_brokers(cluster) if b != broker)
    answer = init(cluster, other, "raw-2")
    assert answer.error_code == ErrorCode.NOT_COORDINATOR, answer
    bad = cluster.node(broker).call(ApiKey.FIND_COORDINATOR,
                                    FindCoordinatorRequest(key="raw-2", key_type=7), version=3)
    assert bad.error_code == ErrorCode.INVALID_REQUEST and "key type 7" in bad.error_message


def test_the_state_survives_its_coordinator(cluster: Cluster, tmp_path: Path) -> None:
    """The coordinator is killed; the new leader of the id's partition loads the id from the
    log and goes on from its epoch, with the same producer id."""
    before = init_until_answered(cluster, "raw-3")
    assert before.error_code == 0
    broker = coordinator(cluster, "raw-3")
    cluster.kill(broker)
    try:
        until(lambda: coordinator(cluster, "raw-3") != broker, "a new coordinator for raw-3", 60)
        after = init_until_answered(cluster, "raw-3")
        assert (after.error_code, after.producer_id, after.producer_epoch) == \
            (0, before.producer_id, before.producer_epoch + 1), (before, after)
    finally:
        cluster.restart(broker)


def test_confluent_kafka_commits_and_aborts(cluster: Cluster) -> None:
    """A committed and an aborted transaction over three partitions: each partition the
    transaction wrote to gets its marker (COMMIT, then ABORT) in every replica; consumers never
    see a control record; read_uncommitted ones see the aborted records, read_committed ones
    only the committed."""
    confluent = pytest.importorskip("confluent_kafka")
    cluster.create_topic("tx", partitions=3, replication_factor=3)
    cluster.wait_fully_replicated("tx")
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "transactional.id": "confluent-2", "linger.ms": 5})
    producer.init_transactions(60)
    producer.begin_transaction()
    for i in range(30):
        producer.produce("tx", f"committed {i}".encode(), partition=i % 3)
    producer.commit_transaction(60)
    producer.begin_transaction()
    for i in range(6):
        producer.produce("tx", f"aborted {i}".encode(), partition=i % 2)  # 0 and 1 only
    producer.flush(30)  # written, so that there is something to abort (else librdkafka drops it)
    producer.abort_transaction(60)

    def settled() -> list[tuple[int, int, bool]] | None:
        found = markers(cluster, "tx", 3)
        return found if len(found) == 5 else None

    found = until(settled, "a COMMIT marker in 3 partitions and an ABORT in 2", 60,
                  detail=lambda: str(markers(cluster, "tx", 3)))
    assert sorted((p, commit) for p, _, commit in found) == \
        [(0, False), (0, True), (1, False), (1, True), (2, True)]
    for p in (0, 1, 2):
        assert [o for q, o, c in found if q == p and c] == [10], found  # after 10 records
    got = consume_all(cluster, "tx", 36)
    assert sorted(got) == sorted([f"committed {i}".encode() for i in range(30)]
                                 + [f"aborted {i}".encode() for i in range(6)])
    committed = consume_all(cluster, "tx", 30, "read_committed")
    assert sorted(committed) == sorted(f"committed {i}".encode() for i in range(30))
    until(lambda: "confluent-2: CompleteAbort" in epochlog_cli(
        cluster, "transactions", "describe", "confluent-2") or None,
        "the second transaction's abort completed", 30)


def test_a_transaction_past_its_timeout_is_aborted_and_its_producer_fenced(
        cluster: Cluster) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    cluster.create_topic("tx-timeout", partitions=1, replication_factor=3)
    cluster.wait_fully_replicated("tx-timeout")
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "transactional.id": "confluent-slow",
                                   "transaction.timeout.ms": 2000})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce("tx-timeout", b"left open")
    producer.flush(30)
    until(lambda: len(markers(cluster, "tx-timeout", 1)) == 1 or None,
          "the coordinator to abort the transaction past its timeout", 60)
    assert markers(cluster, "tx-timeout", 1)[0][2] is False
    with pytest.raises(confluent.KafkaException) as raised:
        producer.commit_transaction(30)
    error = raised.value.args[0]
    assert error.code() in (confluent.KafkaError.PRODUCER_FENCED,
                            confluent.KafkaError.INVALID_PRODUCER_EPOCH,
                            confluent.KafkaError._FENCED), error


def test_read_committed_consumers_wait_for_an_open_transaction(cluster: Cluster) -> None:
    """Records after an open transaction's first offset are not stable: read_committed
    consumers (librdkafka's and kafka-python's) stop before it until it commits, while
    read_uncommitted ones read on; an aborted transaction's records never reach them."""
    confluent = pytest.importorskip("confluent_kafka")
    cluster.create_topic("tx-open", partitions=1, replication_factor=3)
    cluster.wait_fully_replicated("tx-open")
    plain = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                "enable.idempotence": True})
    plain.produce("tx-open", b"before")
    plain.flush(30)
    txn = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                              "transactional.id": "confluent-open"})
    txn.init_transactions(60)
    txn.begin_transaction()
    txn.produce("tx-open", b"in the transaction")
    txn.flush(30)
    plain.produce("tx-open", b"after, outside it")
    plain.flush(30)
    assert len(consume_all(cluster, "tx-open", 3)) == 3
    stable = consume_all(cluster, "tx-open", 1, "read_committed")
    assert stable == [b"before"]
    assert kafka_python_read_committed(cluster, "tx-open", 1) == [b"before"]
    txn.commit_transaction(60)
    everything = consume_all(cluster, "tx-open", 3, "read_committed")
    assert everything == [b"before", b"in the transaction", b"after, outside it"]
    txn.begin_transaction()
    txn.produce("tx-open", b"aborted")
    txn.flush(30)
    txn.abort_transaction(60)
    plain.produce("tx-open", b"last")
    plain.flush(30)
    assert kafka_python_read_committed(cluster, "tx-open", 4) == [
        b"before", b"in the transaction", b"after, outside it", b"last"]


def kafka_python_read_committed(cluster: Cluster, topic: str, expected: int) -> list[bytes]:
    """kafka-python's read_committed consumer from the start of topic: polled until it has
    `expected` records (bounded), then AFTER_S more for any it should not have."""
    kafka = pytest.importorskip("kafka")
    consumer = kafka.KafkaConsumer(topic, bootstrap_servers=cluster.bootstrap_servers,
                                   isolation_level="read_committed",
                                   auto_offset_reset="earliest")
    got: list[bytes] = []

    def poll() -> None:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(r.value for r in records)

    try:
        until(lambda: poll() or len(got) >= expected or None,
              f"{expected} committed records of {topic} (kafka-python)", 60,
              detail=lambda: str(got))
        deadline = time.monotonic() + AFTER_S
        while time.monotonic() < deadline:
            poll()
    finally:
        consumer.close()
    return got


def group_coordinator(cluster: Cluster, group_id: str) -> int:
    return coordinator(cluster, group_id, key_type=0)


def stable_offsets(cluster: Cluster, group_id: str, topic: str, partitions: int) -> list[Any]:
    """OffsetFetch v7 with require_stable: each partition's answer."""
    answer = cluster.node(group_coordinator(cluster, group_id)).call(
        ApiKey.OFFSET_FETCH, OffsetFetchRequest(group_id=group_id, require_stable=True, topics=[
            OffsetFetchRequestTopic(name=topic, partition_indexes=list(range(partitions)))]),
        version=7)
    return [p for t in answer.topics for p in t.partitions]


def test_consume_transform_produce_commits_the_offsets_with_the_records(
        cluster: Cluster) -> None:
    """confluent-kafka's exactly-once loop: records read, transformed and written, and the
    consumer's offsets sent, in one transaction. Committed, both take effect; aborted,
    neither; in between the offsets are unstable (OffsetFetch require_stable)."""
    confluent = pytest.importorskip("confluent_kafka")
    for topic in ("ctp-in", "ctp-out"):
        cluster.create_topic(topic, partitions=2, replication_factor=3)
        cluster.wait_fully_replicated(topic)
    plain = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(20):
        plain.produce("ctp-in", f"in {i}".encode(), partition=i % 2)
    plain.flush(30)
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "group.id": "ctp", "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False,
                                   "isolation.level": "read_committed"})
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "transactional.id": "ctp-1"})
    producer.init_transactions(60)
    try:
        consumer.subscribe(["ctp-in"])
        seen: list[Any] = []
        until(lambda: _take(consumer, seen) and len(seen) >= 20 or None,
              "20 input records", 60, detail=lambda: str(len(seen)))
        producer.begin_transaction()
        for message in seen:
            producer.produce("ctp-out", message.value().replace(b"in", b"out"),
                             partition=message.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 30)
        producer.flush(30)
        pending = stable_offsets(cluster, "ctp", "ctp-in", 2)
        assert {p.error_code for p in pending} == {ErrorCode.UNSTABLE_OFFSET_COMMIT}, pending
        producer.commit_transaction(60)
        until(lambda: all(p.error_code == 0 and p.committed_offset == 10
                          for p in stable_offsets(cluster, "ctp", "ctp-in", 2)) or None,
              "the offsets committed with the transaction", 30,
              detail=lambda: str(stable_offsets(cluster, "ctp", "ctp-in", 2)))
        # an aborted transaction's offsets never take effect
        producer.begin_transaction()
        producer.produce("ctp-out", b"never", partition=0)
        offsets = [confluent.TopicPartition("ctp-in", p, 0) for p in (0, 1)]
        producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(60)
        until(lambda: all(p.error_code == 0 and p.committed_offset == 10
                          for p in stable_offsets(cluster, "ctp", "ctp-in", 2)) or None,
              "the offsets as the committed transaction left them", 30,
              detail=lambda: str(stable_offsets(cluster, "ctp", "ctp-in", 2)))
    finally:
        consumer.close()
    out = consume_all(cluster, "ctp-out", 20, "read_committed")
    assert sorted(out) == sorted(f"out {i}".encode() for i in range(20))


def _take(consumer: Any, seen: list[Any]) -> bool:
    for message in consumer.consume(100, 0.5):
        assert message.error() is None, message.error()
        seen.append(message)
    return True


def test_transactional_offsets_survive_the_group_coordinator(cluster: Cluster) -> None:
    """Offsets sent in a transaction, then the group coordinator killed before the commit: the
    new coordinator loads them from the log as pending, and the COMMIT marker (written to it)
    makes them take effect. A second transaction is committed and its coordinator killed
    after: the next one loads offsets and marker from the log."""
    confluent = pytest.importorskip("confluent_kafka")
    cluster.create_topic("ctp-fail", partitions=1, replication_factor=3)
    cluster.wait_fully_replicated("ctp-fail")
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "group.id": "ctp-fail"})
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "transactional.id": "ctp-fail-1"})
    producer.init_transactions(60)
    metadata = consumer.consumer_group_metadata()

    def committed_offset_is(offset: int) -> bool | None:
        answers = stable_offsets(cluster, "ctp-fail", "ctp-fail", 1)
        return answers[0].error_code == 0 and answers[0].committed_offset == offset or None

    killed: list[int] = []
    try:
        for offset in (7, 9):
            producer.begin_transaction()
            producer.produce("ctp-fail", b"x")
            producer.send_offsets_to_transaction(
                [confluent.TopicPartition("ctp-fail", 0, offset)], metadata, 30)
            producer.flush(30)
            if offset == 7:  # killed before the commit: pending in the log
                killed.append(group_coordinator(cluster, "ctp-fail"))
                cluster.kill(killed[-1])
                until(lambda: stable_offsets(cluster, "ctp-fail", "ctp-fail", 1)[0].error_code
                      == ErrorCode.UNSTABLE_OFFSET_COMMIT or None,
                      "the new coordinator to hold the offsets as pending", 60)
            producer.commit_transaction(60)
            if offset == 9:  # killed after the commit: offsets and marker in the log
                cluster.restart(killed[-1])
                until(lambda: committed_offset_is(9), "the second commit's offsets", 60)
                killed.append(group_coordinator(cluster, "ctp-fail"))
                cluster.kill(killed[-1])
            until(lambda o=offset: committed_offset_is(o),  # type: ignore[misc]
                  f"offset {offset} committed by the transaction, coordinator killed", 60,
                  detail=lambda: str(stable_offsets(cluster, "ctp-fail", "ctp-fail", 1)))
    finally:
        consumer.close()
        for broker in killed:
            if not cluster.node(broker).alive:
                cluster.restart(broker)


def epochlog_cli(cluster: Cluster, *args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "epochlog", *args, "--bootstrap-server",
                           cluster.bootstrap_servers], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done
    return done.stdout


def test_transactions_are_listed_and_described(cluster: Cluster) -> None:
    """ListTransactions and DescribeTransactions through our Admin and `epochlog
    transactions`: an open transaction with its partitions, then completed."""
    confluent = pytest.importorskip("confluent_kafka")
    cluster.create_topic("tx-describe", partitions=2, replication_factor=3)
    cluster.wait_fully_replicated("tx-describe")
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "transactional.id": "described-1",
                                   "transaction.timeout.ms": 45_000})
    producer.init_transactions(60)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce("tx-describe", b"x", partition=p)
    producer.flush(30)

    async def admin_view() -> tuple[list[Any], dict[str, Any]]:
        async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            listed = await admin.list_transactions(states=["Ongoing"])
            described = await admin.describe_transactions(["described-1"])
            with pytest.raises(KafkaError, match="TRANSACTIONAL_ID_NOT_FOUND"):
                await admin.describe_transactions(["nobody"])
            with pytest.raises(ValueError, match="unknown transaction states"):
                await admin.list_transactions(states=["Running"])
            return listed, described

    listed, described = asyncio.run(admin_view())
    assert [t.transactional_id for t in listed] == ["described-1"]
    d = described["described-1"]
    assert (d.state, d.transaction_timeout_ms, d.producer_epoch) == ("Ongoing", 45_000, 0)
    assert sorted((tp.topic, tp.partition) for tp in d.partitions) == \
        [("tx-describe", 0), ("tx-describe", 1)]
    assert d.transaction_start_time_ms > 0 and d.coordinator == coordinator(cluster,
                                                                            "described-1")
    out = epochlog_cli(cluster, "transactions", "list", "--state", "Ongoing")
    assert out.startswith("described-1\tproducer ") and "\tOngoing\t" in out, out
    out = epochlog_cli(cluster, "transactions", "describe", "described-1")
    assert "described-1: Ongoing" in out and "tx-describe\t1" in out, out
    producer.commit_transaction(60)
    until(lambda: "CompleteCommit" in epochlog_cli(cluster, "transactions", "list") or None,
          "the transaction listed as CompleteCommit", 30)
    out = epochlog_cli(cluster, "transactions", "list", "--open-longer-than-ms", "0")
    assert "described-1" not in out, out


def test_kafka_python_and_aiokafka_transactions(cluster: Cluster) -> None:
    """The two other Python clients' transactional producers: a committed and an aborted
    transaction each; read_committed sees the committed records only."""
    kafka = pytest.importorskip("kafka")
    aiokafka = pytest.importorskip("aiokafka")
    cluster.create_topic("tx-python", partitions=1, replication_factor=3)
    cluster.wait_fully_replicated("tx-python")
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                                   transactional_id="kafka-python-1")
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send("tx-python", b"kafka-python committed")
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send("tx-python", b"kafka-python aborted")
        producer.flush()
        producer.abort_transaction()
    finally:
        producer.close()

    async def with_aiokafka() -> None:
        async_producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                                                   transactional_id="aiokafka-1")
        await async_producer.start()
        try:
            async with async_producer.transaction():
                await async_producer.send_and_wait("tx-python", b"aiokafka committed")
            await async_producer.begin_transaction()
            await async_producer.send_and_wait("tx-python", b"aiokafka aborted")
            await async_producer.abort_transaction()
        finally:
            await async_producer.stop()

    asyncio.run(with_aiokafka())
    got = consume_all(cluster, "tx-python", 2, "read_committed")
    assert got == [b"kafka-python committed", b"aiokafka committed"]
    assert [commit for _, _, commit in markers(cluster, "tx-python", 1)] == \
        [True, False, True, False]


def test_our_read_committed_consumer(cluster: Cluster) -> None:
    """epochlog's Consumer with isolation_level="read_committed", by records and by batches
    (what the Spark source reads): committed transactions and plain records in offset order,
    nothing of an aborted transaction, and nothing from an open one's first offset on."""
    confluent = pytest.importorskip("confluent_kafka")
    cluster.create_topic("tx-ours", partitions=1, replication_factor=3)
    cluster.wait_fully_replicated("tx-ours")
    txn = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                              "transactional.id": "ours-1", "linger.ms": 0})
    plain = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                "enable.idempotence": True, "linger.ms": 0})
    txn.init_transactions(60)
    wanted: set[bytes] = set()
    for round_ in range(4):
        txn.begin_transaction()
        for i in range(3):
            txn.produce("tx-ours", f"txn {round_}.{i}".encode())
            txn.flush(30)
            plain.produce("tx-ours", f"plain {round_}.{i}".encode())  # interleaved, outside
            plain.flush(30)
            wanted.add(f"plain {round_}.{i}".encode())
        if round_ % 2:
            txn.abort_transaction(60)
        else:
            txn.commit_transaction(60)
            wanted |= {f"txn {round_}.{i}".encode() for i in range(3)}
    txn.begin_transaction()
    txn.produce("tx-ours", b"open")  # an open transaction: nothing from here on is stable
    txn.flush(30)
    plain.produce("tx-ours", b"after the open one")
    plain.flush(30)

    async def read(isolation: str, by_batches: bool, enough: int
                   ) -> list[tuple[int, bytes | None]]:
        async with Consumer(bootstrap_servers=cluster.bootstrap_servers,
                            isolation_level=isolation, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("tx-ours", 0)])
            got: list[tuple[int, bytes | None]] = []
            loop = asyncio.get_running_loop()
            deadline, extra_until = loop.time() + 60, None
            while loop.time() < (extra_until or deadline):
                if by_batches:  # offsets only: the Spark source decodes the records itself
                    for batch in await consumer.poll_batches(timeout_ms=200):
                        got += [(o, None) for o in range(batch.first_offset, batch.next_offset)]
                else:
                    got += [(r.offset, r.value) for r in await consumer.poll(timeout_ms=200)]
                if extra_until is None and len(got) >= enough:
                    extra_until = loop.time() + AFTER_S  # then a while for what should not come
            return sorted(got)

    everything = asyncio.run(read("read_uncommitted", False, 12 + 12 + 2))
    open_at = next(o for o, v in everything if v == b"open")
    want = [(o, v) for o, v in everything if v in wanted and o < open_at]
    assert len(want) == 18  # 12 plain records and two committed transactions of 3
    assert asyncio.run(read("read_committed", False, len(want))) == want
    assert asyncio.run(read("read_committed", True, len(want))) == [(o, None) for o, _ in want]
    txn.commit_transaction(60)
