"""Incremental fetch sessions (KIP-227): the cache's rules, the answers' filtering, and real
consumers reading through them.

Units: `FetchSessionCache.begin` over the table in broker/fetch_sessions.py (open, incremental,
wrong epoch, unknown id, close, eviction), and Fetch's `answer` on an incremental session listing
only partitions with news. Real processes: confluent-kafka, kafka-python and aiokafka consumers
each read 10,000 records across 3 partitions from one broker; the broker's
epochlog_broker_fetch_sessions_opened counter shows which clients opened sessions (kafka-python
does; which others do is recorded by the test's assertions).
"""

from __future__ import annotations

import asyncio
import random
import urllib.request

import pytest

from epochlog.broker.fetch_sessions import (
    EPOCH_MAX,
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionCache,
    Kind,
    next_epoch,
)
from epochlog.broker.handlers import fetch
from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from epochlog.protocol.error_codes import ErrorCode as E

from .cluster import Cluster, free_port
from .test_follower_reads import TOPIC, make_app, produce, state


def request(session_id: int, epoch: int, partitions: dict[int, int] | None = None,
            forgotten: list[int] | None = None, replica_id: int = -1) -> FetchRequest:
    """partitions: index -> fetch offset."""
    topics = [FetchTopic(topic=TOPIC, partitions=[
        FetchPartition(partition=i, fetch_offset=o, partition_max_bytes=1 << 20)
        for i, o in partitions.items()])] if partitions else []
    gone = [ForgottenTopic(topic=TOPIC, partitions=forgotten)] if forgotten else []
    return FetchRequest(replica_id=replica_id, session_id=session_id, session_epoch=epoch,
                        topics=topics, forgotten_topics_data=gone)


# ---------------------------------------------------------------------------------- the cache
def test_a_session_opens_on_epoch_0_and_then_expects_each_next_epoch() -> None:
    cache = FetchSessionCache(10, random.Random(1))
    opened = cache.begin(request(0, INITIAL_EPOCH, {0: 0, 1: 0}))
    assert opened.kind is Kind.FULL and opened.session_id != 0
    sid = opened.session_id
    step = cache.begin(request(sid, 1, {1: 5}))
    assert step.kind is Kind.INCREMENTAL and step.session is opened.session
    assert step.session.partitions[(TOPIC, 1)].want.fetch_offset == 5
    assert step.session.partitions[(TOPIC, 0)].want.fetch_offset == 0  # kept
    again = cache.begin(request(sid, 1))
    assert (again.kind, again.error_code) == (Kind.ERROR, E.INVALID_FETCH_SESSION_EPOCH)
    missing = cache.begin(request(sid + 1, 2))
    assert missing.error_code == E.FETCH_SESSION_ID_NOT_FOUND
    assert cache.begin(request(sid, 2, replica_id=3)).error_code == \
        E.FETCH_SESSION_ID_NOT_FOUND  # someone else's session
    assert cache.begin(request(sid, 2)).kind is Kind.INCREMENTAL  # the right one still works
    assert cache.refused == {"INVALID_FETCH_SESSION_EPOCH": 1, "FETCH_SESSION_ID_NOT_FOUND": 2}
    assert next_epoch(EPOCH_MAX) == 1


def test_forgotten_partitions_leave_and_an_empty_session_closes() -> None:
    cache = FetchSessionCache(10)
    sid = cache.begin(request(0, 0, {0: 0, 1: 0})).session_id
    step = cache.begin(request(sid, 1, forgotten=[0]))
    assert list(step.session.partitions) == [(TOPIC, 1)]
    last = cache.begin(request(sid, 2, forgotten=[1]))
    assert last.kind is Kind.SESSIONLESS and cache.get(sid) is None


def test_final_epoch_closes_and_initial_epoch_reopens() -> None:
    cache = FetchSessionCache(10)
    sid = cache.begin(request(0, 0, {0: 0})).session_id
    closed = cache.begin(request(sid, FINAL_EPOCH, {0: 0}))
    assert closed.kind is Kind.SESSIONLESS and closed.session_id == 0 and len(cache) == 0
    sid = cache.begin(request(0, 0, {0: 0})).session_id
    reopened = cache.begin(request(sid, INITIAL_EPOCH, {0: 0}))
    assert reopened.kind is Kind.FULL and reopened.session_id != sid and len(cache) == 1
    assert cache.begin(request(0, FINAL_EPOCH, {0: 0})).kind is Kind.SESSIONLESS  # pre-v7
    assert FetchSessionCache(0).begin(request(0, 0, {0: 0})).kind is Kind.SESSIONLESS


def test_the_least_recently_used_session_is_evicted() -> None:
    cache = FetchSessionCache(2)
    a = cache.begin(request(0, 0, {0: 0})).session_id
    b = cache.begin(request(0, 0, {0: 0})).session_id
    assert cache.begin(request(a, 1, {0: 1})).kind is Kind.INCREMENTAL  # a is now the recent one
    c = cache.begin(request(0, 0, {0: 0})).session_id
    assert cache.get(b) is None and cache.get(a) is not None and cache.get(c) is not None
    assert cache.evicted_total == 1 and len(cache) == 2
    assert cache.begin(request(b, 1)).error_code == E.FETCH_SESSION_ID_NOT_FOUND


# -------------------------------------------------------------------- answers on a session
@pytest.fixture
def leader(tmp_path):
    app = make_app(1, "leader")
    parts = []
    for index in range(3):
        p = app.host(tmp_path, index)
        p.apply(state(1, 3, isr=(1,)))
        parts.append(p)
    produce(parts[0], 3)
    return app, parts


def listed(answer) -> dict[int, tuple[int, int, bool]]:
    """partition -> (error, high watermark, has records)."""
    return {p.partition_index: (p.error_code, p.high_watermark, bool(p.records))
            for t in answer.responses for p in t.partitions}


def test_incremental_answers_list_only_partitions_with_news(leader) -> None:
    app, parts = leader
    full = fetch.answer(app, request(0, 0, {0: 0, 1: 0, 2: 0}), 12)
    sid = full.session_id
    assert sid != 0 and listed(full) == {0: (0, 3, True), 1: (0, 0, False), 2: (0, 0, False)}
    quiet = fetch.answer(app, request(sid, 1, {0: 3}), 12)  # read 0..2; nothing new anywhere
    assert quiet.session_id == sid and listed(quiet) == {}
    produce(parts[2], 2)
    news = fetch.answer(app, request(sid, 2), 12)  # partition 2 moved: listed, the rest not
    assert listed(news) == {2: (0, 2, True)}
    assert fetch.answer(app, request(sid, 3, {2: 2}), 12).responses == []
    bad = fetch.answer(app, request(sid, 4, {1: 99}), 12)  # an error is always listed
    assert listed(bad) == {1: (E.OFFSET_OUT_OF_RANGE, 0, False)}
    healed = fetch.answer(app, request(sid, 5, {1: 0}), 12)  # and listed again once it clears
    assert listed(healed) == {1: (0, 0, False)}
    assert fetch.answer(app, request(sid, 6), 12).responses == []
    wrong = fetch.answer(app, request(sid, 6), 12)
    assert (wrong.error_code, wrong.session_id, wrong.responses) == \
        (E.INVALID_FETCH_SESSION_EPOCH, 0, [])


def test_a_sessionless_fetch_lists_every_partition(leader) -> None:
    app, _ = leader
    answer = fetch.answer(app, request(0, FINAL_EPOCH, {0: 3, 1: 0}), 12)
    assert answer.session_id == 0 and set(listed(answer)) == {0, 1}
    assert len(fetch.read_path(app).sessions) == 0


# ----------------------------------------------------------------------- real consumers
RECORDS = 10_000
PARTITIONS = 3


def _metric(port: int, name: str) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.split(" ")[0] in (name, name + "_total"):
            return float(line.split()[-1])
    raise AssertionError(f"no metric {name} in:\n{text}")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """One broker with metrics, a 3-partition topic holding RECORDS records."""
    metrics_port = free_port()
    with Cluster(tmp_path_factory.mktemp("sessions"), brokers=1,
                 broker_args=["--set", f"metrics_listen=127.0.0.1:{metrics_port}"]) as cluster:
        cluster.create_topic("sessions", partitions=PARTITIONS, replication_factor=1)
        from confluent_kafka import Producer
        # batches of at most 100 records, so that reading takes many fetches
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5,
                             "batch.num.messages": 100})
        for i in range(RECORDS):
            producer.produce("sessions", value=b"%d" % i, partition=i % PARTITIONS)
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(30) == 0
        yield cluster, metrics_port


def _opened(port: int) -> float:
    return _metric(port, "epochlog_broker_fetch_sessions_opened")


def _incremental(port: int) -> float:
    return _metric(port, "epochlog_broker_fetch_sessions_incremental")


def _check(values: list[bytes]) -> None:
    assert sorted(int(v) for v in values) == list(range(RECORDS))


def test_confluent_kafka_reads_everything(loaded) -> None:
    from confluent_kafka import Consumer, TopicPartition
    cluster, port = loaded
    before = _opened(port)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "g-ck",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition("sessions", i, 0) for i in range(PARTITIONS)])
    values: list[bytes] = []
    try:
        for _ in range(2000):
            if len(values) >= RECORDS:
                break
            for m in consumer.consume(1000, timeout=1.0):
                assert m.error() is None, m.error()
                values.append(m.value())
    finally:
        consumer.close()
    _check(values)
    # librdkafka (confluent-kafka 2.x) does not use fetch sessions: every fetch is a full one
    print(f"confluent-kafka opened {_opened(port) - before:.0f} fetch sessions")


def test_kafka_python_reads_everything_through_a_session(loaded) -> None:
    from kafka import KafkaConsumer, TopicPartition
    cluster, port = loaded
    before, incremental_before = _opened(port), _incremental(port)
    consumer = KafkaConsumer(bootstrap_servers=cluster.bootstrap, enable_auto_commit=False,
                             fetch_max_wait_ms=100, max_partition_fetch_bytes=1024)
    consumer.assign([TopicPartition("sessions", i) for i in range(PARTITIONS)])
    consumer.seek_to_beginning()
    values: list[bytes] = []
    try:
        for _ in range(2000):
            if len(values) >= RECORDS:
                break
            for records in consumer.poll(timeout_ms=1000).values():
                values.extend(r.value for r in records)
    finally:
        consumer.close()
    _check(values)
    # kafka-python 3 uses KIP-227 sessions: one opened, then (one batch per partition per
    # fetch) many incremental fetches through it
    assert _opened(port) > before
    assert _incremental(port) - incremental_before >= 20


def test_aiokafka_reads_everything(loaded) -> None:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    cluster, port = loaded
    before = _opened(port)

    async def go() -> list[bytes]:
        consumer = AIOKafkaConsumer(bootstrap_servers=cluster.bootstrap,
                                    enable_auto_commit=False, fetch_max_wait_ms=100)
        await consumer.start()
        out: list[bytes] = []
        try:
            consumer.assign([TopicPartition("sessions", i) for i in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            async with asyncio.timeout(60):
                while len(out) < RECORDS:
                    batches = await consumer.getmany(timeout_ms=1000, max_records=5000)
                    out.extend(r.value for records in batches.values() for r in records)
        finally:
            await consumer.stop()
        return out

    _check(asyncio.run(go()))
    # aiokafka sends session-less fetches (its FetchRequest carries no session fields)
    print(f"aiokafka opened {_opened(port) - before:.0f} fetch sessions")
