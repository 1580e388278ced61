"""The broker's Prometheus metrics count requests and bytes per listener (label `listener`).

On a real broker with an INTERNAL listener, the controller's control requests arrive on INTERNAL
and a client's on EXTERNAL. One request sent by hand on a raw socket to each listener must move
exactly that listener's byte counters by the frame sizes on the wire, and its request counter by
one; EXTERNAL's must not move for a request on INTERNAL.
"""

from __future__ import annotations

import re
import socket
import struct
import urllib.request

from epochlog.protocol.frames import frame
from epochlog.protocol.headers import RequestHeader

from .cluster import WAIT_S, Cluster, free_port

_SAMPLE = re.compile(r'^(epochlog_broker_\w+)\{([^}]*)\} (\S+)$')


def _scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m:
            labels = frozenset(tuple(kv.split("=", 1)) for kv in m.group(2).split(","))
            samples[(m.group(1), frozenset((k, v.strip('"')) for k, v in labels))] = \
                float(m.group(3))
    return samples


def _value(samples: dict, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def _api_versions_round_trip(port: int) -> tuple[int, int]:
    """One ApiVersions v0 on a fresh raw connection: (bytes sent, bytes received)."""
    request = frame(RequestHeader(18, 0, 9, "metrics-test").encode(1))
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
        sock.sendall(request)
        size, = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        body = sock.recv(size, socket.MSG_WAITALL)
        assert len(body) == size and struct.unpack_from(">i", body)[0] == 9
    return len(request), 4 + size


def test_requests_and_bytes_are_counted_per_listener(tmp_path) -> None:
    metrics, internal = free_port(), free_port()
    cluster = Cluster(tmp_path, brokers=1)
    cluster.brokers[1].extra += ["--internal-listen", f"127.0.0.1:{internal}",
                                 "--metrics-listen", f"127.0.0.1:{metrics}"]
    with cluster:
        external = cluster.broker(1).port
        before = _scrape(metrics)
        # The controller's control requests came on INTERNAL, the test's Metadata on EXTERNAL.
        assert _value(before, "epochlog_broker_requests_total", listener="INTERNAL",
                      api="UpdateMetadata", version="7", error="NONE") >= 1
        assert _value(before, "epochlog_broker_requests_total", listener="EXTERNAL",
                      api="UpdateMetadata", version="7", error="NONE") == 0
        assert _value(before, "epochlog_broker_bytes_in_total", listener="INTERNAL") > 0

        for port, name, other in ((external, "EXTERNAL", "INTERNAL"),
                                  (internal, "INTERNAL", "EXTERNAL")):
            start = _scrape(metrics)
            sent, received = _api_versions_round_trip(port)
            end = _scrape(metrics)
            for metric, delta in (("epochlog_broker_bytes_in_total", sent),
                                  ("epochlog_broker_bytes_out_total", received)):
                assert _value(end, metric, listener=name) - _value(start, metric,
                                                                   listener=name) == delta
            requests = dict(listener=name, api="ApiVersions", version="0", error="NONE")
            assert _value(end, "epochlog_broker_requests_total", **requests) - \
                _value(start, "epochlog_broker_requests_total", **requests) == 1
            if other == "EXTERNAL":  # nobody else talks to EXTERNAL here (the controller
                # may send to INTERNAL at any time)
                assert _value(end, "epochlog_broker_bytes_in_total", listener=other) == \
                    _value(start, "epochlog_broker_bytes_in_total", listener=other)
