"""Zombie leader (issue 5; docs/design.md, guarantee 4), on real processes.

The leader of a replication-factor-3 partition is paused (SIGSTOP) past its session. While it is
frozen, produce requests naming its old leader epoch are already waiting in its socket (a client
that had not heard of the failover): one with acks=all, one with acks=1. The controller fails its
generation, elects a new leader in a new epoch, and that leader takes acknowledged writes. Then
SIGCONT:

- the zombie may append the acks=1 write to its own log (acks=1 promises nothing more), but the
  acks=all write is never acknowledged: its followers fetch elsewhere now, so its high watermark
  cannot pass it;
- the zombie learns its generation is over (its heartbeat is refused with STALE_BROKER_EPOCH),
  registers again, becomes a follower, truncates the tail it wrote in the old epoch (KIP-101) and
  rejoins the ISR;
- every acknowledged record is there, once, at its offset (`check` of the history of the sends
  and the read-back finds nothing), the zombie's own writes are not, and all replicas hold the
  same batches.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)
from epochlog.protocol.headers import RequestHeader, decode_response_header
from epochlog.protocol.records import build_batch
from epochlog.protocol.registry import APIS
from epochlog.testing import Cluster, History, check, until
from epochlog.testing.traffic import produce, read_back
from tests.chaos.replicas import state_from, wait_quiet

TOPIC = "zombie"
SESSION_MS = 2000
SETTINGS = {"broker_session_timeout_ms": SESSION_MS,
            "broker_heartbeat_interval_ms": SESSION_MS // 4,
            "replica_lag_time_max_ms": 2000}
PRODUCE = APIS[ApiKey.PRODUCE]
PRODUCE_VERSION = 9
WAIT_S = 30.0


def produce_frame(correlation_id: int, acks: int, leader_epoch: int, value: bytes) -> bytes:
    request = ProduceRequest(acks=acks, timeout_ms=5000, topic_data=[TopicProduceData(
        name=TOPIC, partition_data=[PartitionProduceData(
            index=0, records=build_batch([(None, value, [], None)]),
            current_leader_epoch=leader_epoch)])])
    header = RequestHeader(0, PRODUCE_VERSION, correlation_id, "zombie-test")
    body = header.encode(PRODUCE.request_header_version(PRODUCE_VERSION)) + \
        PRODUCE.encode_request(request, PRODUCE_VERSION)
    return struct.pack(">i", len(body)) + body


def read_response(sock: socket.socket) -> tuple[int, ProduceResponse]:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the zombie closed the connection"
            data += chunk
        return data

    size, = struct.unpack(">i", exactly(4))
    frame = exactly(size)
    correlation_id, pos = decode_response_header(
        frame, PRODUCE.response_header_version(PRODUCE_VERSION))
    return correlation_id, PRODUCE.decode_response(frame, PRODUCE_VERSION, pos)


def test_paused_leader_is_fenced_truncates_and_rejoins(
        epochlog_cluster: Callable[..., Cluster]) -> None:
    history = History()
    cluster = epochlog_cluster(brokers=3, settings=SETTINGS, on_fault=history.record_fault)
    cluster.create_topic(TOPIC, partitions=1, replication_factor=3,
                         configs={"min.insync.replicas": 2})
    produce(cluster.bootstrap_servers, TOPIC, [f"before-{i}".encode() for i in range(50)],
            history=history)
    old = cluster.partitions(TOPIC)[0]
    zombie_id, old_epoch = old.leader_id, old.leader_epoch
    zombie = cluster.node(zombie_id)

    cluster.pause(zombie_id)
    # A client that missed the failover: its requests wait in the frozen broker's socket.
    sock = socket.create_connection((zombie.host, zombie.port), timeout=WAIT_S)
    try:
        try:
            sock.sendall(produce_frame(1, -1, old_epoch, b"zombie-acks-all") +
                         produce_frame(2, 1, old_epoch, b"zombie-acks-one"))
            others = [b for b in cluster.brokers if b != zombie_id]
            until(lambda: (p := state_from(cluster, others[0], TOPIC)).leader_id not in
                  (-1, zombie_id) and p.leader_epoch > old_epoch,
                  f"a leader other than broker {zombie_id} above epoch {old_epoch}", WAIT_S)
            others_bootstrap = ",".join(cluster.brokers[b].address for b in others)
            produce(others_bootstrap, TOPIC, [f"after-{i}".encode() for i in range(50)],
                    history=history)
        finally:
            cluster.resume(zombie_id)
        answers = dict(read_response(sock) for _ in range(2))
    finally:
        sock.close()
    all_answer = answers[1].responses[0].partition_responses[0]
    assert all_answer.error_code != 0, (
        f"the zombie acknowledged an acks=all write at offset {all_answer.base_offset}")

    zombie.wait_line(r"generation \d+ -> \d+", timeout_s=WAIT_S)
    wait_quiet(cluster, TOPIC, partitions=1, replicas=3)
    got = read_back(cluster.bootstrap_servers, TOPIC, 1, history=history)[0]

    verdict = check(history)
    assert verdict.ok and not verdict.counts, str(verdict)
    assert verdict.stats["sends_acked"] == verdict.stats["values_read"] == 100, verdict.stats
    values = {v for _, v in got}
    assert b"zombie-acks-all" not in values and b"zombie-acks-one" not in values, \
        "a write taken in the zombie's old epoch survived"
