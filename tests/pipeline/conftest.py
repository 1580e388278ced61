"""Shared by the Spark tests: one local SparkSession for all of them (a JVM start costs 10-20 s
on two busy cores), stopped when they are done, and one three-broker cluster per module.

No skip: without Java or PySpark these fail, loudly (.ci/run installs both)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from epochlog.client import Producer
from tests.broker.cluster import Cluster, free_port

SESSION_MS = 3000


@pytest.fixture(scope="package")
def spark() -> Iterator[Any]:
    assert shutil.which("java"), "Java is needed by PySpark (.ci/run installs it)"
    from epochlog import pipeline

    session = pipeline.session("local[2]", "epochlog-tests", **{
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.minBatchesToRetain": "5",
    })
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


def racked_cluster(base: Any) -> Cluster:
    """Three brokers in racks a, b, c, rack-aware replica selection (KIP-392), short sessions
    (a killed broker is noticed in seconds) and a metrics port each."""
    cluster = Cluster(base, brokers=3,
                      controller_args=["--set", f"broker_session_timeout_ms={SESSION_MS}"],
                      broker_args=["--set", f"broker_heartbeat_interval_ms={SESSION_MS // 4}",
                                   "--set", "replica_selector_class=rack-aware"])
    cluster.metrics_ports = {i: free_port() for i in cluster.brokers}  # type: ignore[attr-defined]
    for i, b in cluster.brokers.items():
        b.extra += ["--set", f"metrics_listen=127.0.0.1:{cluster.metrics_ports[i]}"]  # type: ignore[attr-defined]
    return cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with racked_cluster(tmp_path_factory.mktemp("spark-cluster")) as c:
        yield c


def produce(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None,
                                                             list[tuple[str, bytes | None]]]],
            partition: int | None = None, **settings: Any) -> None:
    """(key, value, headers) each, acks=all, idempotent; every one acknowledged."""
    async def go() -> None:
        async with Producer(bootstrap, acks="all", enable_idempotence=True, **settings) as p:
            futures = [await p.send(topic, value=v, key=k, headers=h or None,
                                    partition=partition) for k, v, h in records]
            await p.flush()
            for f in futures:
                await f
    asyncio.run(go())
