"""`epochlog controller` as a real process, with stand-in brokers over TCP on 127.0.0.1.

Checks KIP-380 end to end: generations rise (also across controller restarts, SIGTERM and
SIGKILL), every control request carries the controller epoch and the destination's current
broker epoch, a request refused as STALE_BROKER_EPOCH is not resent, a ControlledShutdown from an
old generation is refused; and that bad settings and bad bytes are refused cleanly.
"""

from __future__ import annotations

import asyncio
import signal
import struct
import sys
import urllib.request

import pytest

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.controlled_shutdown import ControlledShutdownRequest
from epochlog.protocol.apis.create_topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from epochlog.protocol.apis.describe_configs import DescribeConfigsRequest, DescribeConfigsResource
from epochlog.protocol.apis.metadata import MetadataRequest
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.registry import APIS

from .helpers import WAIT_S, ControllerProcess, FakeBroker, free_port

# Generations that never end by themselves during a test: no expiry, and no connection-loss
# grace either (these tests close and reopen connections and restart the controller freely).
LONG_SESSION = ("--broker-session-timeout-ms", "60000",
                "--set", "broker_connection_loss_grace_ms=60000")


async def brokers(n: int) -> list[FakeBroker]:
    return [await FakeBroker(i, "abc"[(i - 1) % 3]).start() for i in range(1, n + 1)]


async def create_topic(conn, name: str, partitions: int = 1, rf: int = -1,
                       assignment: list[list[int]] | None = None, **configs: str):
    answer = await conn.request(APIS[ApiKey.CREATE_TOPICS], 7, CreateTopicsRequest(
        topics=[CreatableTopic(
            name=name, num_partitions=partitions, replication_factor=rf,
            assignments=[CreatableReplicaAssignment(partition_index=i, broker_ids=r)
                         for i, r in enumerate(assignment or [])],
            configs=[CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])]))
    return answer.topics[0]


async def metadata(conn):
    return await conn.request(APIS[ApiKey.METADATA], 12, MetadataRequest(topics=None))


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as r:
        return r.read().decode()


def lai_for(topic: str, epoch: int):
    return lambda r: (r.api_key == ApiKey.LEADER_AND_ISR and r.message.broker_epoch == epoch
                      and any(t.topic_name == topic for t in r.message.topic_states))


async def test_generations_rise_and_control_requests_carry_both_epochs(tmp_path) -> None:
    metrics_port = free_port()
    ctl = await ControllerProcess(str(tmp_path), None, *LONG_SESSION, "--metrics-listen",
                                  f"127.0.0.1:{metrics_port}").start()
    fakes = await brokers(3)
    conn = await ctl.connect()
    try:
        assert set(conn.server_versions) == {3, 7, 18, 19, 20, 32, 33, 37, 43, 44, 56, 62, 63,
                                             75}
        epochs = [await b.register(conn) for b in fakes]
        assert epochs == sorted(set(epochs)), "each registration gets a higher generation"
        for b in fakes:  # start-up: UpdateMetadata then LeaderAndIsr, for this generation
            await b.wait_for(lambda r, b=b: r.api_key == ApiKey.LEADER_AND_ISR
                             and r.message.broker_epoch == b.broker_epoch)
        created = await create_topic(conn, "orders", 3, -1, **{"retention.ms": "60000"})
        assert created.error_code == 0 and created.replication_factor == 3
        for b in fakes:
            await b.wait_for(lai_for("orders", b.broker_epoch))
            for r in b.received:
                assert r.message.controller_epoch == ctl.epoch
                assert r.message.broker_epoch == b.broker_epoch
                assert r.answer == 0
        meta = await metadata(conn)
        topic = meta.topics[0]
        assert topic.name == "orders" and len(topic.partitions) == 3
        assert sorted(b.rack for b in meta.brokers) == ["a", "b", "c"]
        for p in topic.partitions:  # replicas on three racks, leader first
            assert sorted(p.replica_nodes) == [1, 2, 3] and p.leader_id == p.replica_nodes[0]
        described = await conn.request(APIS[ApiKey.DESCRIBE_CONFIGS], 4, DescribeConfigsRequest(
            resources=[DescribeConfigsResource(resource_type=2, resource_name="orders",
                                               configuration_keys=None)]))
        values = {c.name: c.value for c in described.results[0].configs}
        assert values["retention.ms"] == "60000" and values["min.insync.replicas"] == "1"
        await ctl.wait_log("broker 3 registered: generation")
        scraped = await asyncio.to_thread(_scrape, metrics_port)
        assert f"epochlog_controller_epoch {float(ctl.epoch)}" in scraped
        assert 'epochlog_controller_brokers{state="alive"} 3.0' in scraped
        assert "epochlog_controller_unclean_recoveries_total 0.0" in scraped
    finally:
        await conn.close()
        assert await ctl.stop() == 0


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
async def test_a_restarted_controller_has_a_higher_epoch_and_keeps_its_state(tmp_path,
                                                                             how) -> None:
    ctl = await ControllerProcess(str(tmp_path), None, *LONG_SESSION).start()
    fakes = await brokers(2)
    conn = await ctl.connect()
    epochs = [await b.register(conn) for b in fakes]
    assert (await create_topic(conn, "kept", 2, 2)).error_code == 0
    await conn.close()
    first_epoch = ctl.epoch
    assert await ctl.stop(how) == (0 if how == signal.SIGTERM else -signal.SIGKILL)

    ctl = await ControllerProcess(str(tmp_path), ctl.port, *LONG_SESSION).start()
    conn = await ctl.connect()
    try:
        assert ctl.epoch == first_epoch + 1
        # The live generations found in the log get the whole state, stamped with the new
        # controller epoch and their unchanged broker epoch.
        for b in fakes:
            r = await b.wait_for(lambda r: r.api_key == ApiKey.LEADER_AND_ISR
                                 and r.message.controller_epoch == ctl.epoch)
            assert r.message.broker_epoch == b.broker_epoch and r.answer == 0
        meta = await metadata(conn)
        assert [t.name for t in meta.topics] == ["kept"]
        assert len(meta.topics[0].partitions) == 2
        again = await fakes[0].register(conn)
        assert again > max(epochs), "generations keep rising across controller restarts"
    finally:
        await conn.close()
        await ctl.stop()


async def test_a_request_for_an_old_generation_refused_as_stale_is_not_resent(tmp_path) -> None:
    ctl = await ControllerProcess(str(tmp_path), None, *LONG_SESSION).start()
    b1, b2 = await brokers(2)
    conn = await ctl.connect()
    try:
        await b2.register(conn)
        b1.hold.clear()  # b1 takes requests but holds its answers
        old = await b1.register(conn)
        held = await b1.wait_for(lambda r: r.message.broker_epoch == old)
        b1.bounce()
        new = await b1.register(conn)  # a new process registers while the old one is live
        assert new > old
        b1.hold.set()  # the held request is now answered STALE_BROKER_EPOCH
        await b1.wait_for(lambda r: r.api_key == ApiKey.LEADER_AND_ISR
                          and r.message.broker_epoch == new)
        assert held.answer == E.STALE_BROKER_EPOCH
        # More traffic for the new generation; the old request must not come back.
        assert (await create_topic(conn, "after", 1, 2)).error_code == 0
        await b1.wait_for(lai_for("after", new))
        old_ones = [r for r in b1.received if r.message.broker_epoch == old]
        assert old_ones == [held], "the stale request was sent once and never resent"

        # Same rule within one generation: the sender is FIFO, so had it resent the refused
        # request, the copy would arrive before the next one.
        b1.refuse_as_stale = True
        assert (await create_topic(conn, "refused", 1, 2)).error_code == 0
        refused = await b1.wait_for(lai_for("refused", new))
        b1.refuse_as_stale = False
        assert (await create_topic(conn, "next", 1, 2)).error_code == 0
        await b1.wait_for(lai_for("next", new))
        assert len([r for r in b1.received if lai_for("refused", new)(r)]) == 1
        assert refused.answer == E.STALE_BROKER_EPOCH
    finally:
        await conn.close()
        await ctl.stop()


async def test_controlled_shutdown_from_an_old_generation_is_refused(tmp_path) -> None:
    ctl = await ControllerProcess(str(tmp_path), None, *LONG_SESSION).start()
    b1, b2 = await brokers(2)
    conn = await ctl.connect()
    try:
        old = await b1.register(conn)
        await b2.register(conn)
        assert (await create_topic(conn, "t", 1, 2)).error_code == 0
        b1.bounce()
        new = await b1.register(conn)
        api = APIS[ApiKey.CONTROLLED_SHUTDOWN]
        stale = await conn.request(api, 3, ControlledShutdownRequest(broker_id=1,
                                                                     broker_epoch=old))
        assert stale.error_code == E.STALE_BROKER_EPOCH
        await ctl.wait_log("fenced ControlledShutdown from broker 1 generation")
        # From the current generation it moves leadership off broker 1 before answering.
        meta = await metadata(conn)
        leader_before = meta.topics[0].partitions[0].leader_id
        done = await conn.request(api, 3, ControlledShutdownRequest(broker_id=1,
                                                                    broker_epoch=new))
        assert done.error_code == 0 and done.remaining_partitions == []
        p = (await metadata(conn)).topics[0].partitions[0]
        assert p.leader_id == 2 and 1 not in p.isr_nodes
        if leader_before == 1:
            await b2.wait_for(lambda r: r.api_key == ApiKey.LEADER_AND_ISR and any(
                ps.leader == 2 for t in r.message.topic_states for ps in t.partition_states))
    finally:
        await conn.close()
        await ctl.stop()


async def test_an_expired_session_moves_leadership_with_a_higher_leader_epoch(tmp_path) -> None:
    ctl = await ControllerProcess(str(tmp_path), None, "--broker-session-timeout-ms",
                                  "600").start()
    b1, b2 = await brokers(2)
    conn = await ctl.connect()
    beating = True

    async def heartbeats() -> None:
        while beating:
            assert (await b2.heartbeat(conn)).error_code == 0
            await asyncio.sleep(0.1)  # the broker's heartbeat cadence, not a wait for an event

    try:
        await b1.register(conn)
        await b2.register(conn)
        task = asyncio.get_running_loop().create_task(heartbeats())
        created = await create_topic(conn, "t", -1, -1, [[1, 2]])
        assert created.error_code == 0
        # Broker 1 (the leader) never heartbeats: its session expires and 2 leads in a new epoch.
        r = await b2.wait_for(lambda r: r.api_key == ApiKey.LEADER_AND_ISR and any(
            ps.leader == 2 and ps.leader_epoch >= 1
            for t in r.message.topic_states for ps in t.partition_states), timeout_s=WAIT_S)
        assert r.message.broker_epoch == b2.broker_epoch
        await ctl.wait_log("broker 1 generation")
        await ctl.wait_log("session expired")
        beating = False
        await task
    finally:
        beating = False
        await conn.close()
        await ctl.stop()


async def test_a_bad_setting_is_refused_at_start_naming_it(tmp_path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "epochlog", "controller", "--data-dir", str(tmp_path),
        "--listen", "127.0.0.1:1", "--broker-session-timeout-ms", "ten",
        stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(proc.communicate(), WAIT_S)
    assert proc.returncode == 2
    assert b"broker_session_timeout_ms" in err and b"Expected `int`" in err


async def test_garbage_and_oversize_frames_close_only_that_connection(tmp_path) -> None:
    ctl = await ControllerProcess(str(tmp_path), None, "--set", "frame_bytes_max=4096").start()
    good = await ctl.connect()
    try:
        for bad in (struct.pack(">i", 1 << 30) + b"x" * 16,  # over the frame limit
                    struct.pack(">i", 12) + b"\x00\x03\x00\x0c" + b"\xff" * 8,  # bad body
                    struct.pack(">i", 10) + b"\x03\xe7" + b"\x00" * 8,  # an API not served
                    b"\xff" * 64):  # a negative size
            reader, writer = await asyncio.open_connection("127.0.0.1", ctl.port)
            writer.write(bad)
            await writer.drain()
            assert await asyncio.wait_for(reader.read(), WAIT_S) == b"", "closed, no answer"
            writer.close()
        meta = await metadata(good)  # the connection opened before is still served
        assert meta.controller_id == 3000
        await ctl.wait_log("closing connection from")
        await ctl.wait_log("over the limit")
    finally:
        await good.close()
        assert await ctl.stop() == 0

