"""A cluster seen from a client: bootstrap, metadata, one connection per broker.

`ClusterClient` knows which broker leads which partition (from Metadata, refreshed on demand) and
sends a request to a given broker, opening connections lazily and at most one per broker. It
never lets an older partition view (lower leader epoch) replace a newer one, so a lagging broker's
answer cannot send us back to a deposed leader (KIP-320). The command-line tools use it; the
producer, consumer and admin of the client library build on it.

Metadata cache rules
--------------------
- A partition view is replaced only by one with the same or a higher leader epoch.
- A refresh is *requested* by whoever saw metadata go stale (NOT_LEADER_OR_FOLLOWER,
  FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH, a dead connection): `request_update()`. The request
  is served by `maybe_update()` no sooner than `retry_backoff_ms` after the previous refresh, so
  a storm of errors costs one Metadata request per backoff, not one per error.
- Without errors, metadata is refreshed every `metadata_max_age_ms`, less up to 20% of jitter, so
  that many clients started together do not refresh together.

Reconnects: a broker whose connection failed is not dialled again before its backoff has passed
(`reconnect_backoff_ms`, doubling per consecutive failure up to `reconnect_backoff_max_ms`);
`connection()` raises `NodeNotReady` meanwhile, so callers move on instead of blocking.

Connection setup (KIP-601): a connection is set up (TCP connect and ApiVersions, see
client.connection) within `socket_connection_setup_timeout_ms`, doubling per consecutive failure
of that broker up to `socket_connection_setup_timeout_max_ms`, with 20% of jitter. At most one
attempt per broker is under way: `connection()` joins it, and `dial()` starts it in the
background and returns at once, so a sender can leave a broker that is slow to answer (a frozen
leader) and carry on with the others, and with whatever metadata names in its place.
"""

from __future__ import annotations

import asyncio
import logging
import random
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from epochlog.protocol.apis.metadata import MetadataRequest, MetadataRequestTopic, MetadataResponse
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.registry import APIS
from epochlog.protocol.schema import Message

from .connection import Connection
from .errors import error_for

CONNECT_ATTEMPTS_MAX = 3
RETRY_BACKOFF_MS_DEFAULT = 100
RECONNECT_BACKOFF_MS_DEFAULT = 50
RECONNECT_BACKOFF_MAX_MS_DEFAULT = 1000
METADATA_MAX_AGE_MS_DEFAULT = 300_000
METADATA_AGE_JITTER = 0.2  # periodic refreshes come up to 20% early
SOCKET_CONNECTION_SETUP_TIMEOUT_MS_DEFAULT = 10_000  # Kafka's defaults (KIP-601)
SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_DEFAULT = 30_000
SETUP_TIMEOUT_JITTER = 0.2  # KIP-601's
BOOTSTRAP_STAGGER_S = 1.0  # the next bootstrap server is dialled after this without an answer

log = logging.getLogger("epochlog.cluster")


def _retrieve(task: asyncio.Task[Connection]) -> None:
    if not task.cancelled():
        task.exception()


async def _drop_others(attempts: dict[asyncio.Task[Connection], str],
                       kept: Connection | None) -> None:
    """Cancel the attempts under way, and close every connection they set up but `kept`."""
    for task in attempts:
        task.cancel()
    await asyncio.gather(*attempts, return_exceptions=True)
    others = [t.result() for t in attempts if not t.cancelled() and not t.exception()]
    await asyncio.gather(*(c.close() for c in others if c is not kept), return_exceptions=True)


class NodeNotReady(ConnectionError):
    """The broker's last connection attempt failed and its reconnect backoff has not passed."""


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


Bootstrap = str | Sequence[str]


def parse_bootstrap(bootstrap: Bootstrap) -> list[tuple[str, int]]:
    """HOST:PORT items from a comma-separated string or a list of them (each may itself hold
    commas), as Kafka's clients take `bootstrap_servers`. IPv6 hosts go in brackets."""
    items = [bootstrap] if isinstance(bootstrap, str) else list(bootstrap)
    if not all(isinstance(item, str) for item in items):
        raise ValueError(f"bootstrap_servers must be a string or a list of strings, not "
                         f"{bootstrap!r}")
    out = []
    for item in (part.strip() for text in items for part in text.split(",")):
        if not item:
            continue
        host, _, port = item.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"bootstrap server {item!r} is not HOST:PORT")
        out.append((host, int(port)))
    if not out:
        raise ValueError(f"bootstrap_servers names no server: {bootstrap!r}")
    return out


class ClusterClient:
    def __init__(self, bootstrap: Bootstrap, *, client_id: str = "epochlog",
                 request_timeout_ms: int = 30_000,
                 retry_backoff_ms: int = RETRY_BACKOFF_MS_DEFAULT,
                 reconnect_backoff_ms: int = RECONNECT_BACKOFF_MS_DEFAULT,
                 reconnect_backoff_max_ms: int = RECONNECT_BACKOFF_MAX_MS_DEFAULT,
                 metadata_max_age_ms: int = METADATA_MAX_AGE_MS_DEFAULT,
                 socket_connection_setup_timeout_ms: int =
                 SOCKET_CONNECTION_SETUP_TIMEOUT_MS_DEFAULT,
                 socket_connection_setup_timeout_max_ms: int =
                 SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_DEFAULT,
                 in_flight_max: int | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        if not 0 < socket_connection_setup_timeout_ms <= socket_connection_setup_timeout_max_ms:
            raise ValueError("socket_connection_setup_timeout_ms must be positive and at most "
                             f"socket_connection_setup_timeout_max_ms, not "
                             f"{socket_connection_setup_timeout_ms} and "
                             f"{socket_connection_setup_timeout_max_ms}")
        self.bootstrap = parse_bootstrap(bootstrap)
        self.ssl_context = ssl_context  # every connection is TLS when set (security.py)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.reconnect_backoff_ms = reconnect_backoff_ms
        self.reconnect_backoff_max_ms = reconnect_backoff_max_ms
        self.metadata_max_age_ms = metadata_max_age_ms
        self.setup_timeout_ms = socket_connection_setup_timeout_ms
        self.setup_timeout_max_ms = socket_connection_setup_timeout_max_ms
        self.in_flight_max = in_flight_max
        self._dials: dict[int, asyncio.Task[Connection]] = {}  # attempts under way, per node
        self._closed = False  # once closed, no new attempt starts (none is left behind)
        # node id -> (consecutive connect failures, monotonic time before which we do not dial)
        self._node_backoff: dict[int, tuple[int, float]] = {}
        self._update_requested = False
        self._last_refresh = -float("inf")
        self._next_periodic = 0.0
        self.refreshes = 0  # Metadata requests answered, for tests and counters
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
        self._closed = True
        dials = list(self._dials.values())
        for dial in dials:
            dial.cancel()
        await asyncio.gather(*dials, return_exceptions=True)
        conns = list(self._conns.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        self._conns.clear()
        self._bootstrap_conn = None
        await asyncio.gather(*(c.close() for c in conns), return_exceptions=True)

    async def _connect(self, host: str, port: int, failures: int = 0) -> Connection:
        """A connection set up within the setup timeout for a broker that failed `failures`
        times in a row: KIP-601's, doubling per failure up to the maximum, with jitter."""
        extra = {} if self.in_flight_max is None else {"in_flight_max": self.in_flight_max}
        setup_ms = min(self.setup_timeout_ms * 2 ** min(failures, 16), self.setup_timeout_max_ms)
        setup_ms *= 1 + random.uniform(-SETUP_TIMEOUT_JITTER, SETUP_TIMEOUT_JITTER)
        return await Connection(host, port, client_id=self.client_id,
                                request_timeout_ms=self.request_timeout_ms,
                                connect_timeout_ms=int(setup_ms), ssl_context=self.ssl_context,
                                **extra).connect()

    async def any_connection(self) -> Connection:
        """A connection to some broker: a known one if we have any, else a bootstrap server."""
        for conn in self._conns.values():
            if not conn.closed:
                return conn
        if self._bootstrap_conn is not None and not self._bootstrap_conn.closed:
            return self._bootstrap_conn
        candidates = list(self.bootstrap)  # then brokers learnt since, if bootstrap ones died
        candidates += [(b.host, b.port) for b in self.brokers.values()
                       if (b.host, b.port) not in candidates]
        self._bootstrap_conn = await self._first_set_up(candidates)
        return self._bootstrap_conn

    async def _first_set_up(self, candidates: list[tuple[str, int]]) -> Connection:
        """The first connection set up among candidates, dialled in order, the next one started
        as soon as the previous failed or after BOOTSTRAP_STAGGER_S without an answer (RFC
        8305's "happy eyeballs", for brokers): a frozen broker first in the list costs a second,
        not its setup timeout. Attempts still under way when one wins are cancelled."""
        attempts: dict[asyncio.Task[Connection], str] = {}
        waiting = iter(candidates)
        loop = asyncio.get_running_loop()
        winner: Connection | None = None
        try:
            while winner is None:
                nxt = next(waiting, None)
                if nxt is not None:
                    attempts[loop.create_task(self._connect(*nxt))] = f"{nxt[0]}:{nxt[1]}"
                under_way = [t for t in attempts if not t.done()]
                if not under_way:
                    errors = [f"{address}: {t.exception()}" for t, address in attempts.items()]
                    raise ConnectionError("no broker answered: " + "; ".join(errors))
                await asyncio.wait(under_way, return_when=asyncio.FIRST_COMPLETED,
                                   timeout=BOOTSTRAP_STAGGER_S if nxt is not None else None)
                for task in (t for t in attempts if t.done()):
                    exc = task.exception()
                    if exc is None:
                        winner = winner or task.result()
                    elif not isinstance(exc, (TimeoutError, OSError)):
                        raise exc  # not about reaching the broker (NoCommonVersion...)
            return winner
        finally:
            await _drop_others(attempts, winner)

    async def idle_connection(self) -> Connection:
        """A connection with nothing in flight if one is open, else any_connection()'s. For
        Metadata and FindCoordinator: a broker answers one connection's requests in order, so a
        question sent behind a long-polling Fetch waits for it (up to fetch_max_wait_ms; a
        group leader's assignment measurably waited so). Kafka's clients pick their "least
        loaded node" for the same reason."""
        conns = list(self._conns.values())
        if self._bootstrap_conn is not None:
            conns.append(self._bootstrap_conn)
        for conn in conns:
            if not conn.closed and conn.in_flight == 0:
                return conn
        return await self.any_connection()

    def connected(self, node_id: int) -> bool:
        """Whether a connection to node_id is set up and open."""
        return self.open_connection(node_id) is not None

    def open_connection(self, node_id: int) -> Connection | None:
        """The connection to node_id if one is set up and open; never dials."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and not conn.closed else None

    async def connection(self, node_id: int) -> Connection:
        """The connection to node_id: the open one, else the attempt under way, else a new
        attempt. NodeNotReady during the node's reconnect backoff; ConnectionError if the
        attempt fails."""
        conn = self._conns.get(node_id)
        if conn is not None and not conn.closed:
            return conn
        dial = self._dials.get(node_id)
        if dial is None:
            failures, not_before = self._node_backoff.get(node_id, (0, 0.0))
            if time.monotonic() < not_before:
                raise NodeNotReady(f"broker {node_id}: reconnect backoff after {failures} "
                                   "failed attempt(s)")
            if node_id not in self.brokers:
                await self.refresh()
            # the refresh let others run: one of them may have dialled meanwhile
            dial = self._dials.get(node_id) or self._start_dial(node_id)
        # shield: a caller that gives up does not end the attempt others may be waiting on
        return await asyncio.shield(dial)

    def dial(self, node_id: int) -> asyncio.Task[Connection] | None:
        """Start setting up a connection to node_id in the background, or join the attempt
        under way; None if it is connected already, or in its reconnect backoff (see
        reconnect_in()). The attempt's outcome is the connection() a later call returns."""
        if self.connected(node_id) or self._closed:
            return None
        dial = self._dials.get(node_id)
        if dial is None and self.reconnect_in(node_id) <= 0:
            dial = self._start_dial(node_id)
        return dial

    def reconnect_in(self, node_id: int) -> float:
        """Seconds until node_id may be dialled again (0: now)."""
        return max(0.0, self._node_backoff.get(node_id, (0, 0.0))[1] - time.monotonic())

    def _start_dial(self, node_id: int) -> asyncio.Task[Connection]:
        if self._closed:  # an attempt started now would outlive close() and its loop
            raise ConnectionError(f"broker {node_id}: the client is closed")
        dial = asyncio.get_running_loop().create_task(self._dial(node_id),
                                                      name=f"epochlog-dial-{node_id}")
        self._dials[node_id] = dial
        dial.add_done_callback(_retrieve)  # a failure is node_failed()'s; awaiting is optional
        return dial

    async def _dial(self, node_id: int) -> Connection:
        try:
            address = self.brokers.get(node_id)
            if address is None:  # backed off too: a background dialler must not spin on it
                self.node_failed(node_id)
                raise ConnectionError(f"broker {node_id} is not in the cluster's metadata")
            failures = self._node_backoff.get(node_id, (0, 0.0))[0]
            try:
                conn = await self._connect(address.host, address.port, failures)
            except (TimeoutError, OSError) as exc:
                self.node_failed(node_id)
                raise ConnectionError(f"broker {node_id} at {address.host}:{address.port}: "
                                      f"{exc or type(exc).__name__}") from exc
            self._node_backoff.pop(node_id, None)
            self._conns[node_id] = conn
            return conn
        finally:
            try:
                this = asyncio.current_task()
            except RuntimeError:  # closed with its loop: nothing left to tidy for anyone
                this = None
            if this is not None and self._dials.get(node_id) is this:
                del self._dials[node_id]

    def node_failed(self, node_id: int) -> None:
        """A connection to node_id failed: back off before dialling again, and ask for metadata
        (the broker may be gone or no longer lead what we think)."""
        failures = self._node_backoff.get(node_id, (0, 0.0))[0] + 1
        delay_ms = min(self.reconnect_backoff_ms * 2 ** min(failures - 1, 16),
                       self.reconnect_backoff_max_ms)
        delay_ms *= 1 + random.uniform(-METADATA_AGE_JITTER, METADATA_AGE_JITTER)
        self._node_backoff[node_id] = (failures, time.monotonic() + delay_ms / 1000)
        if failures == 1:
            log.info("broker %d unreachable; reconnecting with backoff", node_id)
        self.request_update()

    def node_ready(self, node_id: int) -> bool:
        """Whether a request to node_id may be tried now (connected, or past its backoff)."""
        return self.connected(node_id) or self.reconnect_in(node_id) <= 0

    # ---------------------------------------------------------------- metadata freshness
    def request_update(self) -> None:
        """Ask for a metadata refresh; maybe_update() sends it once the backoff allows."""
        self._update_requested = True

    @property
    def update_requested(self) -> bool:
        return self._update_requested

    def update_due_in(self) -> float:
        """Seconds until maybe_update() would refresh (0: now)."""
        now_s = time.monotonic()
        periodic = self._next_periodic - now_s
        if self._update_requested:
            backoff_end = self._last_refresh + self.retry_backoff_ms / 1000
            return max(0.0, min(periodic, backoff_end - now_s))
        return max(0.0, periodic)

    async def maybe_update(self, topics: list[str] | None = None) -> bool:
        """Refresh when one was requested and the backoff has passed, or when the metadata is
        older than metadata_max_age_ms (with jitter). Whether a refresh was made."""
        if self.update_due_in() > 0:
            return False
        await self.refresh(topics)
        return True

    async def request(self, conn: Connection, key: int, message: Message) -> Any:
        api = APIS[key]
        return await conn.request(api, conn.version_for(api), message)

    async def request_broker(self, node_id: int, key: int, message: Message) -> Any:
        return await self.request(await self.connection(node_id), key, message)

    async def find_coordinator(self, key: str, key_type: int) -> tuple[int, int]:
        """FindCoordinator for a group (key_type 0) or a transactional id (1), asked of an
        idle connection: (error code, coordinator's node id), the node added to `brokers`."""
        conn = await self.idle_connection()
        api = APIS[ApiKey.FIND_COORDINATOR]
        version = conn.version_for(api)
        answer: FindCoordinatorResponse = await conn.request(api, version, FindCoordinatorRequest(
            key=key, key_type=key_type, coordinator_keys=[key]))
        if version >= 4:
            c = answer.coordinators[0]
            code, node, host, port = c.error_code, c.node_id, c.host, c.port
        else:
            code, node, host, port = answer.error_code, answer.node_id, answer.host, answer.port
        if not code and node not in self.brokers:
            self.brokers[node] = BrokerAddress(node, host, port, None)
        return code, node

    async def refresh(self, topics: list[str] | None = None, auto_create: bool = False
                      ) -> MetadataResponse:
        """Metadata for topics (None: all topics); merges into what is known."""
        request = MetadataRequest(
            topics=None if topics is None else [MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=auto_create)
        self._last_refresh = time.monotonic()  # a failed attempt also waits out the backoff
        answer: MetadataResponse = await self.request(await self.idle_connection(), 3, request)
        self._update_requested = False
        self.refreshes += 1
        jitter = 1 - random.uniform(0, METADATA_AGE_JITTER)
        self._next_periodic = self._last_refresh + self.metadata_max_age_ms / 1000 * jitter
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

    def learn_leader(self, topic: str, partition: int, leader: int, leader_epoch: int,
                     endpoint: BrokerAddress | None) -> bool:
        """KIP-951: a broker's answer named the partition's current leader (and its endpoint).
        Taken when it is newer than what we know (a higher leader epoch) and we can reach it;
        whether it was taken. The rest of the partition's view stays until the next refresh."""
        known = self.partitions.get((topic, partition))
        if known is None or leader < 0 or leader_epoch <= known.leader_epoch:
            return False
        if leader not in self.brokers:
            if endpoint is None or endpoint.node_id != leader:
                return False
            self.brokers[leader] = endpoint
        self.partitions[(topic, partition)] = replace(known, leader=leader,
                                                      leader_epoch=leader_epoch)
        return True

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
                raise error_for(code or ErrorCode.LEADER_NOT_AVAILABLE, f"topic {topic}")
            await asyncio.sleep(0.1)
