"""TLS with mutual authentication, on a three-broker cluster of real processes (issue 26).

The cluster is the one `epochlog cluster up --security ssl` starts (epochlog.testing's Cluster,
security="ssl"): clients reach every broker's SSL listener with a client certificate
(ssl.client.auth=required); SSL is also the inter-broker listener, so followers fetch over TLS
(each topic here has three replicas and must be fully replicated); the controller and the harness
use a plaintext CONTROLLER listener.

What must hold:
- kcat, confluent-kafka, kafka-python and aiokafka (clients nobody here wrote), and ours, each
  produce and consume over TLS with their own usual settings, and get back what they sent;
- a client without a certificate is refused;
- plaintext on the TLS port, TLS on the plaintext port, and a peer that never finishes its
  handshake (bounded by ssl.handshake.timeout.ms) each lose their connection, and the broker
  goes on serving;
- the principal of a connection is `User:` and its certificate's DN mapped by
  ssl.principal.mapping.rules, and a DN no rule maps is refused (a one-broker cluster that logs
  at DEBUG, where the broker says each TLS connection's principal).
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from epochlog.client import Admin, Consumer, NewTopic, Producer, create_ssl_context
from epochlog.testing.certs import ClusterCertificates, load_ca, make_client_certificate
from epochlog.testing.cluster import Cluster
from epochlog.testing.network import free_port
from tests.docs import ROOT, doc_example

RECORDS = 200
WAIT_S = 60.0
HANDSHAKE_TIMEOUT_MS = 2000
# Kafka's documented form: CN and OU of our O, else nothing (no DEFAULT: others are refused).
RULES = r"RULE:^CN=(.*?),OU=(.*?),O=epochlog$/$1@$2/L"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(3, security="ssl", base_dir=tmp_path_factory.mktemp("tls"),
                 settings={"ssl.handshake.timeout.ms": HANDSHAKE_TIMEOUT_MS}) as c:
        yield c


def tls_of(cluster: Cluster) -> ClusterCertificates:
    assert cluster.tls is not None
    return cluster.tls


def context(cluster: Cluster, *, certificate: bool = True) -> ssl.SSLContext:
    t = tls_of(cluster)
    if not certificate:
        return create_ssl_context(cafile=str(t.ca))
    return create_ssl_context(cafile=str(t.ca), certfile=str(t.client_cert),
                              keyfile=str(t.client_key))


def topic(cluster: Cluster, name: str) -> str:
    """Three partitions of three replicas: every follower fetches over TLS."""
    cluster.create_topic(name, partitions=3, replication_factor=3)
    cluster.wait_leaders(name, 3)
    return name


def records(client: str) -> list[tuple[bytes, bytes]]:
    return [(f"{client}-{i % 7}".encode(), f"value {i} from {client}".encode())
            for i in range(RECORDS)]


def check(cluster: Cluster, name: str, sent: list[tuple[bytes, bytes]],
          got: list[tuple[bytes, bytes]]) -> None:
    assert sorted(got) == sorted(sent)
    cluster.wait_fully_replicated(name, timeout_s=WAIT_S)  # followers fetched it over TLS


# ------------------------------------------------------------------------------ clients
@pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed")
def test_kcat(cluster: Cluster) -> None:
    name, sent = topic(cluster, "tls-kcat"), records("kcat")
    settings = [arg for k, v in cluster.client_settings().items() if k != "bootstrap.servers"
                for arg in ("-X", f"{k}={v}")]
    base = ["kcat", "-b", cluster.bootstrap_servers, *settings, "-t", name]
    lines = b"".join(k + b":" + v + b"\n" for k, v in sent)
    subprocess.run([*base, "-P", "-K:"], input=lines, check=True, timeout=WAIT_S)
    out = subprocess.run([*base, "-C", "-e", "-f", "%k:%s\n"], check=True, timeout=WAIT_S,
                         capture_output=True)
    got = [(k, v) for k, _, v in (line.partition(b":") for line in out.stdout.splitlines())]
    check(cluster, name, sent, got)


def test_confluent_kafka(cluster: Cluster) -> None:
    confluent = pytest.importorskip("confluent_kafka")
    name, sent = topic(cluster, "tls-confluent"), records("confluent")
    settings = cluster.client_settings()
    producer = confluent.Producer(settings)
    for key, value in sent:
        producer.produce(name, value=value, key=key)
    assert producer.flush(WAIT_S) == 0
    consumer = confluent.Consumer({**settings, "group.id": "tls-confluent",
                                   "auto.offset.reset": "earliest"})
    consumer.subscribe([name])
    got: list[tuple[bytes, bytes]] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            got.append((message.key(), message.value()))
    consumer.close()
    check(cluster, name, sent, got)


def test_kafka_python(cluster: Cluster) -> None:
    kafka = pytest.importorskip("kafka")
    name, sent = topic(cluster, "tls-kafka-python"), records("kafka-python")
    t = tls_of(cluster)
    ssl_settings = {"security_protocol": "SSL", "ssl_cafile": str(t.ca),
                    "ssl_certfile": str(t.client_cert), "ssl_keyfile": str(t.client_key)}
    producer = kafka.KafkaProducer(bootstrap_servers=cluster.bootstrap_servers, **ssl_settings)
    for key, value in sent:
        producer.send(name, value=value, key=key)
    producer.flush(WAIT_S)
    producer.close()
    consumer = kafka.KafkaConsumer(name, bootstrap_servers=cluster.bootstrap_servers,
                                   auto_offset_reset="earliest", consumer_timeout_ms=10_000,
                                   group_id="tls-kafka-python", **ssl_settings)
    got = [(m.key, m.value) for m in consumer]
    consumer.close()
    check(cluster, name, sent, got)


def test_aiokafka(cluster: Cluster) -> None:
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context as aiokafka_context

    name, sent = topic(cluster, "tls-aiokafka"), records("aiokafka")
    t = tls_of(cluster)

    async def scenario() -> list[tuple[bytes, bytes]]:
        ctx = aiokafka_context(cafile=str(t.ca), certfile=str(t.client_cert),
                               keyfile=str(t.client_key))
        producer = aiokafka.AIOKafkaProducer(bootstrap_servers=cluster.bootstrap_servers,
                                             security_protocol="SSL", ssl_context=ctx)
        await producer.start()
        try:
            for key, value in sent:
                await producer.send(name, value=value, key=key)
            await producer.flush()
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(name, bootstrap_servers=cluster.bootstrap_servers,
                                             security_protocol="SSL", ssl_context=ctx,
                                             auto_offset_reset="earliest",
                                             group_id="tls-aiokafka")
        await consumer.start()
        got: list[tuple[bytes, bytes]] = []
        try:
            async with asyncio.timeout(WAIT_S):
                while len(got) < RECORDS:
                    batches = await consumer.getmany(timeout_ms=1000)
                    got += [(m.key, m.value) for ms in batches.values() for m in ms]
        finally:
            await consumer.stop()
        return got

    check(cluster, name, sent, asyncio.run(scenario()))


def test_ours(cluster: Cluster) -> None:
    """Admin makes the topic, Producer writes, Consumer (in a group) reads, all over TLS."""
    name, sent = "tls-ours", records("ours")

    async def scenario() -> list[tuple[bytes, bytes]]:
        ctx = context(cluster)
        admin = Admin(cluster.bootstrap_servers, security_protocol="SSL", ssl_context=ctx)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(name, 3, 3)])
        finally:
            await admin.close()
        producer = Producer(cluster.bootstrap_servers, security_protocol="SSL", ssl_context=ctx)
        await producer.start()
        try:
            for key, value in sent:
                await producer.send(name, value, key=key)
            await producer.flush()
        finally:
            await producer.close()
        consumer = Consumer(cluster.bootstrap_servers, group_id="tls-ours",
                            auto_offset_reset="earliest", security_protocol="SSL",
                            ssl_context=ctx)
        await consumer.start()
        consumer.subscribe([name])
        got: list[tuple[bytes, bytes]] = []
        try:
            async with asyncio.timeout(WAIT_S):
                while len(got) < RECORDS:
                    got += [(bytes(r.key or b""), bytes(r.value or b""))
                            for r in await consumer.poll(timeout_ms=1000)]
        finally:
            await consumer.close()
        return got

    got = asyncio.run(scenario())
    check(cluster, name, sent, got)


def test_the_documented_example_runs(cluster: Cluster, tmp_path: Path) -> None:
    """docs/security.md's client example, as written but for the cluster's address and files."""
    code = doc_example("security.md", "## The client library")
    assert "127.0.0.1:9292" in code and ".epochlog/tls/" in code
    script = tmp_path / "example.py"
    script.write_text(code.replace("127.0.0.1:9292", cluster.bootstrap_servers)
                      .replace(".epochlog/tls/", f"{tls_of(cluster).ca.parent}/"))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=WAIT_S, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["secured", "0"]


# ------------------------------------------------------------------------- bad peers
def tls_host_port(cluster: Cluster) -> tuple[str, int]:
    host, port = cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    return host, int(port)


def api_versions_frame() -> bytes:
    """ApiVersions v0, correlation id 7, client id "t": a request every broker answers."""
    body = struct.pack(">hhih", 18, 0, 7, 1) + b"t"
    return struct.pack(">i", len(body)) + body


def closed_within(sock: socket.socket, seconds: float) -> bool:
    """The peer closed (EOF or reset) within seconds, without sending anything of use."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except (ConnectionError, ssl.SSLError):
        return True
    except TimeoutError:
        return False
    return True


def still_serving(cluster: Cluster) -> None:
    async def ask() -> int:
        admin = Admin(cluster.bootstrap_servers, security_protocol="SSL",
                      ssl_context=context(cluster))
        await admin.start()
        try:
            return len(admin.cluster.brokers)
        finally:
            await admin.close()

    assert asyncio.run(ask()) == 3
    assert all(b.alive for b in cluster.brokers.values())


def test_a_client_without_a_certificate_is_refused(cluster: Cluster) -> None:
    host, port = tls_host_port(cluster)
    first = next(b for b in cluster.brokers.values() if b.client_address == f"{host}:{port}")
    mark = first.mark()
    ctx = context(cluster, certificate=False)
    with socket.create_connection((host, port), timeout=WAIT_S) as raw:
        try:
            with ctx.wrap_socket(raw, server_hostname=host) as tls:
                # TLS 1.3: the client's side of the handshake ends before the server has
                # checked our (missing) certificate; its refusal comes with the first read.
                tls.sendall(api_versions_frame())
                assert closed_within(tls, WAIT_S)
        except (ssl.SSLError, ConnectionError):
            pass  # refused during the handshake (TLS 1.2)
    first.wait_line(r"TLS handshake from \S+ on SSL failed: PEER_DID_NOT_RETURN_A_CERTIFICATE",
                    start=mark)
    still_serving(cluster)


def test_our_client_without_a_certificate_fails(cluster: Cluster) -> None:
    async def start() -> None:
        admin = Admin(cluster.bootstrap_servers, security_protocol="SSL",
                      ssl_context=context(cluster, certificate=False), request_timeout_ms=5000)
        try:
            async with asyncio.timeout(20):
                await admin.start()
        finally:
            await admin.close()

    with pytest.raises(ConnectionError, match="over TLS: does it require a client certificate"):
        asyncio.run(start())


def test_plaintext_to_the_tls_port_is_closed_and_the_broker_serves_on(cluster: Cluster) -> None:
    host, port = tls_host_port(cluster)
    with socket.create_connection((host, port), timeout=WAIT_S) as raw:
        raw.sendall(api_versions_frame())
        assert closed_within(raw, WAIT_S)
    still_serving(cluster)


def test_tls_to_the_plaintext_port_is_closed_and_the_broker_serves_on(cluster: Cluster) -> None:
    broker = cluster.brokers[1]
    ctx = context(cluster)
    mark = broker.mark()
    with socket.create_connection((broker.host, broker.port), timeout=WAIT_S) as raw:
        with pytest.raises((ssl.SSLError, ConnectionError)):
            ctx.wrap_socket(raw, server_hostname=broker.host)
    broker.wait_line(r"closing connection from \S+: frame of \d+ bytes is over the limit of "
                     r"\d+ bytes \(its first bytes are a TLS handshake: a TLS client on a "
                     r"plaintext listener\?\)", start=mark)
    still_serving(cluster)


def test_a_handshake_that_never_finishes_is_cut_off(cluster: Cluster) -> None:
    host, port = tls_host_port(cluster)
    began = time.monotonic()
    with socket.create_connection((host, port), timeout=WAIT_S) as raw:
        assert closed_within(raw, WAIT_S)  # we said nothing: the broker gave up
    assert time.monotonic() - began >= HANDSHAKE_TIMEOUT_MS / 1000 * 0.9
    still_serving(cluster)


# ------------------------------------------------------------------------- principals
def test_the_principal_is_the_mapped_certificate_dn(tmp_path: Path) -> None:
    """... and the failed handshakes' counter of the SSL listener is in the broker's metrics."""
    metrics_port = free_port()
    with Cluster(1, security="ssl", base_dir=tmp_path,
                 settings={"ssl.principal.mapping.rules": RULES},
                 broker_args=["--log-level", "DEBUG",
                              "--metrics-listen", f"127.0.0.1:{metrics_port}"]) as c:
        t = tls_of(c)
        ca_key, ca_cert = load_ca(t.ca.parent)
        cert, key = make_client_certificate(t.ca.parent, ca_key, ca_cert,
                                            (("CN", "Stranger"), ("O", "elsewhere")),
                                            "stranger")
        host, port = tls_host_port(c)
        broker = c.brokers[1]

        def hello(certfile: Path, keyfile: Path) -> bool:
            """ApiVersions over TLS with this certificate: answered?"""
            ctx = create_ssl_context(cafile=str(t.ca), certfile=str(certfile),
                                     keyfile=str(keyfile))
            with socket.create_connection((host, port), timeout=WAIT_S) as raw, \
                    ctx.wrap_socket(raw, server_hostname=host) as tls:
                tls.sendall(api_versions_frame())
                tls.settimeout(WAIT_S)
                try:
                    return len(tls.recv(4)) == 4
                except (ssl.SSLError, ConnectionError):
                    return False

        # CN=client,OU=clients,O=epochlog -> client@clients, lower-cased by the rule's /L
        assert hello(t.client_cert, t.client_key)
        broker.wait_line(r"TLS connection from \S+ on SSL: principal User:client@clients")
        # CN=Stranger,O=elsewhere: no rule maps it, so no principal, so no service
        assert not hello(cert, key)
        broker.wait_line(r"refusing TLS connection from \S+ on SSL: no ssl.principal.mapping."
                         r"rules rule applies to 'CN=Stranger,O=elsewhere'")
        assert broker.alive

        with socket.create_connection((host, port), timeout=WAIT_S) as raw:
            raw.sendall(api_versions_frame())  # plaintext: a failed handshake
            assert closed_within(raw, WAIT_S)
        deadline = time.monotonic() + WAIT_S
        line = 'epochlog_broker_tls_handshake_failures_total{listener="SSL"} 1.0'
        while line not in scrape(metrics_port):
            assert time.monotonic() < deadline, scrape(metrics_port)
            time.sleep(0.1)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as answer:
        return str(answer.read().decode())
