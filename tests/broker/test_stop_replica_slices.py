"""A StopReplica naming many partitions (a wide topic deleted) is applied in slices, serving
other requests between them, as LeaderAndIsr is (issue 33: closing and deleting thousands of
folders in one go held the broker's event loop, and with it its heartbeats).

On a real broker: while it stops and deletes the replicas of a topic of PARTITIONS partitions,
ApiVersions requests sent to it one after another are answered, several of them between its first
and its last "stopped" line; every replica's folder is gone at the end."""

from __future__ import annotations

import datetime
import re
import threading
import time
from pathlib import Path

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.api_versions import ApiVersionsRequest
from epochlog.protocol.apis.delete_topics import DeleteTopicsRequest

from .cluster import Cluster

TOPIC = "wide-gone"
PARTITIONS = 1500
WAIT_S = 120.0  # 1,500 logs made and deleted on two busy cores: far past the default 20 s
STOPPED = re.compile(r"^(\S+ \S+) INFO epochlog.broker: " + TOPIC + r"-\d+: stopped .*deleted$")


def count_stopped(log_text: str) -> int:
    return sum(1 for line in log_text.splitlines() if STOPPED.match(line))


def stopped_span(log_text: str) -> tuple[datetime.datetime, datetime.datetime, int]:
    times = [datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
             for m in map(STOPPED.match, log_text.splitlines()) if m]
    assert times, "no 'stopped ... deleted' line"
    return times[0], times[-1], len(times)


def test_requests_are_served_while_a_wide_topic_is_deleted(tmp_path: Path) -> None:
    with Cluster(tmp_path, brokers=1) as c:
        broker = c.broker(1)
        c.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1, timeout_s=WAIT_S)
        answered: list[datetime.datetime] = []
        done = threading.Event()

        def delete() -> None:
            try:
                answer = broker.call(ApiKey.DELETE_TOPICS, DeleteTopicsRequest(
                    topic_names=[TOPIC], timeout_ms=int(WAIT_S * 1000)), 5,
                    timeout_s=WAIT_S + 30)
                assert [r.error_code for r in answer.responses] == [0], answer
            finally:
                done.set()

        deleting = threading.Thread(target=delete)
        deleting.start()
        deadline = time.monotonic() + WAIT_S
        while not done.is_set() or count_stopped(broker.log_path.read_text()) < PARTITIONS:
            assert time.monotonic() < deadline, "the topic's replicas were not all stopped"
            broker.call(ApiKey.API_VERSIONS, ApiVersionsRequest(), version=0, timeout_s=120)
            answered.append(datetime.datetime.now())
        deleting.join()
        first, last, _ = stopped_span(broker.log_path.read_text())
        between = [t for t in answered if first < t < last]
        assert len(between) >= 3, (first, last, len(answered))
        data = Path(broker.data_dir)
        c._poll(lambda: not any(p.name.startswith(TOPIC + "-") for p in data.iterdir()),
                f"every folder of {TOPIC} deleted", WAIT_S)
