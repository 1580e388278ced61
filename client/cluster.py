"""A cluster seen from a client: bootstrap, metadata, one connection per broker.

`ClusterClient` knows which broker leads which partition (from Metadata, refreshed on demand) and
sends a request to a given broker, opening connections lazily and at most one per broker. It
never lets an older partition view (lower leader epoch) replace a newer one, so a lagging broker's
answer cannot send us back to a deposed leader (KIP-320). The command-line tools use it today; the
producer, consumer and admin of the client library build on it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from protocol.apis.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from protocol.error_codes import ErrorCode, name_of
from protocol.registry import APIS
from protocol.schema import Message

from .connection import Connection

CONNECT_ATTEMPTS_MAX = 3


class KafkaError(Exception):
    """A Kafka error code in an answer, with its name."""

    def __init__(self, code: int, what: str) -> None:
        self.code = code
        super().__init__(f"{what}: {name_of(code)} ({code})")


@dataclass(frozen=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int
    rack: str | None


@dataclass(frozen=True)
class PartitionView:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline: tuple[int, ...]
    error_code: int


def parse_bootstrap(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        host, _, port = item.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host, int(port)))
    return out


class ClusterClient:
    def __init__(self, bootstrap: str, *, client_id: str = "epochlog",
                 request_timeout_ms: int = 30_000) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.brokers: dict[int, BrokerAddress] = {}
        self.partitions: dict[tuple[str, int], PartitionView] = {}
        self.topic_errors: dict[str, int] = {}
        self.controller_id = -1
        self._conns: dict[int, Connection] = {}
        self._bootstrap_conn: Connection | None = None

    async def __aenter__(self) -> ClusterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        conns = list(self._conns.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._conns.clear()
        self._bootstrap_conn = None
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    async def _connect(self, host: str, port: int) -> Connection:
        return await Connection(host, port, client_id=self.client_id,
                                request_timeout_ms=self.request_timeout_ms).connect()

    async def any_connection(self) -> Connection:
        """A connection to some broker: a known one if we have any, else a bootstrap server."""
        for conn in self._conns.values():
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        errors = []
        for host, port in self.bootstrap:
            try:
                self._bootstrap_conn = await self._connect(host, port)
                return self._bootstrap_conn
            except (OSError, asyncio.TimeoutError) as exc:
                errors.append(f"{host}:{port}: {exc}")
        raise ConnectionError("no bootstrap server answered: " + "; ".join(errors))

    async def connection(self, node_id: int) -> Connection:
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        address = self.brokers.get(node_id)
        if address is None:
            await self.refresh()
            address = self.brokers.get(node_id)
            if address is None:
                raise ConnectionError(f"broker {node_id} is not in the cluster's metadata")
        self._conns[node_id] = await self._connect(address.host, address.port)
        return self._conns[node_id]

    async def request(self, conn: Connection, key: int, message: Message) -> Any:
        api = APIS[key]
        return await conn.request(api, conn.version_for(api), message)

    async def request_broker(self, node_id: int, key: int, message: Message) -> Any:
        return await self.request(await self.connection(node_id), key, message)

    async def refresh(self, topics: list[str] | None = None, auto_create: bool = False
                      ) -> MetadataResponse:
        """Metadata for topics (None: all topics); merges into what is known."""
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=auto_create)
        answer: MetadataResponse = await self.request(await self.any_connection(), 3, request)
        self.brokers = {b.node_id: BrokerAddress(b.node_id, b.host, b.port, b.rack)
                        for b in answer.brokers}
        self.controller_id = answer.controller_id
        for topic in answer.topics:
            self.topic_errors[topic.name or ""] = topic.error_code
            for p in topic.partitions:
                self._merge(PartitionView(topic.name or "", p.partition_index, p.leader_id,
                                          p.leader_epoch, tuple(p.replica_nodes),
                                          tuple(p.isr_nodes), tuple(p.offline_replicas),
                                          p.error_code))
        return answer

    def _merge(self, view: PartitionView) -> None:
        known = self.partitions.get((view.topic, view.partition))
        if known is not None and view.leader_epoch < known.leader_epoch:
            return  # an older view from a lagging broker: keep the newer one
        self.partitions[(view.topic, view.partition)] = view

    def partitions_of(self, topic: str) -> list[PartitionView]:
        return sorted((v for (t, _), v in self.partitions.items() if t == topic),
                      key=lambda v: v.partition)

    async def wait_topic(self, topic: str, timeout_s: float = 10.0, auto_create: bool = False
                         ) -> list[PartitionView]:
        """The topic's partitions once each has a leader; KafkaError if it does not exist."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            await self.refresh([topic], auto_create=auto_create)
            code = self.topic_errors.get(topic, 0)
            views = self.partitions_of(topic)
            if code == 0 and views and all(v.leader >= 0 for v in views):
                return views
            retriable = code in (0, ErrorCode.LEADER_NOT_AVAILABLE,
                                 ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if auto_create else -999)
            if not retriable or asyncio.get_running_loop().time() > deadline:
                raise KafkaError(code or ErrorCode.LEADER_NOT_AVAILABLE, f"topic {topic}")
            await asyncio.sleep(0.1)
