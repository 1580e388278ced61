"""KIP-320 on real processes: a consumer whose position lies past the point where the leader's log
now diverges never reads past it silently.

Two ways to make a log lose records a consumer has already read, then write new records at those
offsets before the consumer's next fetch:
- storage: a stopped single-replica broker's log is cut back with broker.storage.Log (what an
  unclean election does to the records of a lost leader); restarted, the broker leads at a new
  leader epoch from the cut;
- replication (issue 6's scenario): replication factor 2 with unclean election enabled; the
  follower is stopped, the leader takes more records (acks=1) that the consumer reads, the
  leader is killed, the out-of-date follower comes back and is elected uncleanly.
Three consumers read each time, one per auto_offset_reset: "none" must raise LogTruncationError
with the exact divergent (offset, leader epoch); "earliest" and "latest" must land exactly on the
divergent offset and return the new records, nothing skipped and nothing from before.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from epochlog.broker.storage.config import LogConfig
from epochlog.broker.storage.log import Log
from epochlog.client import Consumer, LogTruncationError, TopicPartition
from epochlog.client.types import ConsumerRecord
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from epochlog.protocol.records import build_batch
from tests.broker.cluster import WAIT_S, BrokerChild, Cluster

SESSION_MS = 3000
CONTROLLER_ARGS = ["--set", f"broker_session_timeout_ms={SESSION_MS}"]
BROKER_ARGS = ["--set", f"broker_heartbeat_interval_ms={SESSION_MS // 4}"]
MODES = ("none", "earliest", "latest")


def write(broker: BrokerChild, topic: str, values: list[bytes], acks: int = -1) -> None:
    """One batch to the partition's leader, which must take it."""
    answer = broker.call(ApiKey.PRODUCE, ProduceRequest(acks=acks, timeout_ms=10_000, topic_data=[
        TopicProduceData(name=topic, partition_data=[PartitionProduceData(
            index=0, records=build_batch([(None, v, None, None) for v in values]))])]))
    code = answer.responses[0].partition_responses[0].error_code
    assert code == 0, f"produce to {topic} on broker {broker.broker_id}: error {code}"


async def read(consumer: Consumer, count: int) -> list[ConsumerRecord]:
    got: list[ConsumerRecord] = []
    deadline = asyncio.get_running_loop().time() + WAIT_S
    while len(got) < count and asyncio.get_running_loop().time() < deadline:
        got += await consumer.poll(timeout_ms=500, max_records=count - len(got))
    assert len(got) == count, f"got {len(got)} of {count}"
    return got


async def check_after_truncation(consumers: dict[str, Consumer], tp: TopicPartition,
                                 divergence: tuple[int, int], new: list[bytes],
                                 new_epoch: int) -> None:
    offset, _ = divergence
    with pytest.raises(LogTruncationError) as raised:
        deadline = asyncio.get_running_loop().time() + WAIT_S
        while asyncio.get_running_loop().time() < deadline:
            assert await consumers["none"].poll(timeout_ms=500) == []
    assert raised.value.divergent_offsets == {tp: divergence}
    for mode in ("earliest", "latest"):
        got = await read(consumers[mode], len(new))
        assert [(r.offset, r.value, r.leader_epoch) for r in got] == [
            (offset + i, v, new_epoch) for i, v in enumerate(new)], mode
        assert consumers[mode].next_offsets() == {tp: (offset + len(new), new_epoch)}
        assert consumers[mode].metrics()["truncations_detected"] == 1
    # "none" goes on where the user says, from the divergence point
    consumers["none"].seek(tp, *divergence)
    assert [r.value for r in await read(consumers["none"], len(new))] == new


async def open_consumers(bootstrap: str, tp: TopicPartition) -> dict[str, Consumer]:
    consumers = {}
    for mode in MODES:
        c = Consumer(bootstrap, auto_offset_reset=mode, retry_backoff_ms=50,
                     metadata_max_age_ms=1000)
        await c.start()
        c.assign([tp])
        c.seek(tp, 0)  # all read from the start; the mode matters at the truncation
        consumers[mode] = c
    return consumers


async def test_truncated_log_of_a_restarted_broker(tmp_path: Path) -> None:
    topic, tp = "cut", TopicPartition("cut", 0)
    with Cluster(tmp_path, brokers=1) as cluster:
        cluster.create_topic(topic, partitions=1, replication_factor=1)
        broker = cluster.broker(1)
        _, e0 = cluster.leaders(topic)[0]
        for i in range(10):  # a batch each: truncation removes whole batches
            write(broker, topic, [b"old%d" % i])
        consumers = await open_consumers(cluster.bootstrap, tp)
        try:
            for c in consumers.values():
                assert [r.offset for r in await read(c, 10)] == list(range(10))
            assert broker.stop() == 0
            log = Log.open(str(Path(broker.data_dir) / f"{topic}-0"), LogConfig(),
                           lambda: int(time.time() * 1000), clean_shutdown=True)
            log.truncate_to(6)
            log.flush()
            log.close()
            broker.start()
            broker.wait_started()
            _, e1 = cluster.wait_leaders(topic, 1)[0]
            assert e1 > e0
            new = [b"new%d" % i for i in range(8)]
            write(broker, topic, new)
            await check_after_truncation(consumers, tp, (6, e0), new, e1)
        finally:
            for c in consumers.values():
                await c.close()


async def test_unclean_election_truncates_what_the_consumer_read(tmp_path: Path) -> None:
    topic, tp = "unclean", TopicPartition("unclean", 0)
    with Cluster(tmp_path, brokers=2, controller_args=CONTROLLER_ARGS,
                 broker_args=BROKER_ARGS) as cluster:
        cluster.create_topic(topic, partitions=1, replication_factor=2,
                             **{"unclean.leader.election.enable": "true",
                                "min.insync.replicas": "1"})
        leader, _ = cluster.leaders(topic)[0]
        follower = 3 - leader
        write(cluster.broker(leader), topic, [b"both%d" % i for i in range(5)])  # acks=all
        assert cluster.broker(follower).stop() == 0  # controlled: leaves the ISR
        write(cluster.broker(leader), topic, [b"lost%d" % i for i in range(10)], acks=1)
        consumers = await open_consumers(cluster.bootstrap, tp)
        try:
            for c in consumers.values():
                got = await read(c, 15)
                assert [r.offset for r in got] == list(range(15))
            epoch_read = got[-1].leader_epoch
            follower_epoch = got[4].leader_epoch  # the epoch of the follower's last record
            cluster.broker(leader).stop(signal.SIGKILL)
            cluster.broker(follower).start()
            cluster.broker(follower).wait_started()
            new_leader, e2 = wait_leader(cluster, topic, follower)
            assert new_leader == follower and e2 > epoch_read
            new = [b"new%d" % i for i in range(3)]
            write(cluster.broker(follower), topic, new, acks=1)
            # the follower's log ends at 5: the first offset the consumer read that is gone
            await check_after_truncation(consumers, tp, (5, follower_epoch), new, e2)
        finally:
            for c in consumers.values():
                await c.close()


def wait_leader(cluster: Cluster, topic: str, broker_id: int) -> tuple[int, int]:
    """(leader, epoch) once broker_id says it leads the partition (bounded)."""
    deadline = time.monotonic() + WAIT_S * 2
    while time.monotonic() < deadline:
        found = cluster.metadata(broker_id, [topic]).topics[0].partitions
        if found and found[0].leader_id == broker_id and cluster.broker(broker_id).has_line(
                f"{topic}-0: became LEADER at leader epoch {found[0].leader_epoch}"):
            return broker_id, found[0].leader_epoch
        time.sleep(0.1)
    raise AssertionError(f"broker {broker_id} did not become the leader of {topic}")
