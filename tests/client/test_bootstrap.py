"""bootstrap_servers as Kafka users pass it: a comma-separated string or a list of HOST:PORT."""

from __future__ import annotations

import pytest

from epochlog.client import Admin, Consumer, Producer, TopicPartition
from epochlog.client.cluster import parse_bootstrap
from tests.broker.cluster import Cluster


@pytest.mark.parametrize(("given", "servers"), [
    ("a:1", [("a", 1)]),
    ("a:1,b:2", [("a", 1), ("b", 2)]),
    (" a:1 , b:2 ", [("a", 1), ("b", 2)]),
    (["a:1", "b:2"], [("a", 1), ("b", 2)]),
    (("a:1", "b:2,c:3"), [("a", 1), ("b", 2), ("c", 3)]),
    ("[::1]:9092", [("::1", 9092)]),
])
def test_strings_and_lists(given: str | list[str], servers: list[tuple[str, int]]) -> None:
    assert parse_bootstrap(given) == servers


@pytest.mark.parametrize(("given", "message"), [
    ("", "names no server"),
    (",", "names no server"),
    ([], "names no server"),
    ("localhost", "'localhost' is not HOST:PORT"),
    ("a:0", "'a:0' is not HOST:PORT"),
    ("a:70000", "'a:70000' is not HOST:PORT"),
    (["a:1", 2], "a string or a list of strings"),
])
def test_garbage_is_refused_by_name(given: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_bootstrap(given)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=message):
        Producer(given)  # type: ignore[arg-type]


async def test_every_client_takes_a_list(tmp_path: object) -> None:
    with Cluster(tmp_path, brokers=1) as cluster:  # type: ignore[arg-type]
        servers = cluster.bootstrap.split(",") + ["127.0.0.1:1"]  # one dead server is skipped
        async with Admin(servers) as admin:
            assert await admin.describe_cluster()
        async with Producer(servers) as producer:
            meta = await producer.send_and_wait("boot", value=b"x")
        async with Consumer(servers, auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition(meta.topic, meta.partition)])
            records = await consumer.poll(timeout_ms=10_000)
        assert [r.value for r in records] == [b"x"]
