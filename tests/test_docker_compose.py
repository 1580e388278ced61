"""docker-compose.yml, the Dockerfile and .dockerignore, checked fast and without a container
engine. (The real-engine tests, which count, are in tests/docker/.)

This suite (1) checks the compose file's shape as Compose resolves it (YAML merges, `${VAR:-x}`
defaults): four services, racks a/b/c, named volumes, published ports equal to the advertised
ones, health checks, every service's `EPOCHLOG_*` environment valid settings; and the Dockerfile's:
a base image chosen by a build argument, every package folder copied and not ignored, a non-root
user, /data; and (2) runs exactly the commands, environments and health checks the file names as
local processes, with only hosts, ports and data folders rewritten for one machine (`localize`),
in its `depends_on` order, and produces and consumes through the brokers' EXTERNAL addresses
with confluent-kafka.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from epochlog.broker.config import BrokerConfig
from epochlog.cli import build_parser
from epochlog.controller.config import ControllerConfig
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_topics import CreatableTopic, CreateTopicsRequest
from epochlog.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic
from epochlog.settings import load_settings

from .broker.cluster import Child, call, free_port

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"
HEALTHCHECK_IN_IMAGE = "/opt/epochlog/healthcheck.py"
BROKERS = {"broker1": "a", "broker2": "b", "broker3": "c"}  # service -> rack
DATA = "/data"
WAIT_S = 15.0  # for each stage: health, registration, leaders, produce, consume
HEALTH_RETRY_S = 0.1  # between health-check runs (compose uses `interval`; we need no 3 s)
STOP_S = 20.0
ADDRESS = re.compile(r"^([A-Za-z0-9.\-]+):(\d+)$")
VARIABLE = re.compile(r"\$\{([A-Z0-9_]+):-([^}]*)\}")  # the one form the file uses


def interpolate(text: str) -> str:
    """Compose's `${NAME:-default}` with NAME unset: the file as a user without variables gets
    it. Any other `$` form would need a real Compose: refuse it."""
    resolved = VARIABLE.sub(lambda m: m.group(2), text)
    assert "$" not in resolved, f"an interpolation this check cannot resolve: {resolved!r}"
    return resolved


def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(interpolate(COMPOSE.read_text()))
    return doc


def environment(service: dict[str, Any]) -> dict[str, str]:
    return {k: str(v) for k, v in service["environment"].items()}


def address(text: str) -> tuple[str, int]:
    found = ADDRESS.match(text)
    assert found, f"not HOST:PORT: {text!r}"
    return found.group(1), int(found.group(2))


def published(service: dict[str, Any]) -> dict[int, int]:
    """host port -> container port, from `ports: ["HOST:CONTAINER"]`."""
    pairs = (str(p).split(":") for p in service.get("ports", []))
    return {int(host): int(container) for host, container in pairs}


def broker_settings(service: dict[str, Any]) -> BrokerConfig:
    """What `epochlog broker` builds from the service's environment (raises SettingsError)."""
    return load_settings(BrokerConfig, {}, environ=environment(service))


# --------------------------------------------------------------------------------- shape


def test_dockerfile_builds_a_non_root_epochlog_image_from_a_chosen_base() -> None:
    text = DOCKERFILE.read_text()
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", text, re.MULTILINE)
    bases = re.findall(r"^FROM (\S+)", text, re.MULTILINE)
    assert bases and all(b == "${BASE_IMAGE}" for b in bases), bases
    assert re.search(r"pip install .*--no-deps .*\s\.\s", text)
    assert re.search(r'^ENTRYPOINT \["epochlog"\]$', text, re.MULTILINE)
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users and users[-1] not in ("root", "0"), users
    assert "mkdir /data" in text and re.search(r'^VOLUME \["/data"\]$', text, re.MULTILINE)
    assert f"COPY docker/healthcheck.py {HEALTHCHECK_IN_IMAGE}" in text
    # `pip install .` in the image sees only what was copied: every package the wheel includes,
    # none of them left out of the build context.
    folders = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"].values()
    ignored = {line.strip().strip("/") for line in DOCKERIGNORE.read_text().splitlines()
               if line.strip() and not line.startswith("#")}
    for folder in folders:
        assert f"COPY {folder}/ {folder}/" in text, folder
        assert folder not in ignored and "*" not in ignored, folder


def test_compose_file_has_a_controller_and_three_brokers_in_racks_a_b_c() -> None:
    doc = compose()
    services = doc["services"]
    assert set(services) == {"controller", *BROKERS}
    controller = services["controller"]
    assert build_parser().parse_args(controller["command"]).command == "controller"
    settings = load_settings(ControllerConfig, {}, environ=environment(controller))
    assert settings.data_dir == DATA
    _, controller_port = address(settings.listen)
    for name, rack in BROKERS.items():
        service = services[name]
        assert build_parser().parse_args(service["command"]).command == "broker"
        config = broker_settings(service)  # every setting valid
        assert (config.broker_id, config.rack) == (int(name[-1]), rack)
        assert config.controller == f"controller:{controller_port}"
        assert config.data_dir == DATA
        # Containers on the compose network reach the INTERNAL listener by service name.
        assert address(config.internal_advertised) == (name, address(config.internal_listen)[1])
        # Clients on the host reach the published port, which must be the advertised one.
        host, advertised_port = address(config.advertised)
        assert host == "localhost"
        assert published(service) == {advertised_port: address(config.listen)[1]}
        assert service["depends_on"] == {"controller": {"condition": "service_healthy"}}
        assert service["healthcheck"]["test"] == ["CMD", "python", HEALTHCHECK_IN_IMAGE,
                                                  "broker"]
    assert controller["healthcheck"]["test"] == ["CMD", "python", HEALTHCHECK_IN_IMAGE,
                                                 "controller"]
    for name, service in services.items():
        assert service["restart"] == "unless-stopped", name
        assert service["image"] and service["build"]["context"] == "."
        assert service["build"]["args"] == {"BASE_IMAGE": "python:3.11-slim"}, name
        volume, _, target = service["volumes"][0].partition(":")
        assert target == DATA and volume in doc["volumes"], name  # named, not a bind mount
        assert not volume.startswith((".", "/")), name


# ---------------------------------------------------------------- one machine, no engine


@dataclass
class LocalPlan:
    ports: dict[tuple[str, int], int]  # (service, port in its container) -> local port
    published: dict[tuple[str, int], int]  # (service, port on the host) -> port in container
    data_root: Path


def plan(services: dict[str, Any], data_root: Path) -> LocalPlan:
    """A free local port for every port a service binds (`*_LISTEN` variables)."""
    ports, host_ports = {}, {}
    for name, service in services.items():
        for value in environment(service).values():
            if value.startswith("0.0.0.0:"):
                ports[(name, address(value)[1])] = free_port()
        for host, container in published(service).items():
            host_ports[(name, host)] = container
    return LocalPlan(ports, host_ports, data_root)


def localize(service: str, value: str, local: LocalPlan) -> str:
    """The one rewrite from containers to one machine; every other value stays as written.

    | in the compose file                     | here                                      |
    | --------------------------------------- | ----------------------------------------- |
    | /data (the service's volume)            | <tmp>/<service>                           |
    | 0.0.0.0:P (itself)                      | 127.0.0.1:<local port of (service, P)>    |
    | other-service:P (the compose network)   | 127.0.0.1:<local port of (other, P)>      |
    | localhost:H (published as H:P)          | 127.0.0.1:<local port of (service, P)>    |
    | /opt/epochlog/healthcheck.py            | docker/healthcheck.py                     |
    """
    if value == DATA:
        return str(local.data_root / service)
    if value == HEALTHCHECK_IN_IMAGE:
        return str(HEALTHCHECK)
    found = ADDRESS.match(value)
    if found is None:
        return value
    host, port = found.group(1), int(found.group(2))
    if host == "0.0.0.0":
        owner = service
    elif host == "localhost":
        owner, port = service, local.published[(service, port)]
    else:
        owner = host  # a service name; an unknown one fails here, as it would in compose
    return f"127.0.0.1:{local.ports[(owner, port)]}"


@contextlib.contextmanager
def environ(values: dict[str, str]) -> Iterator[None]:
    """os.environ with `values` for the duration: a Child passes os.environ to its process."""
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                del os.environ[key]
            else:
                os.environ[key] = old


class Service:
    """One service as a local process: its command, its localized environment, its check."""

    def __init__(self, name: str, spec: dict[str, Any], local: LocalPlan) -> None:
        self.env = {k: localize(name, v, local) for k, v in environment(spec).items()}
        self.child = Child(name, list(spec["command"]))
        self.check = [localize(name, arg, local) for arg in spec["healthcheck"]["test"]]

    def start(self) -> None:
        with environ(self.env):
            self.child.start()

    def healthy(self) -> None:
        """Run the service's health check (CMD python ...) until it passes, as compose does."""
        argv = [sys.executable, *self.check[2:]]  # "CMD", "python": the image's python
        deadline = time.monotonic() + WAIT_S
        while True:
            done = subprocess.run(argv, check=False, capture_output=True, text=True,
                                  timeout=WAIT_S, env={**os.environ, **self.env})
            if done.returncode == 0:
                return
            assert self.child.alive, f"{self.child.name} exited:\n" + "\n".join(
                self.child.lines[-20:])
            assert time.monotonic() < deadline, (
                f"{self.child.name} never became healthy: {done.stdout}{done.stderr}")
            time.sleep(HEALTH_RETRY_S)


def wait_leaders(bootstrap: tuple[str, int], topic: str, partitions: int) -> None:
    deadline = time.monotonic() + WAIT_S
    request = MetadataRequest(topics=[MetadataRequestTopic(name=topic)],
                              allow_auto_topic_creation=False)
    while True:
        found = call(*bootstrap, ApiKey.METADATA, request).topics[0].partitions
        if len(found) == partitions and all(p.leader_id >= 0 for p in found):
            return
        assert time.monotonic() < deadline, f"no leaders for {topic}: {found}"
        time.sleep(HEALTH_RETRY_S)


def test_compose_commands_make_a_working_cluster(tmp_path: Path) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    specs = compose()["services"]
    local = plan(specs, tmp_path)
    services = {name: Service(name, spec, local) for name, spec in specs.items()}
    try:
        services["controller"].start()  # brokers depend on it being healthy
        services["controller"].healthy()
        for name in BROKERS:
            services[name].start()
        for name in BROKERS:
            services[name].healthy()  # Metadata lists the broker: it registered

        external = {name: address(services[name].env["EPOCHLOG_ADVERTISED"])
                    for name in BROKERS}
        bootstrap = ",".join(f"{h}:{p}" for h, p in external.values())
        _produce_and_consume(confluent, bootstrap, external)
    except BaseException:
        for service in services.values():  # shown by pytest with the failure
            print(f"--- {service.child.name}: {service.env}", *service.child.lines[-30:],
                  sep="\n")
        raise
    finally:
        _stop({name: s.child for name, s in services.items()})


def _produce_and_consume(confluent: Any, bootstrap: str,
                         external: dict[str, tuple[str, int]]) -> None:
    topic, partitions, count = "compose-demo", 3, 30
    answer = call(*external["broker1"], ApiKey.CREATE_TOPICS, CreateTopicsRequest(topics=[
        CreatableTopic(name=topic, num_partitions=partitions, replication_factor=1)]))
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
