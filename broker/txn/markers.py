"""`MarkerWriter`: the transaction coordinator's second phase, the COMMIT or ABORT markers
written to every partition of a transaction (WriteTxnMarkers to each partition's leader,
handlers/write_txn_markers.py), retried until each partition holds its marker.

The rules are markers_left.py's (sans-IO: which partitions are done, a newer coordinator's marker
stopping us, the backoff between rounds, the WARNING now and then); this module moves them over
the wire: each round, one request to each leader of the partitions left, all at once, for as
long as the coordinator still leads the transaction's state partition (`still_leading`). A
partition whose topic is gone from the metadata (deleted) is done too (Kafka drops it as well).

Leaders are reached at their INTERNAL listener, as follower fetchers reach theirs, one connection
per broker (ourselves included: a partition we lead gets its marker the same way).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from epochlog.client.connection import Connection, NoCommonVersion
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.write_txn_markers import WriteTxnMarkersRequest, WriteTxnMarkersResponse
from epochlog.protocol.registry import APIS

from .markers_left import MarkersLeft

if TYPE_CHECKING:
    from ..metadata_cache import MetadataCache

log = logging.getLogger("epochlog.broker")

REQUEST_TIMEOUT_MS = 40_000  # above the leader's own wait for replication (30 s)
_API = APIS[ApiKey.WRITE_TXN_MARKERS]

TopicPartition = tuple[str, int]


class CoordinatorFenced(Exception):
    """A partition holds a marker from a newer coordinator of this transactional id."""


class MarkerWriter:
    def __init__(self, broker_id: int, metadata: MetadataCache, listener: str,
                 tls: ssl.SSLContext | None = None) -> None:
        self.broker_id = broker_id
        self.metadata = metadata  # where each partition's leader is, and its endpoints
        self.listener = listener  # the inter-broker listener: markers go there
        self.tls = tls  # ... over TLS when it is SSL
        self._conns: dict[int, Connection] = {}
        self._connecting = asyncio.Lock()  # one connection per broker, however many callers

    async def write(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int, partitions: Iterable[TopicPartition],
                    still_leading: Callable[[], bool]) -> bool:
        """Write the markers; True once every partition is done, False if the coordinator
        stopped leading first. CoordinatorFenced if a newer coordinator wrote there."""
        markers = MarkersLeft(transactional_id, producer_id, producer_epoch, commit,
                              coordinator_epoch, partitions)
        while markers.left:
            if not still_leading():
                return False
            sends = [self._send(leader_id, markers.request(tps))
                     for leader_id, tps in self._by_leader(markers.left).items()]
            for answer in await asyncio.gather(*sends):  # every leader at once
                markers.answered(answer)
            if markers.fenced is not None:
                raise CoordinatorFenced(markers.fenced)
            if markers.left:
                await asyncio.sleep(markers.retry_after_ms() / 1000)
        return True

    def _by_leader(self, left: set[TopicPartition]) -> dict[int, list[TopicPartition]]:
        md = self.metadata
        out: dict[int, list[TopicPartition]] = {}
        for tp in sorted(left):
            if not md.has_topic(tp[0]):
                log.info("%s-%d: no marker written, the topic is gone", *tp)
                left.discard(tp)
                continue
            info = md.partition(*tp)
            if info is not None and info.leader >= 0 and info.leader in md.brokers:
                out.setdefault(info.leader, []).append(tp)
        return out

    async def _send(self, leader_id: int, request: WriteTxnMarkersRequest
                    ) -> WriteTxnMarkersResponse | None:
        """One WriteTxnMarkers to leader_id: its answer, or None if none came."""
        try:
            conn = await self._connection(leader_id)
            if conn is None:
                return None
            answer: WriteTxnMarkersResponse = await conn.request(
                _API, conn.version_for(_API), request)
        except (OSError, TimeoutError, NoCommonVersion) as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader_id, exc)
            await self._drop(leader_id)
            return None
        return answer

    async def _connection(self, broker_id: int) -> Connection | None:
        async with self._connecting:
            conn = self._conns.get(broker_id)
            if conn is not None and not conn.closed:
                return conn
            info = self.metadata.brokers.get(broker_id)
            if info is None:
                return None
            host, port = info.endpoint(self.listener)
            conn = Connection(host, port, client_id=f"epochlog-broker-{self.broker_id}-txn",
                              request_timeout_ms=REQUEST_TIMEOUT_MS, ssl_context=self.tls)
            await conn.connect()
            self._conns[broker_id] = conn
            return conn

    async def _drop(self, broker_id: int) -> None:
        conn = self._conns.pop(broker_id, None)
        if conn is not None:
            await conn.close()

    async def close(self) -> None:
        conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            await conn.close()
