"""Topic settings reach the brokers' logs, checked on real processes and on disk.

A topic created through confluent-kafka's and kafka-python's admin clients with a small
segment.bytes gets many small segment files in its partition folder on the leader (the broker's
defaults would keep one 1 GiB segment), also after the leader restarts (its log is opened with the
broker's defaults at start and takes the topic's settings at the first LeaderAndIsr).
retention.bytes and retention.ms delete old segments at the broker's retention check, and
consumers see the log start move. DescribeConfigs answers the topic's settings; a bad value is
refused with INVALID_CONFIG naming the setting; a deleted topic's folders leave every broker.
The last tests drive `TopicConfigs` (how a broker learns settings) with a scripted controller, for
the paths a healthy cluster never takes: no answer, an error, a bad value.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from epochlog.broker.config import BrokerConfig
from epochlog.broker.controller_link import ControllerUnavailable
from epochlog.broker.storage import LogConfig
from epochlog.broker.topic_configs import DESCRIBE_TRIES_MAX, TopicConfigs, settings_from
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_configs import (
    DescribeConfigsResourceResult,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)

from .cluster import POLL_S, WAIT_S, Cluster

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

SEGMENT_BYTES = 1024
VALUE = b"x" * 200  # one record per batch: about 270 bytes, so about 3 batches per segment
RECORDS = 40
RETENTION_CHECK_MS = 200
# The retention check interval is a broker setting (log_retention_check_interval_ms); until the
# broker knows it, the tests that wait for retention are skipped rather than waiting 5 minutes.
HAS_RETENTION_SETTING = "log_retention_check_interval_ms" in BrokerConfig.__struct_fields__
needs_retention_setting = pytest.mark.skipif(
    not HAS_RETENTION_SETTING, reason="broker setting log_retention_check_interval_ms missing")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    args = ("--set", f"log_retention_check_interval_ms={RETENTION_CHECK_MS}") \
        if HAS_RETENTION_SETTING else ()
    with Cluster(tmp_path_factory.mktemp("topic-settings"), brokers=3, broker_args=args) as c:
        yield c


@pytest.fixture(scope="module")
def admin(cluster: Cluster) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.bootstrap})


# --------------------------------------------------------------------------------- helpers
def _create(admin: AdminClient, cluster: Cluster, name: str, partitions: int = 1,
            replication_factor: int = 1, **settings: str) -> None:
    futures = admin.create_topics([NewTopic(name, partitions, replication_factor,
                                            config=settings)], request_timeout=WAIT_S)
    futures[name].result(WAIT_S)
    cluster.wait_leaders(name, partitions)


def _folder(cluster: Cluster, topic: str, index: int = 0) -> Path:
    leader, _ = cluster.leaders(topic)[index]
    return cluster.broker(leader).data_dir / f"{topic}-{index}"


def _segments(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.log"))


def _produce_confluent(cluster: Cluster, topic: str, count: int) -> None:
    producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all",
                                   "linger.ms": 0})
    for _ in range(count):
        producer.produce(topic, value=VALUE)
        assert producer.flush(WAIT_S) == 0  # one batch per record: batches stay below a segment


def _produce_kafka_python(cluster: Cluster, topic: str, count: int) -> None:
    from kafka import KafkaProducer
    producer = KafkaProducer(bootstrap_servers=cluster.bootstrap, acks="all", linger_ms=0)
    for _ in range(count):
        producer.send(topic, value=VALUE).get(timeout=WAIT_S)
    producer.close()


def _assert_small_segments(folder: Path, at_least: int) -> None:
    segments = _segments(folder)
    sizes = {p.name: p.stat().st_size for p in segments}
    assert len(segments) >= at_least, sizes
    assert all(size <= SEGMENT_BYTES for size in sizes.values()), sizes


def _wait_for(check, what: str) -> None:
    """Bounded poll of a folder another process changes on its own timer."""
    deadline = time.monotonic() + WAIT_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(POLL_S)


def _topic_names(cluster: Cluster) -> set[str]:
    """Every topic, by our own Metadata request: it never auto-creates. (librdkafka's
    all-topics Metadata v12 carries trailing bytes the broker refuses today.)"""
    return {t.name for t in cluster.metadata().topics}


def _low_watermark(cluster: Cluster, topic: str) -> int:
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unused"})
    try:
        low, _ = consumer.get_watermark_offsets(confluent.TopicPartition(topic, 0),
                                                timeout=WAIT_S)
    finally:
        consumer.close()
    return low


# ----------------------------------------------------------------------------------- tests
def test_segment_bytes_from_confluent_admin_rolls_segments(admin: AdminClient,
                                                           cluster: Cluster) -> None:
    _create(admin, cluster, "rolled-ck", **{"segment.bytes": str(SEGMENT_BYTES),
                                           "min.insync.replicas": "1"})
    _produce_confluent(cluster, "rolled-ck", RECORDS)
    _assert_small_segments(_folder(cluster, "rolled-ck"), at_least=RECORDS // 4)


def test_segment_bytes_from_kafka_python_admin_survives_a_restart(cluster: Cluster) -> None:
    """The restarted leader opens the log with the broker's defaults, then takes the topic's
    settings from the controller at its first LeaderAndIsr: segments stay small."""
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic as KafkaNewTopic
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    client.create_topics([KafkaNewTopic("rolled-kp", num_partitions=1, replication_factor=1,
                                        topic_configs={"segment.bytes": str(SEGMENT_BYTES)})])
    client.close()
    cluster.wait_leaders("rolled-kp", 1)
    _produce_kafka_python(cluster, "rolled-kp", RECORDS // 2)
    folder = _folder(cluster, "rolled-kp")
    _assert_small_segments(folder, at_least=RECORDS // 8)
    leader, _ = cluster.leaders("rolled-kp")[0]
    cluster.restart_broker(leader)
    cluster.wait_leaders("rolled-kp", 1)
    cluster.broker(leader).wait_line(rf"rolled-kp-0: settings changed: "
                                     rf"segment_bytes={SEGMENT_BYTES}\b")
    before = len(_segments(folder))
    _produce_kafka_python(cluster, "rolled-kp", RECORDS // 2)
    _assert_small_segments(folder, at_least=before + RECORDS // 8)


def test_min_insync_replicas_reaches_the_leader(admin: AdminClient, cluster: Cluster) -> None:
    _create(admin, cluster, "guarded", replication_factor=3, **{"min.insync.replicas": "2"})
    leader, _ = cluster.leaders("guarded")[0]
    line = cluster.broker(leader).wait_line(r"topic guarded: settings .*min\.insync\.replicas=2")
    assert "segment.bytes=1073741824" in line.string  # the broker's default where none given


@needs_retention_setting
def test_retention_bytes_deletes_old_segments(admin: AdminClient, cluster: Cluster) -> None:
    retention_bytes = 3 * SEGMENT_BYTES
    _create(admin, cluster, "kept-small", **{"segment.bytes": str(SEGMENT_BYTES),
                                            "retention.bytes": str(retention_bytes)})
    _produce_confluent(cluster, "kept-small", RECORDS)
    folder = _folder(cluster, "kept-small")

    def trimmed() -> bool:
        segments = _segments(folder)
        try:
            sizes = [p.stat().st_size for p in segments]
        except FileNotFoundError:  # retention deleted one since the listing: look again
            return False
        return int(segments[0].stem) > 0 and sum(sizes) - sizes[0] < retention_bytes

    _wait_for(trimmed, "retention.bytes to delete the oldest segments")
    assert _low_watermark(cluster, "kept-small") == int(_segments(folder)[0].stem)


@needs_retention_setting
def test_retention_ms_deletes_old_segments(admin: AdminClient, cluster: Cluster) -> None:
    _create(admin, cluster, "kept-briefly", **{"segment.bytes": str(SEGMENT_BYTES),
                                              "retention.ms": "1000"})
    _produce_confluent(cluster, "kept-briefly", RECORDS // 2)
    folder = _folder(cluster, "kept-briefly")
    assert len(_segments(folder)) > 1
    # Every segment but the active one holds only records older than retention.ms soon.
    _wait_for(lambda: len(_segments(folder)) == 1, "retention.ms to delete all but the active "
              "segment")
    assert _low_watermark(cluster, "kept-briefly") == int(_segments(folder)[0].stem) > 0


def test_describe_configs_answers_the_topics_settings(admin: AdminClient,
                                                      cluster: Cluster) -> None:
    own = {"segment.bytes": "2048", "retention.ms": "60000", "retention.bytes": "100000",
           "segment.ms": "120000", "min.insync.replicas": "1",
           "unclean.leader.election.enable": "true"}
    _create(admin, cluster, "described", **own)
    resource = ConfigResource(ConfigResource.Type.TOPIC, "described")
    entries = admin.describe_configs([resource], request_timeout=WAIT_S)[resource].result(WAIT_S)
    assert {name: entries[name].value for name in own} == own
    topic_source = confluent.admin.ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert all(entries[name].source == topic_source for name in own)


def test_defaults_described_for_a_topic_without_settings(admin: AdminClient,
                                                         cluster: Cluster) -> None:
    _create(admin, cluster, "plain-settings")
    resource = ConfigResource(ConfigResource.Type.TOPIC, "plain-settings")
    entries = admin.describe_configs([resource], request_timeout=WAIT_S)[resource].result(WAIT_S)
    assert entries["segment.bytes"].value == str(1 << 30)
    assert entries["segment.bytes"].source == confluent.admin.ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.parametrize("name, value", [("segment.bytes", "10"), ("retention.ms", "soon"),
                                         ("min.insync.replicas", "0"),
                                         ("unclean.leader.election.enable", "maybe"),
                                         ("cleanup.policy", "shred")])
def test_a_bad_setting_is_refused_naming_it(admin: AdminClient, cluster: Cluster, name: str,
                                            value: str) -> None:
    topic = f"bad-{name.replace('.', '-')}"
    futures = admin.create_topics([NewTopic(topic, 1, 1, config={name: value})],
                                  request_timeout=WAIT_S)
    with pytest.raises(confluent.KafkaException) as raised:
        futures[topic].result(WAIT_S)
    error = raised.value.args[0]
    assert error.code() == confluent.KafkaError.INVALID_CONFIG
    assert name in error.str()
    assert topic not in _topic_names(cluster)


def test_admin_creates_describes_and_deletes_a_topic(admin: AdminClient,
                                                     cluster: Cluster) -> None:
    _create(admin, cluster, "short-lived", partitions=3, replication_factor=3,
            **{"segment.bytes": str(SEGMENT_BYTES)})
    described = admin.describe_topics(confluent.TopicCollection(["short-lived"]),
                                      request_timeout=WAIT_S)["short-lived"].result(WAIT_S)
    assert len(described.partitions) == 3
    assert all(len(p.replicas) == 3 for p in described.partitions)
    listed = admin.list_topics("short-lived", timeout=WAIT_S).topics["short-lived"]
    assert sorted(listed.partitions) == [0, 1, 2] and listed.error is None
    folders = [b.data_dir / f"short-lived-{i}" for b in cluster.brokers.values() for i in range(3)]
    _wait_for(lambda: all(f.is_dir() for f in folders), "every replica's folder")

    admin.delete_topics(["short-lived"], request_timeout=WAIT_S)["short-lived"].result(WAIT_S)
    # a log is renamed aside (NAME.<id>-delete) and then removed: wait for both to be gone
    _wait_for(lambda: not any(p.name.startswith("short-lived") for b in cluster.brokers.values()
                              for p in b.data_dir.iterdir()),
              "the folders (and their renamed-aside copies) to leave every broker")
    assert "short-lived" not in _topic_names(cluster)


# ------------------------------------------------------------- TopicConfigs, without processes
def _answer(**by_topic: dict[str, str] | int) -> DescribeConfigsResponse:
    """A controller's DescribeConfigs answer: settings per topic (its own, source 1, and Kafka's
    default segment.ms, source 5, which a broker must leave to its own settings), or an error
    code."""
    return DescribeConfigsResponse(results=[
        DescribeConfigsResult(resource_type=2, resource_name=topic, error_code=value)
        if isinstance(value, int) else
        DescribeConfigsResult(resource_type=2, resource_name=topic, configs=[
            DescribeConfigsResourceResult(name=k, value=v, config_source=1)
            for k, v in value.items()] + [DescribeConfigsResourceResult(
                name="segment.ms", value="1", config_source=5)])
        for topic, value in by_topic.items()])


def _fetcher(*answers: DescribeConfigsResponse | Exception):
    """A controller link that answers (or fails) in turn; records the topics asked for."""
    asked: list[list[str]] = []
    queue = list(answers)

    async def fetch(key: int, version: int | None, request: object) -> DescribeConfigsResponse:
        assert key == ApiKey.DESCRIBE_CONFIGS
        asked.append([r.resource_name for r in request.resources])
        answer = queue.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer
    return fetch, asked


def test_settings_put_the_topics_values_over_the_broker_defaults() -> None:
    defaults = LogConfig(segment_bytes=1 << 20, flush_ms=50)
    settings = settings_from(defaults, {"segment.bytes": "1024", "retention.ms": "-1",
                                        "min.insync.replicas": "2",
                                        "unclean.leader.election.enable": "true"})
    assert settings.log == LogConfig(segment_bytes=1024, retention_ms=-1, flush_ms=50)
    assert settings.min_insync_replicas == 2
    with pytest.raises(ValueError, match="segment_bytes must be at least 14"):
        settings_from(defaults, {"segment.bytes": "3"})
    with pytest.raises(ValueError, match="retention.bytes='lots' is not an integer"):
        settings_from(defaults, {"retention.bytes": "lots"})


def test_topic_configs_ask_once_and_remember() -> None:
    configs = TopicConfigs(LogConfig())
    fetch, asked = _fetcher(_answer(a={"segment.bytes": "2048"}, b={}))
    asyncio.run(configs.ensure(["b", "a", "a"], fetch))
    assert asked == [["a", "b"]]
    assert configs.get("a").log.segment_bytes == 2048
    assert configs.get("a").log.segment_ms == LogConfig().segment_ms  # Kafka's default: ours
    assert configs.knows("b") and configs.get("b") == configs.defaults
    configs.forget("a")
    assert not configs.knows("a") and configs.get("a") == configs.defaults


def test_topic_configs_fall_back_to_defaults_without_remembering() -> None:
    """No answer after the bounded retries, or an error for the topic: defaults, asked again
    next time."""
    configs = TopicConfigs(LogConfig())
    failures = [ControllerUnavailable("down")] * DESCRIBE_TRIES_MAX
    fetch, asked = _fetcher(*failures, _answer(gone=3))
    asyncio.run(configs.ensure(["gone"], fetch))
    assert len(asked) == DESCRIBE_TRIES_MAX and not configs.knows("gone")
    asyncio.run(configs.ensure(["gone"], fetch))
    assert len(asked) == DESCRIBE_TRIES_MAX + 1 and not configs.knows("gone")
    assert configs.get("gone") == configs.defaults


def test_a_stopping_broker_neither_warns_nor_retries_nor_reconnects(caplog) -> None:
    """The broker stops while a LeaderAndIsr waits for settings: closing the controller link
    fails the request in flight with ControllerLinkClosed, which TopicConfigs passes up at once
    (no warning, no retry: seen as a stray WARNING in `cluster up`'s clean stop), and a closed
    link never opens a new connection. Against a real socket that accepts and never answers."""
    from epochlog.broker.controller_link import ControllerLink, ControllerLinkClosed
    from epochlog.broker.fencing import ControlEpochs

    async def scenario() -> tuple[int, int]:
        accepted = 0
        ended = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            await reader.read()  # until the link closes it
            writer.close()
            ended.set()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        config = BrokerConfig(broker_id=1, data_dir="unused", controller=f"127.0.0.1:{port}",
                              controller_request_timeout_ms=60_000)
        link = ControllerLink(config, ControlEpochs(1), {"EXTERNAL": ("127.0.0.1", 9092)},
                              on_generation_lost=lambda why: None)
        configs = TopicConfigs(LogConfig())
        waiting = asyncio.create_task(configs.ensure(["t"], link.forward))
        for _ in range(500):  # the DescribeConfigs is on the wire, unanswered
            if accepted:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        await link.close()
        with pytest.raises(ControllerLinkClosed):
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(ControllerLinkClosed):
            await configs.ensure(["t"], link.forward)
        await asyncio.wait_for(ended.wait(), 10)  # the half-open connection was closed
        server.close()
        await server.wait_closed()
        return accepted, len([r for r in caplog.records if r.levelname == "WARNING"])

    with caplog.at_level("INFO"):
        accepted, warnings = asyncio.run(scenario())
    assert accepted == 1, "the closed link opened a new connection"
    assert warnings == 0, [r.getMessage() for r in caplog.records]
