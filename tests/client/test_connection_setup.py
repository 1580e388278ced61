"""ClusterClient's connection setup (KIP-601) against a broker that never answers.

The "broker" is a listening socket nobody accepts from: the kernel completes the TCP handshake,
as a SIGSTOPped broker's does, and no ApiVersions answer ever comes. What is checked: dial()
returns at once and every caller shares one attempt; a failed attempt backs off the reconnect;
the next attempt's setup timeout is doubled (KIP-601's exponential setup timeout, with 20% jitter:
only a lower bound on elapsed time is asserted, which a busy machine cannot break); and a frozen
server first in the bootstrap list does not hold up the next one for its setup timeout.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator

import pytest

from epochlog.client.admin import Admin
from epochlog.client.cluster import BrokerAddress, ClusterClient
from tests.client.test_connection import Server

SETUP_MS = 300
JITTER = 0.2


@pytest.fixture
def frozen_port() -> Iterator[int]:
    server = socket.create_server(("127.0.0.1", 0))  # listening; never accepts, never reads
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


async def test_one_background_attempt_whose_timeout_doubles_after_a_failure(
        frozen_port: int) -> None:
    async with ClusterClient(f"127.0.0.1:{frozen_port}", request_timeout_ms=60_000,
                             reconnect_backoff_ms=1, reconnect_backoff_max_ms=1,
                             socket_connection_setup_timeout_ms=SETUP_MS,
                             socket_connection_setup_timeout_max_ms=4 * SETUP_MS) as cluster:
        cluster.brokers[1] = BrokerAddress(1, "127.0.0.1", frozen_port, None)
        started = time.monotonic()
        attempt = cluster.dial(1)
        assert attempt is not None and cluster.dial(1) is attempt, "one attempt per broker"
        assert not cluster.connected(1)
        with pytest.raises(ConnectionError, match="no further than ApiVersions"):
            await cluster.connection(1)  # joins the attempt under way
        assert attempt.done(), "connection() waited on the same attempt"
        first_s = time.monotonic() - started
        assert first_s >= SETUP_MS / 1000 * (1 - JITTER)
        assert first_s < 30, "the request timeout (60 s) must not bound the setup"

        await asyncio.sleep(0.01)  # past the 1 ms reconnect backoff
        started = time.monotonic()
        with pytest.raises(ConnectionError):
            await cluster.connection(1)
        second_s = time.monotonic() - started
        assert second_s >= 2 * SETUP_MS / 1000 * (1 - JITTER), "KIP-601: doubled after a failure"


async def test_setup_timeout_above_its_maximum_is_refused() -> None:
    with pytest.raises(ValueError, match="socket_connection_setup_timeout_ms"):
        ClusterClient("127.0.0.1:9092", socket_connection_setup_timeout_ms=40_000,
                      socket_connection_setup_timeout_max_ms=30_000)
    admin = Admin("127.0.0.1:9092", socket_connection_setup_timeout_ms=2_000,
                  socket_connection_setup_timeout_max_ms=4_000)  # Admin takes them too
    assert admin.cluster.setup_timeout_ms == 2_000


async def test_a_frozen_bootstrap_server_first_costs_the_stagger_not_the_setup_timeout(
        frozen_port: int) -> None:
    async with Server() as live, ClusterClient(
            f"127.0.0.1:{frozen_port},127.0.0.1:{live.port}",
            socket_connection_setup_timeout_ms=60_000,
            socket_connection_setup_timeout_max_ms=60_000) as cluster:
        async with asyncio.timeout(30):  # half the setup timeout: the frozen one was not waited
            conn = await cluster.any_connection()
        assert conn.port == live.port
        assert not conn.closed


async def test_every_bootstrap_server_silent_is_one_error_naming_each(frozen_port: int) -> None:
    with socket.create_server(("127.0.0.1", 0)) as other:
        other_port = other.getsockname()[1]
        async with ClusterClient(f"127.0.0.1:{frozen_port},127.0.0.1:{other_port}",
                                 socket_connection_setup_timeout_ms=SETUP_MS) as cluster:
            with pytest.raises(ConnectionError, match="no broker answered") as caught:
                await cluster.any_connection()
    assert f":{frozen_port}: " in str(caught.value) and f":{other_port}: " in str(caught.value)


async def test_a_closed_client_starts_no_attempt() -> None:
    """An attempt started after close() would outlive it and its event loop (pytest saw one
    destroyed pending, 'Event loop is closed', in a chaos test)."""
    cluster = ClusterClient("127.0.0.1:9092")
    cluster.brokers[1] = BrokerAddress(1, "127.0.0.1", 9, None)
    await cluster.close()
    assert cluster.dial(1) is None
    with pytest.raises(ConnectionError, match="closed"):
        await cluster.connection(1)
