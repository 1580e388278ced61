"""`compose down` keeps the named volumes and `up` finds the data again; `down -v` removes them
(issue 15). The records are written with acks=all to a topic replicated on all three brokers,
read back after the containers were removed and created again, at the same offsets."""

from __future__ import annotations

from epochlog.testing.traffic import read_back as read_all

from .compose import compose_cluster, wait_quiet
from .workload import Workload

TOPIC = "kept"
PARTITIONS = 3
VOLUMES = ("controller-data", "broker1-data", "broker2-data", "broker3-data")


def test_down_then_up_keeps_data_and_down_v_removes_it(images: dict[str, str]) -> None:
    with compose_cluster(images, "volumes") as cluster:
        cluster.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": 2})
        with Workload(cluster.bootstrap_servers, TOPIC, PARTITIONS) as work:
            work.wait_acked(500)
        before = read_all(cluster.bootstrap_servers, TOPIC, PARTITIONS)
        work.check(before)

        cluster.down()  # containers and the network go; the volumes stay
        left = cluster.project.leftovers()
        assert set(left) == {"volumes"}, left
        assert sorted(left["volumes"]) == sorted(f"{cluster.name}_{v}" for v in VOLUMES)

        cluster.up()  # new containers on the same volumes
        wait_quiet(cluster, TOPIC, PARTITIONS)
        assert read_all(cluster.bootstrap_servers, TOPIC, PARTITIONS) == before

        cluster.down(volumes=True)
        assert cluster.project.leftovers() == {}
