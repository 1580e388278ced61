"""A LeaderAndIsr naming many partitions is applied in slices, serving other requests between
them (issue 33: one naming 10,000 partitions held a broker's event loop for minutes, so its
heartbeats went unsent and the controller ended its generation).

On a real broker: while it creates the logs of a new topic of PARTITIONS partitions (one
LeaderAndIsr), ApiVersions requests sent to it one after another are answered, several of them
between its first and its last "created log" line: applied in one go, none could be. The
controller's answer still comes after every partition is applied: every partition is led once
CreateTopics returns and the topic's leaders have said so (the harness waits for that).
"""

from __future__ import annotations

import datetime
import re
import threading

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.api_versions import ApiVersionsRequest

from .cluster import Cluster

TOPIC = "wide"
PARTITIONS = 1500
CREATE_S = 120.0
CREATED = re.compile(r"^(\S+ \S+) INFO epochlog.storage: created log .*/" + TOPIC + r"-\d+$")


def created_span(log_text: str) -> tuple[datetime.datetime, datetime.datetime, int]:
    times = [datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f")
             for m in map(CREATED.match, log_text.splitlines()) if m]
    return times[0], times[-1], len(times)


def test_requests_are_served_while_a_wide_leader_and_isr_is_applied(tmp_path) -> None:
    with Cluster(tmp_path, brokers=1) as c:
        broker = c.broker(1)
        answered: list[datetime.datetime] = []
        done = threading.Event()

        def create() -> None:
            try:
                c.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=1,
                               timeout_s=CREATE_S)  # 1,500 logs: past the default 20 s
            finally:
                done.set()

        creating = threading.Thread(target=create)
        creating.start()
        while not done.is_set():
            broker.call(ApiKey.API_VERSIONS, ApiVersionsRequest(), version=0, timeout_s=120)
            answered.append(datetime.datetime.now())
        creating.join()

        first, last, count = created_span(broker.log_path.read_text())
        assert count == PARTITIONS
        between = [t for t in answered if first < t < last]
        assert len(between) >= 3, (first, last, len(answered))
        assert len(c.leaders(TOPIC)) == PARTITIONS


def test_a_request_applied_in_slices_stops_when_fenced_meanwhile() -> None:
    """Between two slices our generation may end (a heartbeat said so) or a newer controller
    speak: the rest of the request is then not applied and its answer is that error."""
    from epochlog.broker.fencing import ControlEpochs
    from epochlog.protocol.error_codes import ErrorCode as E
    epochs = ControlEpochs(1)
    epochs.registration_answered(5)
    assert epochs.admit("LeaderAndIsr", 0, 3, 5) == 0
    assert epochs.still_admits("LeaderAndIsr", 5, 3) == 0
    assert epochs.admit("UpdateMetadata", 0, 4, 5) == 0  # a newer controller spoke
    assert epochs.still_admits("LeaderAndIsr", 5, 3) == E.STALE_CONTROLLER_EPOCH
    epochs.generation_over()
    assert epochs.still_admits("LeaderAndIsr", 5, 4) == E.STALE_BROKER_EPOCH
    epochs.registration_answered(6)
    assert epochs.still_admits("LeaderAndIsr", 5, 4) == E.STALE_BROKER_EPOCH
