"""Transactional ids expire (Kafka's transactional.id.expiration.ms): an id with no transaction
for that long is forgotten, a tombstone in `__transaction_state` saying so, so a restarted
coordinator does not bring it back; an id with a transaction open does not expire; a producer
that comes back later starts afresh. The coordinator's work shows in the broker's Prometheus
metrics."""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path

from epochlog import Admin, Producer
from epochlog.client.errors import KafkaError
from epochlog.protocol.error_codes import ErrorCode
from epochlog.testing import Cluster, until

from .cluster import free_port

TOPIC = "expiring"


def metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


async def describe(bootstrap: str, transactional_id: str) -> str:
    """The id's state, or the error's name."""
    async with Admin(bootstrap_servers=bootstrap) as admin:
        try:
            found = await admin.describe_transactions([transactional_id])
        except KafkaError as exc:
            assert exc.code is not None, exc
            return ErrorCode(exc.code).name
        return str(found[transactional_id].state)


async def commit_one(bootstrap: str, transactional_id: str) -> int:
    """One committed transaction; the producer id it had."""
    async with Producer(bootstrap_servers=bootstrap, transactional_id=transactional_id) as p:
        await p.init_transactions()
        async with p.transaction():
            await p.send(TOPIC, b"x")
    async with Admin(bootstrap_servers=bootstrap) as admin:
        found = await admin.describe_transactions([transactional_id])
        return found[transactional_id].producer_id


def test_idle_ids_expire_open_ones_do_not_and_metrics_count(tmp_path: Path) -> None:
    port = free_port()
    settings = {"transaction_state_log_num_partitions": 1,
                "transactional_id_expiration_ms": 3000,
                "transaction_remove_expired_transaction_cleanup_interval_ms": 300}
    with Cluster(1, base_dir=tmp_path, settings=settings,  # metrics: the broker's only
                 broker_args=["--set", f"metrics_listen=127.0.0.1:{port}"]) as cluster:
        bootstrap = cluster.bootstrap_servers
        cluster.create_topic(TOPIC, partitions=1, replication_factor=1)
        first_pid = asyncio.run(commit_one(bootstrap, "idle"))
        # counted once the markers are written, after commit_transaction has returned
        until(lambda: metrics(port).get("epochlog_broker_transactions_committed_total", 0) >= 1
              or None, "the commit to complete and be counted", 60)
        assert metrics(port)["epochlog_broker_transaction_inits_total"] >= 1

        async def keep_one_open() -> None:
            async with Producer(bootstrap_servers=bootstrap, transactional_id="open",
                                transaction_timeout_ms=120_000) as p:
                await p.init_transactions()
                p.begin_transaction()
                await (await p.send(TOPIC, b"open"))
                deadline = asyncio.get_running_loop().time() + 60
                while await describe(bootstrap, "idle") != "TRANSACTIONAL_ID_NOT_FOUND":
                    assert asyncio.get_running_loop().time() < deadline, "idle never expired"
                    await asyncio.sleep(0.2)
                assert await describe(bootstrap, "open") == "Ongoing"
                await p.abort_transaction()

        asyncio.run(keep_one_open())
        assert metrics(port)["epochlog_broker_transactional_ids_expired_total"] >= 1
        assert any("transactional ids expired" in line and "idle" in line
                   for line in (tmp_path / "logs" / "broker-1.log").read_text().splitlines())
        cluster.restart(1)  # the tombstone keeps it forgotten when the log is loaded again
        until(lambda: asyncio.run(describe(bootstrap, "idle")) == "TRANSACTIONAL_ID_NOT_FOUND"
              or None, "the restarted coordinator to load, without the expired id", 60)
        again = asyncio.run(commit_one(bootstrap, "idle"))
        assert again != first_pid  # a new start: a new producer id
        until(lambda: metrics(port).get(
            'epochlog_broker_transactional_ids{state="CompleteCommit"}', 0) >= 1 or None,
            "the new transaction to complete (CompleteCommit follows the markers)", 60)
