"""Issue 33, on real processes: one CreateTopics must never take the cluster down. Three brokers
and a controller run under a lowered open-files limit (`prlimit`, soft = hard = LIMIT, so that a
few hundred partitions are past the limit's worth and the test runs fast). Each partition has
three files per segment (.log, .index, .timeindex): the replicas accepted here hold more files
than LIMIT, which used to stop every broker with EMFILE.

What is checked: each broker logs its limit and the replicas it can host; a topic whose
placement fits is created, a topic that would take a broker past its capacity is refused with
POLICY_VIOLATION naming the broker and the numbers (validate_only alike), and nothing stops;
every partition accepted takes a record and gives it back; each broker holds fewer descriptors
than its limit; and a restart of every broker, one after the other, keeps all of it.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochlog import Consumer, Producer, TopicPartition
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_topics import CreatableTopic, CreateTopicsRequest
from epochlog.protocol.error_codes import ErrorCode
from epochlog.testing.cluster import Cluster
from epochlog.testing.nodes import Node

LIMIT = 800
# What the broker derives from LIMIT (storage/descriptors.py): LIMIT less a quarter for
# sockets less 128 reserved.
CAPACITY = LIMIT - LIMIT // 4 - 128  # 472
FIRST, SECOND = 300, 150  # partitions of the two topics that fit (RF 3 on 3 brokers)
TOO_MANY = 200  # 300 + 200 > CAPACITY
WAIT_S = 120.0


def _limited(cluster: Cluster) -> None:
    """Every node of the cluster starts under `prlimit --nofile=LIMIT:LIMIT`."""
    command = cluster._command  # the harness's own launcher, wrapped
    for node in cluster.nodes():
        node.launcher = lambda n, command=command: [  # type: ignore[misc]
            "prlimit", f"--nofile={LIMIT}:{LIMIT}", "--", *command(n)]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(3, base_dir=tmp_path, start_timeout_s=WAIT_S)
    _limited(c)
    with c:
        yield c


def _create(cluster: Cluster, name: str, partitions: int, *, validate_only: bool = False
            ) -> tuple[int, str | None]:
    request = CreateTopicsRequest(topics=[CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=3)],
        timeout_ms=30_000, validate_only=validate_only)
    result = cluster.call_node(1, ApiKey.CREATE_TOPICS, request, timeout_s=WAIT_S).topics[0]
    return result.error_code, result.error_message


def _descriptors(node: Node) -> int:
    return len(os.listdir(f"/proc/{node.pid}/fd"))


async def _round_trip(bootstrap: str, topics: dict[str, int], tag: bytes) -> None:
    """A record to every partition, then each read back from where it was written."""
    written: dict[TopicPartition, int] = {}
    async with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=5) as producer:
        futures = {TopicPartition(t, i): await producer.send(t, value=tag + b"%d" % i,
                                                              partition=i)
                   for t, count in topics.items() for i in range(count)}
        await producer.flush()
        for tp, future in futures.items():
            written[tp] = (await future).offset
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(written)
        for tp, offset in written.items():
            consumer.seek(tp, offset)
        seen: dict[TopicPartition, bytes] = {}
        async with asyncio.timeout(WAIT_S):
            while len(seen) < len(written):
                for r in await consumer.poll(timeout_ms=1000):
                    tp = TopicPartition(r.topic, r.partition)
                    if r.offset == written[tp]:
                        seen[tp] = r.value
    assert seen == {tp: tag + b"%d" % tp.partition for tp in written}


def test_a_cluster_under_a_low_limit_refuses_what_it_cannot_host_and_serves_the_rest(
        cluster: Cluster) -> None:
    for node in cluster.brokers.values():
        assert node.has_line(f"open-files limit {LIMIT} (hard {LIMIT}")
        assert node.has_line(f"hosts at most {CAPACITY} replicas")

    cluster.create_topic("first", FIRST, 3, timeout_s=WAIT_S)
    for validate_only in (True, False):
        error, message = _create(cluster, "too-many", TOO_MANY, validate_only=validate_only)
        assert error == ErrorCode.POLICY_VIOLATION, (error, message)
        assert message is not None
        assert re.search(rf"broker \d can host {CAPACITY} replicas \(its open-files limit\) and "
                         rf"holds {FIRST}; this would add {TOO_MANY} "
                         rf"\({FIRST + TOO_MANY} in all\)", message), message
    cluster.create_topic("second", SECOND, 3, timeout_s=WAIT_S)
    topics = {"first": FIRST, "second": SECOND}
    assert 3 * (FIRST + SECOND) > LIMIT  # the files of the replicas hosted: past the limit

    asyncio.run(_round_trip(cluster.bootstrap_servers, topics, b"before-"))
    for node in cluster.brokers.values():
        assert node.alive
        assert _descriptors(node) < LIMIT
        assert not node.has_line("Too many open files")

    for broker_id in cluster.broker_ids:  # a rolling restart: each opens every log again
        cluster.restart(broker_id)
        for name, count in topics.items():
            cluster.wait_leaders(name, count, timeout_s=WAIT_S)
    asyncio.run(_round_trip(cluster.bootstrap_servers, topics, b"after-"))
    for node in cluster.brokers.values():
        assert node.alive and _descriptors(node) < LIMIT
        assert not node.has_line("KAFKA_STORAGE_ERROR")
