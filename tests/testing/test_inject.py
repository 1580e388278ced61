"""Cluster.inject on real processes: a hook armed through the harness changes what a real client
sees, the client copes as it should, and the fault lands in the cluster's fault log and in the
History. A cluster made without request_hooks serves none, and inject says how to get them.

One broker keeps it quick: the hooks act on one broker's requests whatever the cluster size.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from epochlog.testing import Cluster, History, adapter_ours, check
from epochlog.testing.history import Fault
from epochlog.testing.hooks import HookError, list_hooks

WAIT_S = 60.0


async def produce(bootstrap: str, history: History, topic: str, count: int) -> None:
    async with adapter_ours.Producer(bootstrap, acks="all", enable_idempotence=True,
                                     retry_backoff_ms=50, history=history,
                                     name="producer") as producer:
        for i in range(count):
            await producer.send_and_wait(topic, f"v-{i}".encode())


async def read(bootstrap: str, history: History, topic: str, count: int) -> int:
    from epochlog.client import TopicPartition

    async with adapter_ours.Consumer(bootstrap, auto_offset_reset="earliest",
                                     request_timeout_ms=5000, history=history,
                                     name="reader") as consumer:
        consumer.assign([TopicPartition(topic, 0)])
        seen = 0
        deadline = time.monotonic() + WAIT_S
        while seen < count:
            assert time.monotonic() < deadline, f"read {seen} of {count}"
            seen += len(await consumer.poll(timeout_ms=500))
        return seen


@pytest.mark.parametrize("network", [False, True], ids=["loopback", "own-network"])
def test_injected_not_leader_is_retried_and_a_dropped_fetch_is_survived(
        epochlog_cluster: Callable[..., Cluster], network: bool) -> None:
    """On loopback and on a network of the cluster's own (namespaces as root, else the proxy:
    the hooks control is reached directly on the broker's own address either way)."""
    history = History()
    c = epochlog_cluster(brokers=1, request_hooks=True, on_fault=history.record_fault,
                         network=network)
    c.create_topic("hooked", partitions=1, replication_factor=1)
    hook = c.inject(1, "PRODUCE", "error", error="NOT_LEADER_OR_FOLLOWER", times=2)
    assert hook.remaining == 2 and hook.error == "NOT_LEADER_OR_FOLLOWER"

    asyncio.run(produce(c.bootstrap_servers, history, "hooked", 5))
    fired = {h.id: h.fired for h in list_hooks(c.hooks_address(1))}
    assert fired[hook.id] == 2, fired  # both errors were answered, and retried past

    dropped = c.inject(1, "FETCH", "drop")
    assert asyncio.run(read(c.bootstrap_servers, history, "hooked", 5)) == 5
    assert {h.id: h.fired for h in list_hooks(c.hooks_address(1))}[dropped.id] == 1

    assert [(f.kind, f.targets) for f in c.faults] == [("inject", (1,)), ("inject", (1,))]
    assert "answer NOT_LEADER_OR_FOLLOWER the next 2 Produce" in c.faults[0].detail
    assert c.faults[0].monotonic_s <= c.faults[1].monotonic_s
    recorded = [op for op in history.ops if isinstance(op, Fault)]
    assert [op.kind for op in recorded] == ["inject", "inject"]
    assert "drop the next 1 Fetch" in recorded[1].detail
    assert c.clear_injections(1) == 2
    assert c.faults[-1].kind == "clear-injections"
    assert "Produce error 2/2, Fetch drop 1/1" in c.faults[-1].detail, c.faults[-1].detail
    verdict = check(history)
    assert verdict.ok and not verdict.anomalies, verdict


def test_without_request_hooks_no_broker_listens_and_inject_says_so(
        epochlog_cluster: Callable[..., Cluster]) -> None:
    c = epochlog_cluster(brokers=1)
    assert "request_hooks_listen" not in " ".join(c.brokers[1].command({c.brokers[1].port: (
        c.network.bind("1", c.brokers[1].port))}))
    with pytest.raises(HookError, match="request_hooks=True"):
        c.inject(1, "PRODUCE", "drop")
    assert c.faults == []
