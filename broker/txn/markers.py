"""`MarkerWriter`: the transaction coordinator's second phase, the COMMIT or ABORT markers
written to every partition of a transaction (WriteTxnMarkers to each partition's leader,
handlers/write_txn_markers.py), retried until each partition holds its marker.

A partition is done when its leader answers NONE, or when it answers INVALID_PRODUCER_EPOCH (a
marker of a later producer epoch is already there: this one has nothing left to close), or when
the topic is gone from the metadata (deleted; Kafka drops it too). TRANSACTION_COORDINATOR_FENCED
means a newer coordinator wrote there: this one stops, its shard is stale. Everything else (no
leader yet, a leader that moved, too few replicas, a timeout, a lost connection) is tried again,
backing off from RETRY_FIRST_MS to RETRY_MAX_MS, for as long as the coordinator still leads the
transaction's state partition (`still_leading`); a WARNING says so now and then.

Leaders are reached at their INTERNAL listener, as follower fetchers reach theirs, one connection
per broker (ourselves included: a partition we lead gets its marker the same way).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from epochlog.client.connection import Connection, NoCommonVersion
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.write_txn_markers import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.registry import APIS

from ..config import INTERNAL_LISTENER

if TYPE_CHECKING:
    from ..metadata_cache import MetadataCache

log = logging.getLogger("epochlog.broker")
E = ErrorCode

RETRY_FIRST_MS = 50
RETRY_MAX_MS = 1000
WARN_EVERY_ATTEMPTS = 60
REQUEST_TIMEOUT_MS = 40_000  # above the leader's own wait for replication (30 s)
_API = APIS[ApiKey.WRITE_TXN_MARKERS]

TopicPartition = tuple[str, int]


class CoordinatorFenced(Exception):
    """A partition holds a marker from a newer coordinator of this transactional id."""


class MarkerWriter:
    def __init__(self, broker_id: int, metadata: MetadataCache) -> None:
        self.broker_id = broker_id
        self.metadata = metadata  # where each partition's leader is, and its INTERNAL endpoint
        self._conns: dict[int, Connection] = {}
        self._connecting = asyncio.Lock()  # one connection per broker, however many callers

    async def write(self, transactional_id: str, producer_id: int, producer_epoch: int,
                    commit: bool, coordinator_epoch: int, partitions: Iterable[TopicPartition],
                    still_leading: Callable[[], bool]) -> bool:
        """Write the markers; True once every partition is done, False if the coordinator
        stopped leading first. CoordinatorFenced if a newer coordinator wrote there."""
        left = set(partitions)
        delay_ms, attempts = RETRY_FIRST_MS, 0
        while left:
            if not still_leading():
                return False
            sends = [self._send(leader_id, tps, producer_id, producer_epoch, commit,
                                coordinator_epoch)
                     for leader_id, tps in self._by_leader(left).items()]
            for done in await asyncio.gather(*sends):  # every leader at once
                left -= done
            if not left:
                break
            attempts += 1
            if attempts % WARN_EVERY_ATTEMPTS == 0:
                log.warning("transactional id %s: %s markers still missing on %s after %d "
                            "attempts", transactional_id, "COMMIT" if commit else "ABORT",
                            sorted(left), attempts)
            await asyncio.sleep(delay_ms / 1000)
            delay_ms = min(delay_ms * 2, RETRY_MAX_MS)
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

    async def _send(self, leader_id: int, tps: list[TopicPartition], producer_id: int,
                    producer_epoch: int, commit: bool, coordinator_epoch: int
                    ) -> set[TopicPartition]:
        """The partitions that are done after one WriteTxnMarkers to leader_id."""
        by_topic: dict[str, list[int]] = {}
        for topic, index in tps:
            by_topic.setdefault(topic, []).append(index)
        request = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=producer_id, producer_epoch=producer_epoch, transaction_result=commit,
            coordinator_epoch=coordinator_epoch,
            topics=[WritableTxnMarkerTopic(name=t, partition_indexes=ps)
                    for t, ps in by_topic.items()])])
        try:
            conn = await self._connection(leader_id)
            if conn is None:
                return set()
            answer = await conn.request(_API, conn.version_for(_API), request)
        except (OSError, TimeoutError, NoCommonVersion) as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s", leader_id, exc)
            await self._drop(leader_id)
            return set()
        done: set[TopicPartition] = set()
        for result in answer.markers:
            for topic in result.topics:
                for p in topic.partitions:
                    tp = (topic.name, p.partition_index)
                    if p.error_code in (0, E.INVALID_PRODUCER_EPOCH):
                        done.add(tp)
                    elif p.error_code == E.TRANSACTION_COORDINATOR_FENCED:
                        raise CoordinatorFenced(f"{tp[0]}-{tp[1]}: a newer coordinator's "
                                                "marker is there")
        return done

    async def _connection(self, broker_id: int) -> Connection | None:
        async with self._connecting:
            conn = self._conns.get(broker_id)
            if conn is not None and not conn.closed:
                return conn
            info = self.metadata.brokers.get(broker_id)
            if info is None:
                return None
            host, port = info.endpoint(INTERNAL_LISTENER)
            conn = Connection(host, port, client_id=f"epochlog-broker-{self.broker_id}-txn",
                              request_timeout_ms=REQUEST_TIMEOUT_MS)
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
