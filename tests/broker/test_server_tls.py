"""The broker's server on an SSL listener, in-process on 127.0.0.1 (only ApiVersions, which needs
no cluster): our client's Connection speaks to it over mutual TLS; connections still in their
handshake count against connections_max (a peer that never handshakes cannot hold more sockets
than the limit); and failed handshakes are said in one INFO line per interval, the rest counted,
so a flood of them cannot flood the log. Real processes and real clients: tests/interop/test_tls.py.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from epochlog.broker import server as server_module
from epochlog.broker.principal import parse_rules
from epochlog.broker.server import KafkaServer, ServerLimits, TlsServing
from epochlog.broker.tls import TlsFiles, server_context
from epochlog.client import create_ssl_context
from epochlog.client.connection import Connection
from epochlog.testing.certs import ClusterCertificates, ensure_certificates

CONNECTIONS_MAX = 2


@pytest.fixture
def certs(tmp_path: Path) -> ClusterCertificates:
    return ensure_certificates(tmp_path / "tls")


@pytest.fixture
async def tls_server(certs: ClusterCertificates) -> AsyncIterator[tuple[KafkaServer, int]]:
    context = server_context(TlsFiles(str(certs.broker_keystore), str(certs.ca),
                                      client_auth="required"))
    srv = KafkaServer(app=None, limits=ServerLimits(connections_max=CONNECTIONS_MAX),
                      listener="SSL", tls=TlsServing(context, 30_000, parse_rules("DEFAULT")))
    _, port = await srv.start("127.0.0.1", 0)
    yield srv, port
    await srv.stop()


def client_context(certs: ClusterCertificates) -> ssl.SSLContext:
    return create_ssl_context(cafile=str(certs.ca), certfile=str(certs.client_cert),
                              keyfile=str(certs.client_key))


async def test_our_connection_speaks_mutual_tls(tls_server, certs) -> None:
    _, port = tls_server
    conn = await Connection("127.0.0.1", port, ssl_context=client_context(certs)).connect()
    assert conn.server_versions[18] == (0, 3)
    await conn.close()


async def test_handshakes_under_way_count_against_connections_max(tls_server, certs) -> None:
    srv, port = tls_server
    idle = [await asyncio.open_connection("127.0.0.1", port) for _ in range(CONNECTIONS_MAX)]
    async with asyncio.timeout(10):
        while len(srv.handshakes) < CONNECTIONS_MAX:
            await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    async with asyncio.timeout(5):  # refused at once, not after the 30 s handshake timeout
        assert await reader.read(100) == b""
    writer.close()
    for _, w in idle:
        w.close()
    async with asyncio.timeout(10):
        while srv.handshakes:
            await asyncio.sleep(0.01)
    conn = await Connection("127.0.0.1", port, ssl_context=client_context(certs)).connect()
    await conn.close()


async def test_failed_handshakes_are_said_once_per_interval(
        tls_server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(server_module, "HANDSHAKE_FAILURE_LOG_MS", 60_000)
    srv, port = tls_server
    caplog.set_level(logging.INFO, logger="epochlog.server")
    for _ in range(5):  # plaintext to the TLS port: each handshake fails
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"\x00\x00\x00\x10" + b"\x00" * 16)
        async with asyncio.timeout(10):
            assert await reader.read(100) == b""
        writer.close()
    async with asyncio.timeout(10):
        while srv.handshake_failures_total < 5:
            await asyncio.sleep(0.01)
    said = [r for r in caplog.records if "TLS handshake from" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.INFO, said
