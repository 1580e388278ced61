"""docker-compose.yml and the Dockerfile, checked without a container engine.

There is no container engine here, so this suite (1) checks the compose file's shape: four
services, racks a/b/c, named volumes, published ports equal to the advertised ones, health
checks, and every command a valid `epochlog` invocation with valid settings; and (2) runs exactly
the commands and health checks it names as local processes, with only hosts, ports and data
folders rewritten for one machine (`localize`, below), in its `depends_on` order, and produces and
consumes through the brokers' EXTERNAL addresses with confluent-kafka. If the commands, listeners
or health checks in the file are wrong, the cluster they make here does not work either.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker.cli import load as load_broker_settings
from controller.config import ControllerConfig
from epochlog.cli import build_parser
from epochlog.settings import load_settings
from protocol.apis.create_topics import CreatableTopic, CreateTopicsRequest
from protocol.apis.metadata import MetadataRequest, MetadataRequestTopic

from .broker.cluster import Child, call, free_port

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
BROKERS = {"broker1": "a", "broker2": "b", "broker3": "c"}  # service -> rack
DATA = "/data"
WAIT_S = 15.0  # for each stage: health, registration, leaders, produce, consume
HEALTH_RETRY_S = 0.1  # between health-check runs (compose uses `interval`; we need no 5 s)
STOP_S = 20.0
ADDRESS = re.compile(r"^([A-Za-z0-9.\-]+):(\d+)$")


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


def parse(argv: list[str]) -> argparse.Namespace:
    """The image's ENTRYPOINT is ["epochlog"]: a command list is what follows it."""
    return build_parser().parse_args(argv)


def address(text: str) -> tuple[str, int]:
    found = ADDRESS.match(text)
    assert found, f"not HOST:PORT: {text!r}"
    return found.group(1), int(found.group(2))


def published(service: dict[str, Any]) -> dict[int, int]:
    """host port -> container port, from `ports: ["HOST:CONTAINER"]`."""
    pairs = (str(p).split(":") for p in service.get("ports", []))
    return {int(host): int(container) for host, container in pairs}


# --------------------------------------------------------------------------------- shape


def test_dockerfile_builds_a_non_root_epochlog_image() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^FROM python:3\.11-slim$", text, re.MULTILINE)
    assert re.search(r"^RUN pip install \.", text, re.MULTILINE)
    assert re.search(r'^ENTRYPOINT \["epochlog"\]$', text, re.MULTILINE)
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users and users[-1] not in ("root", "0"), users
    assert "mkdir /data" in text and re.search(r'^VOLUME \["/data"\]$', text, re.MULTILINE)
    # `pip install .` in the image sees only what was copied: every package the wheel includes.
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "packages"]["find"]["include"]
    for package in (pattern.rstrip("*") for pattern in packages):
        assert f"COPY {package}/ {package}/" in text, package


def test_compose_file_has_a_controller_and_three_brokers_in_racks_a_b_c() -> None:
    doc = compose()
    services = doc["services"]
    assert set(services) == {"controller", *BROKERS}
    controller = parse(services["controller"]["command"])
    assert controller.command == "controller" and controller.data_dir == DATA
    _, controller_port = address(controller.listen)
    for name, rack in BROKERS.items():
        service = services[name]
        args = parse(service["command"])
        assert (args.command, args.rack, args.broker_id) == ("broker", rack, name[-1])
        assert args.controller == f"controller:{controller_port}"
        assert address(args.internal_advertised) == (name, address(args.internal_listen)[1])
        # Clients on the host reach the published port, which must be the advertised one.
        host, advertised_port = address(args.advertised)
        assert host == "localhost"
        assert published(service) == {advertised_port: address(args.listen)[1]}
        assert service["depends_on"] == {"controller": {"condition": "service_healthy"}}
        load_broker_settings(args)  # every setting valid (raises SettingsError otherwise)
    load_settings(ControllerConfig, {"data_dir": controller.data_dir,
                                     "listen": controller.listen}, environ={})
    for name, service in services.items():
        assert service["restart"] in ("always", "unless-stopped", "on-failure"), name
        assert service["image"] and service["build"] == "."
        volume, _, target = service["volumes"][0].partition(":")
        assert target == DATA and volume in doc["volumes"], name  # named, not a bind mount
        assert not volume.startswith((".", "/")), name
        check = service["healthcheck"]["test"]
        assert check[:3] == ["CMD", "python", "-c"], name
        assert address(check[-1])[1] == address(parse(service["command"]).listen)[1], name


# ---------------------------------------------------------------- one machine, no engine


@dataclass
class LocalPlan:
    ports: dict[tuple[str, int], int]  # (service, port in its container) -> local port
    published: dict[tuple[str, int], int]  # (service, port on the host) -> port in container
    data_root: Path


def plan(services: dict[str, Any], data_root: Path) -> LocalPlan:
    """A free local port for every port a service binds (`--listen`, `--internal-listen`)."""
    ports, host_ports = {}, {}
    for name, service in services.items():
        for arg in service["command"]:
            if arg.startswith("0.0.0.0:"):
                ports[(name, address(arg)[1])] = free_port()
        for host, container in published(service).items():
            host_ports[(name, host)] = container
    return LocalPlan(ports, host_ports, data_root)


def localize(service: str, argv: list[str], local: LocalPlan) -> list[str]:
    """The one rewrite from containers to one machine; every other argument stays as written.

    | in the compose file                     | here                                      |
    | --------------------------------------- | ----------------------------------------- |
    | /data (the service's volume)            | <tmp>/<service>                           |
    | 0.0.0.0:P or 127.0.0.1:P (itself)       | 127.0.0.1:<local port of (service, P)>    |
    | other-service:P (the compose network)   | 127.0.0.1:<local port of (other, P)>      |
    | localhost:H (published as H:P)          | 127.0.0.1:<local port of (service, P)>    |
    """
    out = []
    for arg in argv:
        found = ADDRESS.match(arg)
        if arg == DATA:
            out.append(str(local.data_root / service))
            continue
        if found is None:
            out.append(arg)
            continue
        host, port = found.group(1), int(found.group(2))
        if host in ("0.0.0.0", "127.0.0.1"):
            owner = service
        elif host == "localhost":
            owner, port = service, local.published[(service, port)]
        else:
            owner = host  # a service name; an unknown one fails here, as it would in compose
        out.append(f"127.0.0.1:{local.ports[(owner, port)]}")
    return out


def healthy(child: Child, check: list[str]) -> None:
    """Run the service's health check (CMD python ...) until it passes, as compose does."""
    argv = [sys.executable, *check[2:]]  # "CMD", "python": the image's python is ours here
    deadline = time.monotonic() + WAIT_S
    while subprocess.run(argv, check=False, capture_output=True, timeout=WAIT_S).returncode != 0:
        assert child.alive, f"{child.name} exited:\n" + "\n".join(child.lines[-20:])
        assert time.monotonic() < deadline, f"{child.name} never became healthy"
        time.sleep(HEALTH_RETRY_S)


def wait_leaders(bootstrap: tuple[str, int], topic: str, partitions: int) -> None:
    deadline = time.monotonic() + WAIT_S
    request = MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False)
    while True:
        found = call(*bootstrap, 3, request).topics[0].partitions
        if len(found) == partitions and all(p.leader_id >= 0 for p in found):
            return
        assert time.monotonic() < deadline, f"no leaders for {topic}: {found}"
        time.sleep(HEALTH_RETRY_S)


def test_compose_commands_make_a_working_cluster(tmp_path: Path) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    services = compose()["services"]
    local = plan(services, tmp_path)
    children = {name: Child(name, localize(name, s["command"], local))
                for name, s in services.items()}
    checks = {name: localize(name, s["healthcheck"]["test"], local)
              for name, s in services.items()}
    try:
        children["controller"].start()  # brokers depend on it being healthy
        healthy(children["controller"], checks["controller"])
        for name in BROKERS:
            children[name].start()
        for name in BROKERS:
            healthy(children[name], checks[name])
            children[name].wait_line(r"generation \d+: first LeaderAndIsr", timeout_s=WAIT_S)

        external = {name: address(parse(children[name].args).advertised) for name in BROKERS}
        bootstrap = ",".join(f"{h}:{p}" for h, p in external.values())
        _produce_and_consume(confluent, bootstrap, external)
    except BaseException:
        for child in children.values():  # shown by pytest with the failure
            print(f"--- {child.name}: {child.args}", *child.lines[-30:], sep="\n")
        raise
    finally:
        _stop(children)


def _produce_and_consume(confluent: Any, bootstrap: str,
                         external: dict[str, tuple[str, int]]) -> None:
    topic, partitions, count = "compose-demo", 3, 30
    answer = call(*external["broker1"], 19, CreateTopicsRequest(topics=[CreatableTopic(
        name=topic, num_partitions=partitions, replication_factor=1)]))
    assert answer.topics[0].error_code == 0, answer
    wait_leaders(external["broker1"], topic, partitions)

    producer = confluent.Producer({"bootstrap.servers": bootstrap, "acks": "all",
                                   "message.timeout.ms": int(WAIT_S * 1000)})
    # What clients are told: every broker at its EXTERNAL address. (Named topic: librdkafka
    # 2.x's all-topics Metadata v12 carries 3 stray bytes, which our decoder refuses.)
    brokers = producer.list_topics(topic, timeout=WAIT_S).brokers.values()
    seen = {(b.host, b.port) for b in brokers}
    assert seen == set(external.values())
    for i in range(count):
        producer.produce(topic, value=b"v%d" % i, partition=i % partitions)
    assert producer.flush(WAIT_S) == 0

    consumer = confluent.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                                   "enable.auto.commit": False})
    consumer.assign([confluent.TopicPartition(topic, p, 0) for p in range(partitions)])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got.append(message.value())
    consumer.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(count))


def _stop(children: dict[str, Child]) -> None:
    """SIGTERM, brokers first (controlled shutdown needs the controller); each must exit 0."""
    errors = []
    brokers = [c for name, c in children.items() if name != "controller"]
    for child in brokers:
        child.terminate()
    for child in [*brokers, children["controller"]]:
        was_running = child.alive
        try:
            rc = child.stop(timeout_s=STOP_S)
        except AssertionError as exc:
            errors.append(str(exc))
            continue
        if was_running and rc != 0:
            errors.append(f"{child.name} exited {rc}:\n" + "\n".join(child.lines[-20:]))
    assert not errors, "; ".join(errors)
