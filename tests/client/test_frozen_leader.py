"""A produce through a frozen leader, with default settings, on real processes (issue 29, item 2).

First case: a partition's leader is paused (SIGSTOP) and `epochlog produce --acks all` is started
with every setting at its default, as a user would run it. The paused broker's kernel still accepts
TCP connections, so the producer's connection setup to it hangs at ApiVersions. What must happen:
the producer leaves its batches unsent while that connection is being set up, asks for metadata
meanwhile, and sends them to the new leader once the controller has elected one (the broker's
session expires: a few seconds). Before the fix the batches were handed to a request that waited
for ApiVersions for the whole request timeout (30 s), which was also the CLI's delivery
timeout: all 20 records failed.

Second case: the library's Producer, default settings, has delivered a record through the leader
before it is paused, so its connection to it works; the next records are sent on it and get no
answer. What must happen: the producer notices the leader went silent, asks for metadata, and
once that names a new leader gives the silent connection up and retries the batches there. Before,
they waited out the request timeout (30 s), as Java's producer does.

The bound on the duration is generous on purpose (two busy cores): the expected figure is the
failover plus about a second (bench/frozen_leader.py measures it beside kcat); the bound is the
request timeout, the time the frozen leader's ApiVersions cost before, and a run that needed it
is the bug this test is about.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

from epochlog.client import Producer
from tests.client.test_produce_cli import ROOT, read_values

TOPIC = "frozen"
RECORDS = 20
REQUEST_TIMEOUT_S = 30.0  # the default request_timeout_ms: what one ApiVersions could cost
CHILD_S_MAX = 150.0  # beyond Kafka's delivery timeout (120 s): the tool must have ended by then


def test_produce_through_a_paused_leader_takes_the_failover_not_a_timeout(
        epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=3, settings={"min.insync.replicas": 2})
    c.create_topic(TOPIC, partitions=1, replication_factor=3)
    frozen = c.leader_of(TOPIC, 0)
    live = ",".join(c.brokers[b].address for b in c.broker_ids if b != frozen)
    c.pause(frozen)
    try:
        started = time.monotonic()
        child = subprocess.run(
            [sys.executable, "-m", "epochlog", "produce", TOPIC, "--acks", "all",
             "--bootstrap-server", live],
            input=b"".join(b"%d\n" % i for i in range(1, RECORDS + 1)), capture_output=True,
            cwd=ROOT, timeout=CHILD_S_MAX)
        took_s = time.monotonic() - started
        err = child.stderr.decode()
        assert child.returncode == 0 and f"produced {RECORDS} records" in err, err
        new_leader = c.leader_of(TOPIC, 0)
        assert new_leader != frozen, "the records were acknowledged while their leader slept"
        assert took_s < REQUEST_TIMEOUT_S, (
            f"{took_s:.1f}s: the producer waited on the frozen leader instead of following "
            f"the failover to broker {new_leader}")
        assert read_values(live, TOPIC, RECORDS) == [b"%d" % i for i in range(1, RECORDS + 1)]
    finally:
        c.resume(frozen)


async def test_requests_to_a_leader_that_froze_follow_the_failover(epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=3, settings={"min.insync.replicas": 2})
    c.create_topic(TOPIC, partitions=1, replication_factor=3)
    frozen = c.leader_of(TOPIC, 0)
    live = ",".join(c.brokers[b].address for b in c.broker_ids if b != frozen)
    async with Producer(live) as producer:  # idempotent, acks=all: the defaults
        first = await producer.send_and_wait(TOPIC, b"first")
        c.pause(frozen)
        try:
            started = time.monotonic()
            deliveries = [await producer.send(TOPIC, b"%d" % i) for i in range(1, RECORDS + 1)]
            async with asyncio.timeout(CHILD_S_MAX):
                sent = [await d for d in deliveries]
            took_s = time.monotonic() - started
        finally:
            c.resume(frozen)
    assert all(m.leader_epoch > first.leader_epoch for m in sent), "not at the new leader"
    assert [m.offset for m in sent] == list(range(first.offset + 1, first.offset + 1 + RECORDS))
    assert took_s < REQUEST_TIMEOUT_S, (
        f"{took_s:.1f}s: the batches waited out the request timeout on the frozen leader")
    values = read_values(live, TOPIC, RECORDS + 1)
    assert values == [b"first"] + [b"%d" % i for i in range(1, RECORDS + 1)], "lost or twice"
