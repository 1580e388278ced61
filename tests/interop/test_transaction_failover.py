"""The two-phase commit survives its coordinator (issue 18): a transaction whose decision is
written (PrepareCommit or PrepareAbort in __transaction_state) but whose markers cannot reach the
partition's leader yet (a request hook answers its WriteTxnMarkers with a retriable error) stays
unsettled: read_committed consumers wait at its first offset. The coordinator is then killed and
the hook removed; the next leader of the id's state partition loads the decision from the log,
writes the markers and completes the transaction, and the consumers see the outcome.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from epochlog import Admin, Consumer, TopicPartition
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest
from epochlog.testing import Cluster, until

TOPIC = "tx-failover"


def coordinator_of(cluster: Cluster, transactional_id: str) -> int:
    got: dict[str, Any] = {}

    def ask() -> bool:
        live = [b for b in cluster.broker_ids if cluster.node(b).alive]
        got["answer"] = cluster.node(live[0]).call(
            ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(key=transactional_id, key_type=1),
            version=3)
        return bool(got["answer"].error_code == 0)

    until(ask, f"a coordinator for {transactional_id}", 60, detail=lambda: str(got))
    node: int = got["answer"].node_id
    return node


async def read_committed(bootstrap: str, enough: int) -> list[bytes]:
    """What a read_committed consumer reads from the start: polled until it has `enough`
    (at most 60 s), then 1.5 s more for anything it should not have."""
    async with Consumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                        auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        got: list[bytes] = []
        loop = asyncio.get_running_loop()
        deadline, extra_until = loop.time() + 60, None
        while loop.time() < (extra_until or deadline):
            got += [r.value for r in await consumer.poll(timeout_ms=200) if r.value is not None]
            if extra_until is None and len(got) >= enough:
                extra_until = loop.time() + 1.5
        return got


async def state_of(bootstrap: str, transactional_id: str) -> str:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        return (await admin.describe_transactions([transactional_id]))[transactional_id].state


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_decided_transaction_is_completed_by_the_next_coordinator(tmp_path: Path,
                                                                    commit: bool) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    with Cluster(3, base_dir=tmp_path / "cluster", request_hooks=True,
                 settings={"transaction_state_log_num_partitions": 3}) as cluster:
        cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
        leader = cluster.wait_fully_replicated(TOPIC)[0].leader_id
        # an id coordinated by another broker than the topic's leader (the leader stays up)
        tid = next(t for t in (f"failover-{i}" for i in range(100))
                   if coordinator_of(cluster, t) != leader)
        coordinator = coordinator_of(cluster, tid)
        bootstrap = cluster.bootstrap_servers
        plain = confluent.Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
        plain.produce(TOPIC, b"before")
        plain.flush(30)
        producer = confluent.Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        producer.init_transactions(60)
        producer.begin_transaction()
        for i in range(5):
            producer.produce(TOPIC, f"txn {i}".encode())
        producer.flush(30)
        cluster.inject(leader, "WriteTxnMarkers", "error", error="NOT_ENOUGH_REPLICAS",
                       times=1_000_000)
        if commit:
            producer.commit_transaction(60)  # answered once PrepareCommit is written
        else:
            producer.abort_transaction(60)
        prepared = "PrepareCommit" if commit else "PrepareAbort"
        assert asyncio.run(state_of(bootstrap, tid)) == prepared
        assert asyncio.run(read_committed(bootstrap, 1)) == [b"before"]  # unsettled

        cluster.kill(coordinator)
        cluster.clear_injections(leader)
        done = "CompleteCommit" if commit else "CompleteAbort"
        until(lambda: asyncio.run(state_of(bootstrap, tid)) == done or None,
              f"the next coordinator to complete the transaction ({done})", 60)
        assert coordinator_of(cluster, tid) != coordinator
        want = [b"before"] + ([f"txn {i}".encode() for i in range(5)] if commit else [])
        until(lambda: asyncio.run(read_committed(bootstrap, len(want))) == want or None,
              "read_committed consumers to see the outcome", 60)
        cluster.restart(coordinator)
