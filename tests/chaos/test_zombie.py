"""Zombie leader (issue 5; DESIGN.md guarantee 4), on real processes.

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
- every acknowledged record is there, the zombie's own writes are not, and all replicas hold the
  same batches.
"""

from __future__ import annotations

import signal
import socket
import struct
import time
from pathlib import Path

from protocol.apis.produce import (PartitionProduceData, ProduceRequest, ProduceResponse,
                                   TopicProduceData)
from protocol.headers import RequestHeader, decode_response_header
from protocol.records import build_batch
from protocol.registry import APIS
from tests.broker.cluster import Cluster
from tests.chaos.replicas import partition_state, produce, read_all, state_from, wait_quiet

TOPIC = "zombie"
SESSION_MS = 2000
CONTROLLER_ARGS = ["--set", f"broker_session_timeout_ms={SESSION_MS}"]
BROKER_ARGS = ["--set", f"broker_heartbeat_interval_ms={SESSION_MS // 4}",
               "--set", "replica_lag_time_max_ms=2000"]
PRODUCE = APIS[0]
PRODUCE_VERSION = 9


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


def test_paused_leader_is_fenced_truncates_and_rejoins(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=3, controller_args=CONTROLLER_ARGS,
                 broker_args=BROKER_ARGS) as cluster:
        cluster.create_topic(TOPIC, partitions=1, replication_factor=3,
                             **{"min.insync.replicas": "2"})
        before = [f"before-{i}".encode() for i in range(50)]
        acked = dict(zip(produce(cluster.bootstrap, TOPIC, before), before))
        old = partition_state(cluster, TOPIC)[0]
        zombie_id, old_epoch = old.leader_id, old.leader_epoch
        zombie = cluster.broker(zombie_id)

        zombie.send_signal(signal.SIGSTOP)
        try:
            # A client that missed the failover: its requests wait in the frozen broker's socket.
            sock = socket.create_connection(("127.0.0.1", zombie.port), timeout=30)
            sock.sendall(produce_frame(1, -1, old_epoch, b"zombie-acks-all") +
                         produce_frame(2, 1, old_epoch, b"zombie-acks-one"))
            others = [b for b in cluster.brokers if b != zombie_id]
            deadline = time.monotonic() + 30
            while True:
                now = state_from(cluster, others[0], TOPIC)
                if now.leader_id not in (-1, zombie_id) and now.leader_epoch > old_epoch:
                    break
                assert time.monotonic() < deadline, f"no new leader: {now}"
                time.sleep(0.2)
            after = [f"after-{i}".encode() for i in range(50)]
            others_bootstrap = ",".join(f"127.0.0.1:{cluster.broker(b).port}" for b in others)
            acked.update(zip(produce(others_bootstrap, TOPIC, after), after))
        finally:
            zombie.send_signal(signal.SIGCONT)

        answers = dict(read_response(sock) for _ in range(2))
        sock.close()
        all_answer = answers[1].responses[0].partition_responses[0]
        assert all_answer.error_code != 0, (
            f"the zombie acknowledged an acks=all write at offset {all_answer.base_offset}")

        zombie.wait_line(r"generation \d+ -> \d+", timeout_s=30)
        wait_quiet(cluster, TOPIC, partitions=1, replicas=3)
        got = dict(read_all(cluster.bootstrap, TOPIC, 1)[0])

    missing = {off: v for off, v in acked.items() if got.get(off) != v}
    assert not missing, f"acknowledged records missing: {sorted(missing)[:5]}"
    values = set(got.values())
    assert b"zombie-acks-all" not in values and b"zombie-acks-one" not in values, \
        "a write taken in the zombie's old epoch survived"
