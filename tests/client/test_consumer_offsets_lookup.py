"""The Consumer's look-ups of the logs' offsets, as aiokafka's and kafka-python's consumers
offer them: `beginning_offsets`, `end_offsets` and `offsets_for_times`, against a real broker.

The log: ten records with timestamps 1,000..10,000 ms, the first three deleted (DeleteRecords),
then an open transaction's record. A read_uncommitted consumer's end is the high watermark; a
read_committed one's is the last stable offset (the open transaction's first record), as Kafka's
endOffsets. A timestamp between two records finds the later; one past every record finds None."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from epochlog.client import Admin, Consumer, Producer, TopicPartition
from epochlog.testing import Cluster

TOPIC = "looked-up"
TP = TopicPartition(TOPIC, 0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    with Cluster(1, base_dir=tmp_path,
                 settings={"transaction.state.log.replication.factor": 1}) as c:
        c.create_topic(TOPIC, partitions=1, replication_factor=1)
        yield c


async def test_beginning_end_and_offsets_for_times(cluster: Cluster) -> None:
    bootstrap = cluster.bootstrap_servers
    async with Producer(bootstrap_servers=bootstrap, acks="all") as plain:
        for i in range(10):
            await plain.send(TOPIC, b"v%d" % i, partition=0, timestamp_ms=(i + 1) * 1000)
        await plain.flush()
    async with Admin(bootstrap) as admin:
        await admin.delete_records({TP: 3})
    async with Producer(bootstrap_servers=bootstrap, transactional_id="lookup-open") as txn:
        await txn.init_transactions()
        txn.begin_transaction()
        await (await txn.send(TOPIC, b"open", partition=0))  # written, not committed

        async with Consumer(bootstrap) as uncommitted, \
                Consumer(bootstrap, isolation_level="read_committed") as committed:
            assert await uncommitted.beginning_offsets([TP]) == {TP: 3}
            assert await uncommitted.end_offsets([TP]) == {TP: 11}  # the high watermark
            assert await committed.end_offsets([TP]) == {TP: 10}  # the last stable offset
            found = await uncommitted.offsets_for_times({TP: 5_500})
            assert found[TP] is not None and (found[TP].offset, found[TP].timestamp) == \
                (5, 6_000), found
            assert found[TP].leader_epoch >= 0, found
            year_2096_ms = 4_000_000_000_000  # later than every record, the open one too
            assert await uncommitted.offsets_for_times({TP: year_2096_ms}) == {TP: None}
            with pytest.raises(ValueError, match="must not be negative"):
                await uncommitted.offsets_for_times({TP: -1})
        await txn.abort_transaction()
