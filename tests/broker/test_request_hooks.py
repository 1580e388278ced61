"""Test-only request hooks on a real broker process, driven by epochlog.testing.hooks, seen by
real clients: an injected NOT_LEADER_OR_FOLLOWER on Produce is retried (confluent-kafka and
ours), a dropped Fetch times out while its connection stays open, a delayed Metadata arrives
late, a hook for another client id leaves ours alone, and a broker started without
request_hooks_listen has no control to reach."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer as CKProducer

from epochlog.client import Producer
from epochlog.client.connection import Connection, RequestTimedOut
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.api_versions import ApiVersionsRequest
from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from epochlog.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.frames import frame
from epochlog.protocol.headers import RequestHeader
from epochlog.protocol.registry import APIS
from epochlog.testing.hooks import HookError, clear_hooks, install_hook, list_hooks
from tests.broker.cluster import Cluster, call, free_port

TOPIC = "hooked"
WAIT_S = 30.0


class Hooked:
    def __init__(self, cluster: Cluster, control: str) -> None:
        self.cluster = cluster
        self.control = control
        self.port = cluster.broker(1).port
        self.bootstrap = cluster.bootstrap


@pytest.fixture(scope="module")
def hooked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hooked]:
    control = f"127.0.0.1:{free_port()}"
    with Cluster(tmp_path_factory.mktemp("hooks"), brokers=1,
                 broker_args=["--set", f"request_hooks_listen={control}"]) as cluster:
        cluster.broker(1).wait_line("request hooks \\(test only\\) listening on")
        cluster.create_topic(TOPIC, partitions=1, replication_factor=1)
        yield Hooked(cluster, control)


@pytest.fixture
def broker(hooked: Hooked) -> Hooked:
    clear_hooks(hooked.control)
    return hooked


def test_injected_not_leader_on_produce_is_retried_by_confluent_kafka(broker: Hooked) -> None:
    hook = install_hook(broker.control, ApiKey.PRODUCE, "error",
                        error=ErrorCode.NOT_LEADER_OR_FOLLOWER, times=2)
    assert hook.describe() == "answer NOT_LEADER_OR_FOLLOWER the next 2 Produce request(s)"
    reports: list[tuple[object, int]] = []
    producer = CKProducer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                           "enable.idempotence": True, "retry.backoff.ms": 50})
    producer.produce(TOPIC, b"retried", on_delivery=lambda e, m: reports.append((e, m.offset())))
    assert producer.flush(WAIT_S) == 0
    assert len(reports) == 1 and reports[0][0] is None, reports
    (after,) = list_hooks(broker.control)
    assert (after.fired, after.remaining) == (2, 0)
    assert broker.cluster.broker(1).has_line("request hook 1 installed (test only): answer "
                                             "NOT_LEADER_OR_FOLLOWER the next 2 Produce")


def test_injected_not_leader_on_produce_is_retried_by_our_producer(broker: Hooked) -> None:
    install_hook(broker.control, "Produce", "error", error="NOT_LEADER_OR_FOLLOWER", times=3)

    async def send() -> int:
        async with Producer(broker.bootstrap, acks="all", retry_backoff_ms=20) as producer:
            meta = await producer.send_and_wait(TOPIC, b"ours, retried")
            return meta.offset

    assert asyncio.run(send()) >= 0
    assert [(h.fired, h.remaining) for h in list_hooks(broker.control)] == [(3, 0)]


def test_a_dropped_fetch_times_out_and_its_connection_stays_open(broker: Hooked) -> None:
    install_hook(broker.control, ApiKey.FETCH, "drop")
    fetch = FetchRequest(max_wait_ms=0, min_bytes=0, topics=[FetchTopic(
        topic=TOPIC, partitions=[FetchPartition(partition=0, fetch_offset=0,
                                                partition_max_bytes=1024)])])
    with socket.create_connection(("127.0.0.1", broker.port), timeout=WAIT_S) as sock:
        sock.sendall(request_frame(ApiKey.FETCH, 11, 1, fetch))
        sock.settimeout(2.0)
        with pytest.raises(TimeoutError):  # no answer: dropped (a Fetch with max_wait 0 and
            sock.recv(4)                   # min_bytes 0 is answered at once otherwise)
        sock.settimeout(WAIT_S)
        sock.sendall(request_frame(ApiKey.API_VERSIONS, 2, 2, ApiVersionsRequest()))
        size, correlation_id = struct.unpack(">ii", recv_exactly(sock, 8))
        assert correlation_id == 2  # the connection goes on: the next request is answered
    assert [(h.fired, h.remaining) for h in list_hooks(broker.control)] == [(1, 0)]

    async def our_fetch_times_out() -> None:
        install_hook(broker.control, ApiKey.FETCH, "drop")
        conn = await Connection("127.0.0.1", broker.port, request_timeout_ms=1000).connect()
        try:
            with pytest.raises(RequestTimedOut, match="Fetch got no answer in 1.0s"):
                await conn.request(APIS[ApiKey.FETCH], 11, fetch)
        finally:
            await conn.close()

    asyncio.run(our_fetch_times_out())


def test_a_delayed_metadata_arrives_late(broker: Hooked) -> None:
    install_hook(broker.control, ApiKey.METADATA, "delay", delay_ms=1500)
    request = MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)])
    started = time.monotonic()
    answer = call("127.0.0.1", broker.port, ApiKey.METADATA, request)
    assert time.monotonic() - started >= 1.5  # a lower bound: the hook sleeps at least that
    assert answer.topics[0].error_code == 0  # delayed, then answered as usual
    assert [(h.fired, h.remaining) for h in list_hooks(broker.control)] == [(1, 0)]


def test_a_hook_for_another_client_leaves_ours_alone(broker: Hooked) -> None:
    install_hook(broker.control, ApiKey.METADATA, "error", error="UNKNOWN_SERVER_ERROR",
                 client_id="someone-else")
    answer = call("127.0.0.1", broker.port, ApiKey.METADATA,
                  MetadataRequest(topics=[MetadataRequestTopic(name=TOPIC)]))
    assert answer.topics[0].error_code == 0
    (hook,) = list_hooks(broker.control)
    assert (hook.fired, hook.remaining) == (0, 1)


def test_bad_hooks_are_refused_naming_the_reason(broker: Hooked) -> None:
    for kwargs, reason in [
            ({"api": "NO_SUCH_API", "action": "drop"}, "unknown API 'NO_SUCH_API'"),
            ({"api": ApiKey.ALTER_PARTITION, "action": "drop"}, "serves no API with key 56"),
            ({"api": ApiKey.FETCH, "action": "error"}, "needs an error"),
            ({"api": ApiKey.FETCH, "action": "error", "error": "NONE"}, "is not an error code"),
            ({"api": ApiKey.FETCH, "action": "delay"}, "delay_ms must be 1 to"),
            ({"api": ApiKey.FETCH, "action": "drop", "delay_ms": 5}, "delay_ms is for the delay"),
            ({"api": ApiKey.FETCH, "action": "drop", "times": 0}, "times must be 1 to"),
            ({"api": ApiKey.FETCH, "action": "explode"}, "Invalid enum value 'explode'")]:
        with pytest.raises(HookError, match=reason):
            install_hook(broker.control, **kwargs)  # type: ignore[arg-type]
    assert list_hooks(broker.control) == []
    assert broker.cluster.broker(1).alive


def test_a_broker_without_the_setting_has_no_control(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1) as cluster:
        b = cluster.broker(1)
        nowhere = f"127.0.0.1:{free_port()}"
        with pytest.raises(HookError, match=f"no request hooks at {nowhere}: is the broker "
                                            f"started with request_hooks_listen"):
            install_hook(nowhere, ApiKey.PRODUCE, "drop")
        with pytest.raises(HookError):  # its Kafka listener does not take the control
            install_hook(f"127.0.0.1:{b.port}", ApiKey.PRODUCE, "drop")
        assert b.alive and not b.has_line("request hooks")
        assert call("127.0.0.1", b.port, ApiKey.METADATA, MetadataRequest(topics=[])).brokers


def request_frame(key: ApiKey, version: int, correlation_id: int, message: object) -> bytes:
    api = APIS[key]
    header = RequestHeader(key, version, correlation_id, "raw-test")
    return frame(header.encode(api.request_header_version(version))
                 + api.encode_request(message, version))  # type: ignore[arg-type]


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        assert chunk, "the broker closed the connection"
        data += chunk
    return data
