"""Topic settings reach the brokers' logs, checked on real processes and on disk.

A topic created through confluent-kafka's and kafka-python's admin clients with a small
segment.bytes gets many small segment files in its partition folder on the leader (the broker's
defaults would keep one 1 GiB segment), also after the leader restarts (its log is opened with the
broker's defaults at start and takes the topic's settings at the first LeaderAndIsr).
retention.bytes and retention.ms delete old segments at the broker's retention check, and
consumers see the log start move. DescribeConfigs answers the topic's settings; a bad value is
refused with INVALID_CONFIG naming the setting; a deleted topic's folders leave every broker.

Settings are pushed by the controller in its control requests (docs/control-plane.md, "Topic
settings"), and nothing else tells a broker: a topic's settings arrive with the LeaderAndIsr that
opens its partitions (no DescribeConfigs reaches the controller), an altered setting or cluster
default is in force on every broker holding the topic with no polling left to wait for, and a
broker that was down when it was committed has it once it is back. The last tests drive
`TopicConfigs` and the LeaderAndIsr and UpdateMetadata handlers without processes, for the paths
a healthy cluster never takes: a bad value, a fenced request.
"""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from epochlog.broker.config import BrokerConfig
from epochlog.broker.fencing import ControlEpochs
from epochlog.broker.handlers import leader_and_isr, update_metadata
from epochlog.broker.metadata_cache import MetadataCache
from epochlog.broker.replicas import ReplicaManager
from epochlog.broker.storage import LogConfig, LogManager
from epochlog.broker.topic_configs import TopicConfigs, settings_from
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis import leader_and_isr as lai
from epochlog.protocol.apis import update_metadata as um
from epochlog.protocol.apis.describe_configs import DescribeConfigsRequest, DescribeConfigsResource
from epochlog.protocol.error_codes import ErrorCode

from .cluster import POLL_S, WAIT_S, Cluster, free_port

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from epochlog import Admin
from epochlog.client import AlterConfigOp
from epochlog.client import ConfigResource as OurResource

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
    metrics_port = free_port()
    with Cluster(tmp_path_factory.mktemp("topic-settings"), brokers=3, broker_args=args,
                 controller_args=("--set", f"metrics_listen=127.0.0.1:{metrics_port}")) as c:
        c.controller_metrics_port = metrics_port  # type: ignore[attr-defined]
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


# -------------------------------------------------------- pushed by the controller, processes
def _alter(admin: AdminClient, topic: str, **settings: str) -> None:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
        for name, value in settings.items()])
    admin.incremental_alter_configs([resource])[resource].result(WAIT_S)


def _set_cluster_defaults(cluster: Cluster, **settings: str | None) -> None:
    """The default BROKER resource, by Kafka's broker names (None: back to no dynamic default);
    confluent-kafka refuses its empty name, our Admin does not."""
    async def alter() -> None:
        async with Admin(cluster.bootstrap) as ours:
            await ours.incremental_alter_configs({OurResource("broker", ""): [
                AlterConfigOp(name.replace("_", "."), "set" if value is not None else "delete",
                              value) for name, value in settings.items()]})
    asyncio.run(alter())


def _in_force(cluster: Cluster, topic: str, setting: str, value: str,
              marks: dict[int, int]) -> list[int]:
    """Wait (bounded) until every broker holding a partition of topic has logged the topic's
    settings with setting=value since its mark (TopicConfigs logs each change it takes, and the
    replica manager puts it into force on the open partitions at once); the brokers."""
    holders = sorted({r for p in cluster.partitions(topic).values() for r in p.replica_nodes})
    line = rf"topic {re.escape(topic)}: settings .*\b{re.escape(setting)}={re.escape(value)}\b"
    for broker in holders:
        cluster.broker(broker).wait_line(line, start=marks.get(broker, 0))
    return holders


def _described_by_controller(cluster: Cluster) -> float:
    """DescribeConfigs requests the controller has served so far (its /metrics)."""
    port = cluster.controller_metrics_port  # type: ignore[attr-defined]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as r:
        text = r.read().decode()
    found = re.search(r'^epochlog_controller_requests_total\{api="DescribeConfigs"\} (\S+)$',
                      text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def test_a_partition_opens_with_its_settings_and_no_describe_configs(
        admin: AdminClient, cluster: Cluster) -> None:
    """The LeaderAndIsr that opens a topic's partitions carries the topic's settings: no broker
    asks the controller for them (its count of DescribeConfigs served does not move)."""
    before = _described_by_controller(cluster)
    _create(admin, cluster, "pushed", partitions=3, replication_factor=3,
            **{"segment.bytes": "4096"})
    assert _in_force(cluster, "pushed", "segment.bytes", "4096", {}) == [1, 2, 3]
    assert _described_by_controller(cluster) == before
    resource = ConfigResource(ConfigResource.Type.TOPIC, "pushed")  # the count does count:
    admin.describe_configs([resource], request_timeout=WAIT_S)[resource].result(WAIT_S)
    assert _described_by_controller(cluster) == before + 1


def test_an_altered_setting_is_in_force_on_every_broker_holding_the_topic(
        admin: AdminClient, cluster: Cluster) -> None:
    """Pushed in UpdateMetadata at the commit: nothing polls any more, so without the push
    this would wait in vain."""
    _create(admin, cluster, "altered", partitions=2, replication_factor=3)
    marks = {i: b.mark() for i, b in cluster.brokers.items()}
    _alter(admin, "altered", **{"retention.bytes": "123456789"})
    assert _in_force(cluster, "altered", "retention.bytes", "123456789", marks) == [1, 2, 3]
    for broker in (1, 2, 3):
        cluster.broker(broker).wait_line(r"altered-\d: settings changed: .*"
                                         r"retention_bytes=123456789", start=marks[broker])


def test_a_cluster_default_reaches_the_topics_without_their_own_value(
        admin: AdminClient, cluster: Cluster) -> None:
    _create(admin, cluster, "defaulted", replication_factor=3)
    _create(admin, cluster, "own-value", replication_factor=3, **{"flush.ms": "5000"})
    marks = {i: b.mark() for i, b in cluster.brokers.items()}
    try:
        _set_cluster_defaults(cluster, log_flush_interval_ms="7000")
        assert _in_force(cluster, "defaulted", "flush.ms", "7000", marks) == [1, 2, 3]
    finally:
        marks = {i: b.mark() for i, b in cluster.brokers.items()}
        _set_cluster_defaults(cluster, log_flush_interval_ms=None)
    _in_force(cluster, "defaulted", "flush.ms", "1000", marks)  # the brokers' own again
    for broker in (1, 2, 3):  # the topic with its own value heard of nothing
        assert not any(re.search(r"topic own-value: settings .*flush\.ms=7000", line)
                       for line in cluster.broker(broker).lines)


def test_a_broker_down_when_a_setting_changed_has_it_when_it_returns(
        admin: AdminClient, cluster: Cluster) -> None:
    """The full state its new generation gets carries the topic's settings as decided now."""
    _create(admin, cluster, "missed", replication_factor=3)
    away = cluster.leaders("missed")[0][0]
    cluster.stop(away)
    try:
        _alter(admin, "missed", **{"segment.ms": "3600000"})
    finally:
        cluster.broker(away).start()
        cluster.broker(away).wait_started()
    _in_force(cluster, "missed", "segment.ms", "3600000", {})


# ------------------------------------------------------------- TopicConfigs, without processes
def test_settings_put_the_topics_values_over_the_broker_defaults() -> None:
    defaults = LogConfig(segment_bytes=1 << 20, flush_ms=50)
    settings, problems = settings_from(defaults, {"segment.bytes": "1024", "retention.ms": "-1",
                                                  "min.insync.replicas": "2",
                                                  "unclean.leader.election.enable": "true"})
    assert settings.log == LogConfig(segment_bytes=1024, retention_ms=-1, flush_ms=50)
    assert settings.min_insync_replicas == 2 and problems == []
    settings, problems = settings_from(defaults, {"segment.bytes": "3", "retention.ms": "-1"})
    assert settings.log == LogConfig(segment_bytes=1 << 20, retention_ms=-1, flush_ms=50)
    assert len(problems) == 1 and "segment_bytes must be at least 14" in problems[0], problems
    settings, problems = settings_from(defaults, {"retention.bytes": "lots",
                                                  "min.insync.replicas": "two"})
    assert settings.log == defaults and settings.min_insync_replicas == 1
    assert problems == ["retention.bytes='lots' is not an integer",
                        "min.insync.replicas='two' is not an integer"]


def test_topic_configs_take_what_is_pushed_once_and_forget_it() -> None:
    configs = TopicConfigs(LogConfig())
    assert not configs.knows("a") and configs.get("a") == configs.defaults
    assert configs.take("a", {"segment.bytes": "2048"})
    assert configs.get("a").log.segment_bytes == 2048
    assert configs.get("a").log.segment_ms == LogConfig().segment_ms  # not decided: ours
    assert not configs.take("a", {"segment.bytes": "2048"}), "the same settings again"
    assert configs.take("a", {}), "back to the broker's defaults"
    assert configs.get("a") == configs.defaults and configs.knows("a")
    assert not configs.take("b", {}), "a topic with no decided setting: nothing changes"
    configs.forget("a")
    assert not configs.knows("a") and configs.get("a") == configs.defaults


def test_a_value_that_cannot_be_used_is_left_out_with_one_warning(caplog) -> None:
    """Only the unusable setting keeps the broker's default: one bad value must not take
    min.insync.replicas (or any other setting) back to the broker's default with it."""
    configs = TopicConfigs(LogConfig(segment_bytes=4096))
    configs.take("t", {"segment.bytes": "2048"})
    bad = {"segment.bytes": "2048", "retention.bytes": "lots", "min.insync.replicas": "2"}
    with caplog.at_level("WARNING"):
        assert configs.take("t", bad)
        assert not configs.take("t", bad)
    assert configs.get("t").log == LogConfig(segment_bytes=2048)
    assert configs.get("t").min_insync_replicas == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "retention.bytes='lots'" in warnings[0], warnings


# --------------------------------------------------- control requests, at the handler level
class _App:
    """What the LeaderAndIsr and UpdateMetadata handlers use of a broker (broker_app.BrokerApp):
    a confirmed generation, the metadata cache and a real ReplicaManager on tmp_path."""

    def __init__(self, data_dir: Path, generation: int) -> None:
        self.broker_id = 1
        self.epochs = ControlEpochs(1)
        self.epochs.registration_answered(generation)
        self.metadata = MetadataCache()
        logs = LogManager.open(str(data_dir), LogConfig(), lambda: 0, broker_id=1,
                               cluster_id="epochlog")
        self.replicas = ReplicaManager(1, logs, lambda: 0, produce_waiters_max=10,
                                       fetch_waiters_max=10)

    async def control_request_ready(self, what: str) -> bool:
        return True


def _lai(broker_epoch: int, configs: dict[str, str] | None, controller_epoch: int = 1,
         leader_epoch: int = 0) -> lai.LeaderAndIsrRequest:
    return lai.LeaderAndIsrRequest(
        controller_id=3000, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        topic_states=[lai.LeaderAndIsrTopicState(
            topic_name="t", partition_states=[lai.LeaderAndIsrPartitionState(
                partition_index=0, controller_epoch=controller_epoch, leader=1,
                leader_epoch=leader_epoch, isr=[1], replicas=[1], is_new=True)],
            configs=None if configs is None else [
                lai.LeaderAndIsrTopicConfig(name=k, value=v) for k, v in configs.items()])])


def _um(broker_epoch: int, topic: str, configs: dict[str, str],
        controller_epoch: int = 1) -> um.UpdateMetadataRequest:
    return um.UpdateMetadataRequest(
        controller_id=3000, controller_epoch=controller_epoch, broker_epoch=broker_epoch,
        topic_states=[um.UpdateMetadataTopicState(topic_name=topic, configs=[
            um.UpdateMetadataTopicConfig(name=k, value=v) for k, v in configs.items()])])


def _handle(handler: Any, app: _App, request: Any) -> Any:
    return asyncio.run(handler.handle(SimpleNamespace(app=app), request))


def test_a_leader_and_isr_opens_the_log_with_the_settings_it_carries(tmp_path: Path) -> None:
    """No DescribeConfigs: the handler has no controller link to ask on, and needs none."""
    app = _App(tmp_path, generation=5)
    answer = _handle(leader_and_isr, app, _lai(5, {"segment.bytes": "2048",
                                                   "min.insync.replicas": "2"}))
    assert answer.error_code == 0 and [p.error_code for p in answer.partition_errors] == [0]
    partition = app.replicas.get("t", 0)
    assert partition is not None and partition.min_insync_replicas == 2
    assert app.replicas.logs.get("t", 0).config.segment_bytes == 2048


def test_update_metadata_puts_a_change_into_force_on_the_topics_held_here(
        tmp_path: Path) -> None:
    app = _App(tmp_path, generation=5)
    _handle(leader_and_isr, app, _lai(5, {"segment.bytes": "2048"}))
    assert _handle(update_metadata, app, _um(5, "t", {"segment.bytes": "4096",
                                                      "min.insync.replicas": "2"})).error_code == 0
    assert app.replicas.logs.get("t", 0).config.segment_bytes == 4096
    assert app.replicas.get("t", 0).min_insync_replicas == 2
    _handle(update_metadata, app, _um(5, "elsewhere", {"segment.bytes": "4096"}))
    assert not app.replicas.topic_configs.knows("elsewhere"), "not held here: not kept"


@pytest.mark.parametrize("broker_epoch, controller_epoch, error", [
    (4, 1, ErrorCode.STALE_BROKER_EPOCH), (5, 0, ErrorCode.STALE_CONTROLLER_EPOCH)])
def test_a_fenced_request_applies_no_setting(tmp_path: Path, broker_epoch: int,
                                             controller_epoch: int, error: int) -> None:
    app = _App(tmp_path, generation=5)
    _handle(leader_and_isr, app, _lai(5, {"segment.bytes": "2048"}))
    fenced = _lai(broker_epoch, {"segment.bytes": "4096"}, controller_epoch, leader_epoch=1)
    assert _handle(leader_and_isr, app, fenced).error_code == error
    assert _handle(update_metadata, app, _um(broker_epoch, "t", {"segment.bytes": "4096"},
                                             controller_epoch)).error_code == error
    assert app.replicas.logs.get("t", 0).config.segment_bytes == 2048
    assert app.replicas.topic_configs.get("t").log.segment_bytes == 2048


def test_a_closed_controller_link_ends_its_request_in_flight_and_connects_no_more(caplog) -> None:
    """The broker stops while a request relayed to the controller waits (auto-creation's
    CreateTopics, an admin request): closing the controller link fails the request in flight
    with ControllerLinkClosed at once (no warning, no retry: seen as a stray WARNING in
    `cluster up`'s clean stop), and a closed link never opens a new connection. Against a real
    socket that accepts and never answers."""
    from epochlog.broker.controller_link import ControllerLink, ControllerLinkClosed

    request = DescribeConfigsRequest(resources=[DescribeConfigsResource(
        resource_type=2, resource_name="t", configuration_keys=None)])

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
        waiting = asyncio.create_task(link.forward(ApiKey.DESCRIBE_CONFIGS, None, request))
        for _ in range(500):  # the request is on the wire, unanswered
            if accepted:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        await link.close()
        with pytest.raises(ControllerLinkClosed):
            await asyncio.wait_for(waiting, 10)
        with pytest.raises(ControllerLinkClosed):
            await link.forward(ApiKey.DESCRIBE_CONFIGS, None, request)
        await asyncio.wait_for(ended.wait(), 10)  # the half-open connection was closed
        server.close()
        await server.wait_closed()
        return accepted, len([r for r in caplog.records if r.levelname == "WARNING"])

    with caplog.at_level("INFO"):
        accepted, warnings = asyncio.run(scenario())
    assert accepted == 1, "the closed link opened a new connection"
    assert warnings == 0, [r.getMessage() for r in caplog.records]
