"""Two listeners, as Kafka's advertised listeners (docs/control-plane.md "Listeners").

A broker with `--internal-listen` serves clients on EXTERNAL and the cluster on INTERNAL. What must
hold, checked on real processes: Metadata and DescribeCluster answer with the addresses of the
listener the request came on (a broker without it is shown at its first listener), and the
controller sends its control requests to INTERNAL. The last is shown the way containers need it:
broker 1's EXTERNAL advertised address leads nowhere (as `localhost:19092` leads nowhere from the
controller's container), yet it receives its first LeaderAndIsr.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from epochlog.broker.config import BrokerConfig
from epochlog.broker.metadata_cache import BrokerInfo, Endpoint
from epochlog.controller.model import Broker as ControllerBroker
from epochlog.controller.records import Listener
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_topics import CreatableTopic, CreateTopicsRequest
from epochlog.protocol.apis.describe_cluster import DescribeClusterRequest
from epochlog.protocol.apis.metadata import MetadataRequest

from .cluster import Cluster, call, free_port

# ------------------------------------------------------------------------------------ units


def test_internal_listener_settings_are_checked() -> None:
    ok = BrokerConfig(broker_id=1, data_dir="d", listen="0.0.0.0:9092",
                      advertised="localhost:19092", internal_listen="0.0.0.0:9091",
                      internal_advertised="broker1:9091")
    plan = ok.listener_plan
    # INTERNAL first: the registration order, and the controller dials the first.
    assert [lst.name for lst in plan.listeners] == ["INTERNAL", "EXTERNAL"]
    assert (plan.inter_broker, plan.control_plane, plan.client) == ("INTERNAL", "INTERNAL",
                                                                     "EXTERNAL")
    assert plan.named("EXTERNAL").advertised_address(9092) == ("localhost", 19092)
    assert plan.named("INTERNAL").advertised_address(9091) == ("broker1", 9091)
    assert [lst.name for lst in BrokerConfig(broker_id=1, data_dir="d")
            .listener_plan.listeners] == ["EXTERNAL"]
    with pytest.raises(ValueError, match="internal_advertised: needs internal_listen"):
        BrokerConfig(broker_id=1, data_dir="d", internal_advertised="b:1")
    with pytest.raises(ValueError, match="internal_listen: must differ from listen"):
        BrokerConfig(broker_id=1, data_dir="d", listen="127.0.0.1:9092",
                     internal_listen="127.0.0.1:9092")
    with pytest.raises(ValueError, match="internal_advertised: needs a real port"):
        BrokerConfig(broker_id=1, data_dir="d", internal_listen="127.0.0.1:0",
                     internal_advertised="b:0")


def test_endpoint_of_a_listener_falls_back_to_the_first() -> None:
    two = BrokerInfo(1, "a", (Endpoint("EXTERNAL", "localhost", 19092),
                              Endpoint("INTERNAL", "broker1", 9091)))
    one = BrokerInfo(2, "b", (Endpoint("EXTERNAL", "h2", 9092),))
    assert two.endpoint("INTERNAL") == ("broker1", 9091)
    assert two.endpoint("EXTERNAL") == ("localhost", 19092)
    assert one.endpoint("INTERNAL") == ("h2", 9092)


def test_controller_sends_to_the_listener_registered_first() -> None:
    """Brokers register their control-plane listener first (INTERNAL when they have it)."""
    def broker(*listeners: Listener) -> ControllerBroker:
        return ControllerBroker(1, 1, uuid.uuid4(), "a", listeners)
    external = Listener("EXTERNAL", "localhost", 19092)
    internal = Listener("INTERNAL", "broker1", 9091)
    assert broker(internal, external).endpoint == ("broker1", 9091)
    assert broker(external).endpoint == ("localhost", 19092)
    assert broker(Listener("PLAINTEXT", "h", 1)).endpoint == ("h", 1)  # older brokers' name


# ----------------------------------------------------------------------------- processes


def _brokers_seen(port: int) -> dict[int, tuple[str, int]]:
    answer = call("127.0.0.1", port, ApiKey.METADATA, MetadataRequest(topics=[]))
    return {b.node_id: (b.host, b.port) for b in answer.brokers}


def _brokers_described(port: int) -> dict[int, tuple[str, int]]:
    answer = call("127.0.0.1", port, ApiKey.DESCRIBE_CLUSTER, DescribeClusterRequest())
    assert answer.error_code == 0, answer
    return {b.broker_id: (b.host, b.port) for b in answer.brokers}


def test_each_listener_answers_with_its_own_addresses(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, brokers=2)
    nowhere = free_port()  # broker 1's EXTERNAL advertised port: nobody listens there
    internal = free_port()
    cluster.brokers[1].extra += ["--advertised", f"127.0.0.1:{nowhere}",
                                 "--internal-listen", f"127.0.0.1:{internal}"]
    with cluster:  # start() waits for broker 1's first LeaderAndIsr: it came on INTERNAL
        b1, b2 = cluster.brokers[1], cluster.brokers[2]
        assert cluster.controller.has_line(
            f"broker 1 registered: generation {b1.generation}, rack a, listeners INTERNAL "
            f"127.0.0.1:{internal}, EXTERNAL 127.0.0.1:{nowhere} (control requests to "
            f"127.0.0.1:{internal})")
        assert b1.has_line(f"internal listener on 127.0.0.1:{internal} (advertised "
                           f"127.0.0.1:{internal})")

        external_view = {1: ("127.0.0.1", nowhere), 2: ("127.0.0.1", b2.port)}
        internal_view = {1: ("127.0.0.1", internal), 2: ("127.0.0.1", b2.port)}  # 2: fallback
        assert _brokers_seen(b1.port) == external_view
        assert _brokers_seen(internal) == internal_view
        assert _brokers_seen(b2.port) == external_view  # broker 2 has EXTERNAL only
        assert _brokers_described(b1.port) == external_view
        assert _brokers_described(internal) == internal_view

        # Every API is served on both listeners: a topic made through INTERNAL is seen on both.
        made = call("127.0.0.1", internal, ApiKey.CREATE_TOPICS, CreateTopicsRequest(
            topics=[CreatableTopic(name="via-internal", num_partitions=1, replication_factor=1)]))
        assert made.topics[0].error_code == 0, made
        cluster.wait_leaders("via-internal", 1)
