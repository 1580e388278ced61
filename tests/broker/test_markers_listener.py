"""WriteTxnMarkers is for brokers only: with an INTERNAL listener (the one transaction
coordinators send markers on), a WriteTxnMarkers arriving on the clients' listener is refused
with CLUSTER_AUTHORIZATION_FAILED and nothing is written; transactions still commit, their
markers going over INTERNAL."""

from __future__ import annotations

import asyncio
from pathlib import Path

from epochlog import Producer
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from epochlog.protocol.apis.write_txn_markers import (
    WritableTxnMarker,
    WritableTxnMarkerTopic,
    WriteTxnMarkersRequest,
)
from epochlog.protocol.error_codes import ErrorCode
from epochlog.testing import Cluster
from tests.interop.test_transactions_interop import consume_all

TOPIC = "markers-listener"


def test_markers_from_a_client_are_refused_and_transactions_still_commit(tmp_path: Path
                                                                         ) -> None:
    with Cluster(3, base_dir=tmp_path, internal_listener=True,
                 settings={"transaction_state_log_num_partitions": 3}) as cluster:
        cluster.create_topic(TOPIC, partitions=1, replication_factor=3)
        leader = cluster.wait_fully_replicated(TOPIC)[0].leader_id
        forged = WriteTxnMarkersRequest(markers=[WritableTxnMarker(
            producer_id=1, producer_epoch=0, transaction_result=True, coordinator_epoch=0,
            topics=[WritableTxnMarkerTopic(name=TOPIC, partition_indexes=[0])])])
        answer = cluster.node(leader).call(ApiKey.WRITE_TXN_MARKERS, forged, version=1)
        assert answer.markers[0].topics[0].partitions[0].error_code == \
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED, answer

        async def commit() -> None:
            async with Producer(bootstrap_servers=cluster.bootstrap_servers,
                                transactional_id="over-internal") as p:
                await p.init_transactions()
                async with p.transaction():
                    await p.send(TOPIC, b"committed")

        asyncio.run(commit())
        assert consume_all(cluster, TOPIC, 1, "read_committed") == [b"committed"]
        end = cluster.node(leader).call(ApiKey.LIST_OFFSETS, _latest(), version=1)
        assert end.topics[0].partitions[0].offset == 2  # the record and its one marker


def _latest() -> ListOffsetsRequest:
    return ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(
        name=TOPIC, partitions=[ListOffsetsPartition(partition_index=0, timestamp=-1)])])
