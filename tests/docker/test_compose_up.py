"""`compose up` from a clean state on the real engine, and clients reaching the cluster the two
ways the compose file advertises (issue 15).

- `up -d` of a new project (no container, network or volume of it exists): every service
  becomes healthy (each health check a real Kafka request, docker/healthcheck.py). Printed: the
  time from the command to the first produce that is acknowledged.
- From the host, through the published ports: kcat and confluent-kafka produce and consume, and
  Metadata names every broker at its EXTERNAL address, localhost:PORT.
- From a client container on the compose network, through the service names: the same kcat and
  confluent-kafka (the host's own, mounted into a container of the base image), and Metadata
  names every broker at its INTERNAL address, brokerN:9091.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import confluent_kafka
from confluent_kafka import Producer

from epochlog.testing.compose_project import leftovers

from .compose import BROKER_IDS, INTERNAL_PORT, client_container, compose_cluster, run

FIRST_PRODUCE_S_MAX = 60.0
COUNT = 30
# glibc's own libraries: the container's are the same release (Debian bookworm), so kcat uses
# those and brings only the rest of what it links.
GLIBC = ("libc.so", "libm.so", "libpthread.so", "libdl.so", "librt.so", "ld-linux")


def kcat_bundle(folder: Path) -> Path:
    """The host's kcat (Debian's package) and the libraries it links that are not glibc's, for
    a container of the Debian base image: run /opt/kcat/kcat with LD_LIBRARY_PATH=/opt/kcat/lib."""
    kcat = shutil.which("kcat")
    assert kcat, "kcat is missing (Debian's package; .ci/run installs it)"
    (folder / "lib").mkdir(parents=True)
    shutil.copy2(kcat, folder / "kcat")
    for line in run(["ldd", kcat]).stdout.splitlines():
        parts = line.split("=>")
        if len(parts) == 2 and parts[1].split() and not parts[0].strip().startswith(GLIBC):
            shutil.copy2(parts[1].split()[0], folder / "lib")
    return folder


def first_produce_s(bootstrap: str, started: float) -> float:
    """Seconds from `started` until a record is acknowledged (acks=all), trying again until
    FIRST_PRODUCE_S_MAX."""
    acked: list[float] = []
    errors: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is None:
            acked.append(time.monotonic())
        else:
            errors.append(str(err))

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "message.timeout.ms": 10_000})
    deadline = started + FIRST_PRODUCE_S_MAX
    while not acked:
        assert time.monotonic() < deadline, f"no produce acknowledged: {errors[-3:]}"
        producer.produce("first", value=b"first", on_delivery=on_delivery)
        producer.flush(15)
    return acked[0] - started


def kcat_round_trip(prefix: list[str], bootstrap: str, topic: str) -> tuple[list[str], set[str]]:
    """Produce COUNT keyed records with kcat (`prefix` runs it: on the host, or docker exec),
    read them back to the end of every partition; (the lines read, the brokers Metadata named)."""
    lines = "".join(f"k{i}:kcat-{i}\n" for i in range(COUNT))
    run([*prefix, "-P", "-b", bootstrap, "-t", topic, "-K:", "-X", "message.timeout.ms=30000"],
        stdin=lines)
    consumed = run([*prefix, "-C", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q",
                    "-f", "%k:%s\\n"]).stdout.split()
    listed = json.loads(run([*prefix, "-L", "-J", "-b", bootstrap, "-t", topic]).stdout)
    return consumed, {b["name"] for b in listed["brokers"]}


def confluent_round_trip(bootstrap: str, topic: str) -> tuple[list[str], set[str]]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": 30_000})
    metadata = producer.list_topics(topic, timeout=30)
    brokers = {f"{b.host}:{b.port}" for b in metadata.brokers.values()}
    for i in range(COUNT):
        producer.produce(topic, value=b"ck-%d" % i)
    assert producer.flush(30) == 0
    consumer = confluent_kafka.Consumer({"bootstrap.servers": bootstrap, "group.id": "host",
                                         "enable.auto.commit": False})
    partitions = len(metadata.topics[topic].partitions)
    consumer.assign([confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                     for p in range(partitions)])
    values: list[str] = []
    deadline = time.monotonic() + 30
    while len(values) < COUNT and time.monotonic() < deadline:
        values += [(m.value() or b"").decode() for m in consumer.consume(100, timeout=0.5)
                   if not m.error()]
    consumer.close()
    return values, brokers


def test_up_from_clean_state_serves_host_and_network_clients(
        images: dict[str, str], tmp_path: Path) -> None:
    with compose_cluster(images, "up", start=False) as cluster:
        assert not leftovers(cluster.name), "a new project name already has resources"
        started = time.monotonic()
        cluster.start()  # `compose up -d`, then every service healthy
        healthy_s = time.monotonic() - started
        acked_s = first_produce_s(cluster.bootstrap_servers, started)
        print(f"\ncompose up: all services healthy {healthy_s:.1f} s after the command; first "
              f"produce acknowledged after {acked_s:.1f} s")

        external = {f"localhost:{port}" for port in cluster.ports.values()}
        consumed, named = kcat_round_trip(["kcat"], cluster.bootstrap_servers, "host-kcat")
        assert sorted(consumed) == sorted(f"k{i}:kcat-{i}" for i in range(COUNT))
        assert named == external
        values, named = confluent_round_trip(cluster.bootstrap_servers, "host-confluent")
        assert sorted(values) == sorted(f"ck-{i}" for i in range(COUNT))
        assert named == external

        internal = {f"broker{i}:{INTERNAL_PORT}" for i in BROKER_IDS}
        package = Path(confluent_kafka.__file__).parent
        mounts = {kcat_bundle(tmp_path / "kcat"): "/opt/kcat",
                  package: "/opt/clients/confluent_kafka",
                  package.with_name("confluent_kafka.libs"): "/opt/clients/confluent_kafka.libs",
                  Path(__file__).with_name("network_client.py"): "/opt/network_client.py"}
        environment = {"LD_LIBRARY_PATH": "/opt/kcat/lib", "PYTHONPATH": "/opt/clients"}
        with client_container(cluster, images["EPOCHLOG_BASE_IMAGE"], mounts,
                              environment) as client:
            consumed, named = kcat_round_trip(["docker", "exec", "-i", client, "/opt/kcat/kcat"],
                                              cluster.internal_bootstrap_servers, "net-kcat")
            assert sorted(consumed) == sorted(f"k{i}:kcat-{i}" for i in range(COUNT))
            assert named == internal
            out = run(["docker", "exec", client, "python3", "/opt/network_client.py",
                       cluster.internal_bootstrap_servers, "net-confluent", str(COUNT)]).stdout
            seen = json.loads(out)
            assert (seen["unflushed"], seen["failures"]) == (0, []), seen
            assert sorted(seen["values"]) == sorted(f"net-{i}" for i in range(COUNT)), seen
            assert set(seen["brokers"]) == internal, seen
