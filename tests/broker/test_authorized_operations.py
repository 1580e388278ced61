"""Authorized operations and Metadata v0, against clients nobody here wrote.

Without an authorizer Kafka reports every operation a resource type supports (KIP-430), and
confluent-kafka's AdminClient shows them; clients speaking the oldest Metadata (v0, as librdkafka
does with api.version.request=false and broker.version.fallback 0.9) must get the brokers and
topics too.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

import pytest

confluent = pytest.importorskip("confluent_kafka")
from confluent_kafka import TopicCollection  # noqa: E402
from confluent_kafka.admin import AclOperation, AdminClient  # noqa: E402

TOPIC_OPERATIONS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "DESCRIBE_CONFIGS",
                    "ALTER_CONFIGS"}
CLUSTER_OPERATIONS = {"CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
                      "ALTER_CONFIGS", "IDEMPOTENT_WRITE"}
GROUP_OPERATIONS = {"READ", "DELETE", "DESCRIBE"}


def names(operations: list[AclOperation] | None) -> set[str]:
    return {op.name for op in operations or ()}


def test_every_operation_is_authorized_without_an_authorizer(epochlog_cluster: Any) -> None:
    c = epochlog_cluster(brokers=1)
    c.create_topic("ops", partitions=1, replication_factor=1)
    admin = AdminClient({"bootstrap.servers": c.bootstrap_servers})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert names(cluster.authorized_operations) == CLUSTER_OPERATIONS
    topics = admin.describe_topics(TopicCollection(["ops"]), include_authorized_operations=True)
    assert names(topics["ops"].result(30).authorized_operations) == TOPIC_OPERATIONS

    consumer = confluent.Consumer({"bootstrap.servers": c.bootstrap_servers, "group.id": "ops-g",
                                   "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["ops"])
        for _ in range(100):
            consumer.poll(0.2)
            if consumer.assignment():
                break
        groups = admin.describe_consumer_groups(["ops-g"], include_authorized_operations=True)
        assert names(groups["ops-g"].result(30).authorized_operations) == GROUP_OPERATIONS
    finally:
        consumer.close()
    # Not asked for, not answered (librdkafka shows None).
    assert admin.describe_cluster().result(30).authorized_operations is None


def test_metadata_v0_lists_brokers_and_every_topic(epochlog_cluster: Any) -> None:
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    assert kcat, "kcat is an interop peer of the tests: install Debian's kcat"
    c = epochlog_cluster(brokers=2)
    c.create_topic("old-a", partitions=2, replication_factor=2)
    c.create_topic("old-b", partitions=1, replication_factor=2)
    listing = subprocess.run(
        [kcat, "-L", "-b", c.bootstrap_servers.split(",")[0], "-X", "api.version.request=false",
         "-X", "broker.version.fallback=0.9.0.1"], capture_output=True, text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    assert " 2 brokers:" in listing.stdout, listing.stdout
    assert 'topic "old-a" with 2 partitions' in listing.stdout, listing.stdout
    assert 'topic "old-b" with 1 partitions' in listing.stdout, listing.stdout
