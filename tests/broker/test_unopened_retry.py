"""A partition whose log found no file descriptor when the controller placed it is opened as soon
as one is free, not at the next control request naming it (issue 33).

On a real broker under a lowered open-files limit: idle client connections take every descriptor
the broker has left, a topic is created (its logs cannot be opened: EMFILE, answered
KAFKA_STORAGE_ERROR, and the broker stays up), the connections are closed, and the partitions
then take records and give them back with no other control request (the broker says it opened
them). Before, they stayed unserved until the controller next named them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochlog import Consumer, Producer, TopicPartition
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_topics import CreatableTopic, CreateTopicsRequest
from epochlog.testing import until
from epochlog.testing.cluster import Cluster

LIMIT = 300
PARTITIONS = 4
WAIT_S = 120.0
SERVED_S = 60.0  # the retry runs every storage tick (a fraction of a second)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(1, base_dir=tmp_path, start_timeout_s=WAIT_S)
    command = c._command  # the harness's own launcher, wrapped
    for node in c.nodes():
        node.launcher = lambda n, command=command: [  # type: ignore[misc]
            "prlimit", f"--nofile={LIMIT}:{LIMIT}", "--", *command(n)]
    with c:
        yield c


def waiting(cluster: Cluster) -> bool:
    """The broker said a partition of the topic found no descriptor for its log."""
    return bool(re.search(r"late-\d+: its log found no file descriptor",
                          cluster.brokers[1].log_path.read_text()))


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def produce_and_read(bootstrap: str, topic: str) -> list[bytes]:
    async with Producer(bootstrap, acks="all") as producer:
        for p in range(PARTITIONS):
            await (await producer.send(topic, b"v%d" % p, partition=p))
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    async with Consumer(bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign(tps)
        got: list[bytes] = []
        while len(got) < PARTITIONS:
            got += [r.value for r in await consumer.poll(timeout_ms=1000)]
        return sorted(got)


def test_a_log_that_found_no_descriptor_is_opened_once_one_is_free(cluster: Cluster) -> None:
    broker = cluster.brokers[1]
    host, port = broker.address.rsplit(":", 1)
    held: list[socket.socket] = []
    try:
        for _ in range(LIMIT):  # more than the broker has left: it stops accepting at EMFILE
            held.append(socket.create_connection((host, int(port)), timeout=10))
        # every descriptor taken (the rest of the connections wait in the listen backlog, and
        # the broker's accept takes any descriptor freed within a second)
        until(lambda: descriptors(broker.pid) >= LIMIT - 1 or None,
              "the broker's descriptors all taken", WAIT_S)
        # to the controller itself: the broker accepts no connection now
        answer = cluster.call_node("controller", ApiKey.CREATE_TOPICS, CreateTopicsRequest(topics=[
            CreatableTopic(name="late", num_partitions=PARTITIONS, replication_factor=1)],
            timeout_ms=30_000), timeout_s=WAIT_S)
        assert answer.topics[0].error_code == 0, answer
        until(lambda: waiting(cluster) or None,
              "the broker to say a log of the topic found no descriptor", WAIT_S)
        assert broker.alive
    finally:
        for s in held:
            with contextlib.suppress(OSError):
                s.close()
    # the broker drains its listen backlog (each of those connections closed already)
    until(lambda: descriptors(broker.pid) < LIMIT // 2 or None,
          "the broker's descriptors freed", WAIT_S)
    try:
        values = asyncio.run(asyncio.wait_for(
            produce_and_read(cluster.bootstrap_servers, "late"), SERVED_S))
    except TimeoutError:
        raise AssertionError(f"the partitions were not served within {SERVED_S} s of the "
                             "descriptors being freed") from None
    assert values == sorted(b"v%d" % p for p in range(PARTITIONS))
    assert "had found no file descriptor" in broker.log_path.read_text()  # said so
