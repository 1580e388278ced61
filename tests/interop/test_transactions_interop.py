"""Transactional producers (issue 18) against three real brokers: the transaction coordinator's
InitProducerId and FindCoordinator for transactional ids, first with confluent-kafka (librdkafka)
and then request by request.

A transactional id has one producer id for good; each InitProducerId bumps its epoch, and an
epoch once bumped fences every producer that holds an older one (as a partition leader fences
stale leader epochs: the seeds' rule). The state lives in `__transaction_state` and survives its
coordinator: a new leader of the id's partition loads it and goes on from the same epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest
from epochlog.protocol.apis.init_producer_id import InitProducerIdRequest
from epochlog.protocol.error_codes import ErrorCode
from epochlog.testing import Cluster, until

TXN_TOPIC = "__transaction_state"
SETTINGS = {"transaction_state_log_num_partitions": 3}


def live_brokers(cluster: Cluster) -> list[int]:
    return [b for b in cluster.broker_ids if cluster.node(b).alive]


def coordinator(cluster: Cluster, transactional_id: str) -> int:
    """The broker that coordinates transactional_id, once one does."""
    got: dict[str, Any] = {}

    def ask() -> bool:
        got["answer"] = cluster.node(live_brokers(cluster)[0]).call(
            ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(key=transactional_id, key_type=1),
            version=3)
        return bool(got["answer"].error_code == 0)

    until(ask, f"a coordinator for transactional id {transactional_id}", 60,
          detail=lambda: got.get("answer"))
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

    until(ask, f"InitProducerId for {transactional_id}", 60, detail=lambda: got.get("answer"))
    return got["answer"]


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
