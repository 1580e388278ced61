"""Topic and broker settings as Kafka users expect them, on a real 3-broker cluster, through
confluent-kafka's AdminClient, kafka-python's KafkaAdminClient, kcat and `epochlog configs`:

- every topic-level setting Kafka documents is accepted at creation and described back with its
  source; defaults are described with their values (not null) and synonyms; kcat reads and writes
  a topic created with all of them;
- bad values, unknown names and min.insync.replicas above the replication factor are refused
  with INVALID_CONFIG naming the setting, at creation and when altered;
- settings act: LogAppendTime stamps batches with the broker's clock, message.timestamp.before
  .max.ms refuses old batches (INVALID_TIMESTAMP), max.message.bytes is per topic, and an altered
  setting reaches the brokers (a lowered max.message.bytes starts refusing large batches);
- IncrementalAlterConfigs SET/DELETE/APPEND, AlterConfigs, validate_only;
- a BROKER resource describes that broker's own settings (broker.rack, read-only).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import confluent_kafka as confluent
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka.admin import ConfigResource as KafkaPythonResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from epochlog import Admin
from epochlog.client import AlterConfigOp
from epochlog.client import ConfigResource as OurResource
from epochlog.client.errors import InvalidConfigError

WAIT_S = 60.0
EVERY_SETTING = {  # a valid value for each, not the default where that makes a difference
    "cleanup.policy": "compact,delete", "compression.type": "producer",
    "compression.gzip.level": "5", "compression.lz4.level": "10", "compression.zstd.level": "4",
    "delete.retention.ms": "3600000", "file.delete.delay.ms": "1000",
    "flush.messages": "100000", "flush.ms": "5000",
    "follower.replication.throttled.replicas": "*", "index.interval.bytes": "8192",
    "leader.replication.throttled.replicas": "0:1,0:2", "local.retention.bytes": "-2",
    "local.retention.ms": "-2", "max.compaction.lag.ms": "86400000",
    "max.message.bytes": "2000000", "message.downconversion.enable": "false",
    "message.format.version": "3.0-IV1", "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.difference.max.ms": "86400000", "message.timestamp.type": "CreateTime",
    "min.cleanable.dirty.ratio": "0.25", "min.compaction.lag.ms": "1000",
    "min.insync.replicas": "2", "preallocate": "true", "remote.storage.enable": "false",
    "retention.bytes": "104857600", "retention.ms": "86400000", "segment.bytes": "10485760",
    "segment.index.bytes": "1048576", "segment.jitter.ms": "100", "segment.ms": "3600000",
    "unclean.leader.election.enable": "false",
}


def until(what: str, done: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := done()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)
    return value


def create(admin: AdminClient, name: str, configs: dict[str, str], rf: int = 3) -> None:
    admin.create_topics([NewTopic(name, 1, rf, config=configs)])[name].result(WAIT_S)


def refused(future: Any) -> Any:
    with pytest.raises(confluent.KafkaException) as raised:
        future.result(WAIT_S)
    return raised.value.args[0]


def described(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return dict(admin.describe_configs([resource])[resource]
                .result(WAIT_S))


def produce(bootstrap: str, topic: str, value: bytes, timestamp: int = 0) -> Any:
    """One record; the delivery error (a KafkaError) or the delivered message."""
    producer = confluent.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                   "message.max.bytes": 10_000_000, "retries": 0})
    outcome: list[Any] = []
    producer.produce(topic, value=value, timestamp=timestamp,
                     on_delivery=lambda err, msg: outcome.append(err or msg))
    producer.flush(30)
    assert outcome, "no delivery report"
    return outcome[0]


@pytest.fixture
def cluster(epochlog_cluster: Any) -> Any:
    return epochlog_cluster(brokers=3, racks="abc")


def test_every_kafka_topic_setting_is_accepted_described_and_readable(cluster: Any) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    create(admin, "everything", EVERY_SETTING)
    entries = described(admin, "everything")
    assert {n: entries[n].value for n in EVERY_SETTING} == EVERY_SETTING
    assert all(entries[n].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
               for n in EVERY_SETTING)

    create(admin, "plain", {})
    plain = described(admin, "plain")
    assert plain["retention.ms"].value == "604800000"
    assert plain["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert plain["compression.type"].value == "producer"
    assert "log.retention.ms" in plain["retention.ms"].synonyms
    assert all(e.value is not None for e in plain.values()), "a default described as null"

    kcat = shutil.which("kcat")
    assert kcat, "kcat is an interop peer of the tests: install Debian's kcat"
    broker = cluster.bootstrap_servers.split(",")[0]
    subprocess.run([kcat, "-P", "-b", broker, "-t", "everything", "-K:"], check=True,
                   input=b"k1:one\nk2:two\n", timeout=60)
    read = subprocess.run([kcat, "-C", "-b", broker, "-t", "everything", "-e", "-f", "%k=%s\n"],
                          capture_output=True, timeout=60, check=True)
    assert read.stdout == b"k1=one\nk2=two\n"


def test_bad_settings_are_refused_naming_them(cluster: Any) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for name, value in (("compression.type", "brotli"), ("message.timestamp.type", "Now"),
                        ("leader.replication.throttled.replicas", "all"),
                        ("min.insync.replicas", "4"), ("no.such.setting", "1")):
        error = refused(admin.create_topics([NewTopic("bad", 1, 3, config={name: value})])["bad"])
        assert error.code() == confluent.KafkaError.INVALID_CONFIG and name in error.str(), error
    create(admin, "rf3", {})
    resource = ConfigResource(ConfigResource.Type.TOPIC, "rf3", incremental_configs=[
        ConfigEntry("min.insync.replicas", "4", incremental_operation=AlterConfigOpType.SET)])
    error = refused(admin.incremental_alter_configs([resource])[resource])
    assert "replication factor 3" in error.str(), error


def test_settings_act_and_alterations_reach_the_brokers(cluster: Any) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    bootstrap = cluster.bootstrap_servers
    create(admin, "stamped", {"message.timestamp.type": "LogAppendTime"})
    before = int(time.time() * 1000)
    msg = produce(bootstrap, "stamped", b"x", timestamp=1000)
    assert msg.timestamp()[0] == confluent.TIMESTAMP_LOG_APPEND_TIME
    assert msg.timestamp()[1] >= before - 60_000  # the broker's clock, not the producer's 1000
    consumer = confluent.Consumer({"bootstrap.servers": bootstrap, "group.id": "stamp",
                                   "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["stamped"])
        got = until("the stamped record", lambda: _value(consumer.poll(0.5)))
        assert got.timestamp() == msg.timestamp()
    finally:
        consumer.close()

    create(admin, "recent", {"message.timestamp.before.max.ms": "3600000"})
    assert produce(bootstrap, "recent", b"old", timestamp=1000).code() == \
        confluent.KafkaError.INVALID_TIMESTAMP
    assert _error(produce(bootstrap, "recent", b"new")) is None

    create(admin, "small", {"max.message.bytes": "2000"})
    assert produce(bootstrap, "small", b"x" * 5000).code() == \
        confluent.KafkaError.MSG_SIZE_TOO_LARGE
    create(admin, "large", {})
    assert _error(produce(bootstrap, "large", b"x" * 5000)) is None

    # Altered at the controller, in force on the leader once its UpdateMetadata is applied.
    resource = ConfigResource(ConfigResource.Type.TOPIC, "large", incremental_configs=[
        ConfigEntry("max.message.bytes", "2000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin.incremental_alter_configs([resource])[resource].result(WAIT_S)
    entries = described(admin, "large")
    assert entries["max.message.bytes"].value == "2000"
    assert entries["cleanup.policy"].value == "delete,compact"
    until("the lowered max.message.bytes to act", lambda: _error(produce(
        bootstrap, "large", b"x" * 5000)) == confluent.KafkaError.MSG_SIZE_TOO_LARGE)

    # validate_only changes nothing; DELETE goes back to the default.
    check = ConfigResource(ConfigResource.Type.TOPIC, "large", incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([check], validate_only=True)[check].result(WAIT_S)
    assert described(admin, "large")["retention.ms"].value == "604800000"
    back = ConfigResource(ConfigResource.Type.TOPIC, "large", incremental_configs=[
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([back])[back].result(WAIT_S)
    assert described(admin, "large")["max.message.bytes"].source == \
        ConfigSource.DEFAULT_CONFIG.value

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        kp.alter_configs([KafkaPythonResource(ConfigResourceType.TOPIC, "large",
                                              configs={"retention.ms": "3600000"})])
    finally:
        kp.close()
    assert described(admin, "large")["retention.ms"].value == "3600000"

    # AlterConfigs (33) replaces the topic's own settings with those given.
    async def replace() -> None:
        async with Admin(bootstrap) as ours:
            await ours.alter_configs({OurResource("topic", "large"): {"segment.ms": "60000"}})
    asyncio.run(replace())
    entries = described(admin, "large")
    assert entries["segment.ms"].value == "60000"
    assert entries["cleanup.policy"].source == ConfigSource.DEFAULT_CONFIG.value
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG.value


def test_compression_type_makes_the_leader_recompress(cluster: Any) -> None:
    """compression.type=gzip: batches a producer sent uncompressed are stored (and replicated)
    gzip; "producer" keeps what the producer chose. dump-log shows each batch's codec."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    create(admin, "gzipped", {"compression.type": "gzip"})
    create(admin, "as-sent", {})
    for topic in ("gzipped", "as-sent"):
        producer = confluent.Producer({"bootstrap.servers": cluster.bootstrap_servers,
                                       "acks": "all", "compression.type": "none"})
        for i in range(50):
            producer.produce(topic, key=b"k%d" % i, value=b"value %d " % i * 20)
        assert producer.flush(30) == 0
    cluster.wait_fully_replicated("gzipped")
    cluster.wait_fully_replicated("as-sent")
    for broker in (1, 2, 3):
        for topic, codec in (("gzipped", "gzip"), ("as-sent", "none")):
            folder = cluster.node(broker).data_dir / f"{topic}-0"
            dump = subprocess.run([sys.executable, "-m", "epochlog", "dump-log", str(folder)],
                                  capture_output=True, text=True, timeout=60, check=True)
            codecs = {json.loads(line)["compression"] for line in dump.stdout.splitlines()}
            assert codecs == {codec}, (broker, topic, dump.stdout)
    consumer = confluent.Consumer({"bootstrap.servers": cluster.bootstrap_servers,
                                   "group.id": "gz", "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["gzipped"])
        seen: list[bytes] = []
        until("every gzipped record read back", lambda: _collect(consumer, seen) >= 50)
        assert seen == [b"value %d " % i * 20 for i in range(50)]
    finally:
        consumer.close()


def _collect(consumer: Any, into: list[bytes]) -> int:
    msg = consumer.poll(0.5)
    if msg is not None and not msg.error():
        into.append(msg.value())
    return len(into)


def test_a_broker_describes_its_own_settings(cluster: Any) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    for broker, rack in ((1, "a"), (2, "b")):
        resource = ConfigResource(ConfigResource.Type.BROKER, str(broker))
        entries = admin.describe_configs([resource])[resource].result(WAIT_S)
        assert entries["broker.rack"].value == rack and entries["broker.rack"].is_read_only
        assert entries["broker.id"].value == str(broker)


def test_dynamic_cluster_defaults_reach_every_topic_and_survive_the_controller(
        cluster: Any) -> None:
    """Kafka's dynamic default broker configs (kafka-configs --entity-type brokers
    --entity-default): set through the controller's log, followed by every topic without its
    own value, in force on the brokers, kept across a controller restart."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    create(admin, "follows", {})
    create(admin, "own", {"max.message.bytes": "1000000"})
    # confluent-kafka refuses an empty resource name: our Admin sets the default resource
    async def set_defaults(*ops: AlterConfigOp) -> None:
        async with Admin(cluster.bootstrap_servers) as ours:
            await ours.incremental_alter_configs({OurResource("broker", ""): list(ops)})
    asyncio.run(set_defaults(AlterConfigOp("message.max.bytes", "set", "2000"),
                             AlterConfigOp("log.retention.ms", "set", "3600000")))
    entries = described(admin, "follows")
    assert entries["retention.ms"].value == "3600000"
    assert entries["retention.ms"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert described(admin, "own")["max.message.bytes"].value == "1000000"
    until("the dynamic default max.message.bytes to act", lambda: _error(produce(
        cluster.bootstrap_servers, "follows", b"x" * 5000)) ==
        confluent.KafkaError.MSG_SIZE_TOO_LARGE)
    assert _error(produce(cluster.bootstrap_servers, "own", b"x" * 5000)) is None

    broker1 = ConfigResource(ConfigResource.Type.BROKER, "1")
    entries = admin.describe_configs([broker1])[broker1].result(WAIT_S)
    assert entries["message.max.bytes"].value == "2000"
    assert entries["message.max.bytes"].source == \
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert not entries["message.max.bytes"].is_read_only

    with pytest.raises(InvalidConfigError, match="broker.rack is not a dynamic broker setting"):
        asyncio.run(set_defaults(AlterConfigOp("broker.rack", "set", "z")))
    one = ConfigResource(ConfigResource.Type.BROKER, "1", incremental_configs=[ConfigEntry(
        "log.retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    assert refused(admin.incremental_alter_configs([one])[one]).code() == \
        confluent.KafkaError.INVALID_REQUEST

    cluster.restart("controller")
    until("the default kept by the restarted controller", lambda: _retention(admin))


def _retention(admin: AdminClient) -> bool:
    try:
        return described(admin, "follows")["retention.ms"].value == "3600000"
    except confluent.KafkaException:
        return False  # the controller is on its way back


def test_configs_command_line(cluster: Any) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    create(admin, "cli", {})
    cli = [sys.executable, "-m", "epochlog", "configs"]
    tail = ["--bootstrap-server", cluster.bootstrap_servers]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*cli, *args, *tail], capture_output=True, text=True, timeout=60)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    assert run("alter", "--topic", "cli", "--set", "retention.ms=60000").returncode == 0
    out = run("describe", "--topic", "cli", "--overrides-only").stdout
    assert out == "retention.ms=60000\tDYNAMIC_TOPIC_CONFIG\n", out
    assert "broker.rack=b\tSTATIC_BROKER_CONFIG\tread-only" in run(
        "describe", "--broker", "2").stdout
    bad = run("alter", "--topic", "cli", "--set", "retention.ms=soon")
    assert bad.returncode == 1 and "retention.ms" in bad.stderr
    assert run("alter", "--topic", "cli", "--set", "oops").returncode == 1
    assert run("alter", "--topic", "nope", "--set", "retention.ms=1").returncode == 1
    assert run("alter", "--broker-defaults", "--set", "log.roll.ms=600000").returncode == 0
    assert run("describe", "--broker-defaults").stdout == \
        "log.roll.ms=600000\tDYNAMIC_DEFAULT_BROKER_CONFIG\n"
    assert "segment.ms=600000\tDYNAMIC_DEFAULT_BROKER_CONFIG" in run(
        "describe", "--topic", "cli").stdout


def _error(outcome: Any) -> int | None:
    """The error code of a delivery outcome (a KafkaError or a delivered Message)."""
    return outcome.code() if isinstance(outcome, confluent.KafkaError) else None


def _value(msg: Any) -> Any:
    return msg if msg is not None and not msg.error() else None
