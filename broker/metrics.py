"""Prometheus metrics of the broker, served on `metrics_listen` at /metrics.

`RequestStats` is the server's observer: it counts each answered request, by API and version (as
Kafka's RequestMetrics do, so one sees what clients negotiated), under every distinct error code
its answer carries (top-level and per partition; NONE when there is none), so one
Produce answering NOT_LEADER_OR_FOLLOWER for a partition shows up under that code. The rest is
read from the broker's state when scraped, like the controller's metrics: scrapes run on
prometheus-client's HTTP thread and only read ints and copy containers (safe under the GIL).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import msgspec
from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from protocol.error_codes import name_of
from protocol.registry import APIS

ERROR_SCAN_DEPTH_MAX = 4  # answer -> topics -> partitions: deep enough for every error field


class RequestStats:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str, str]] = Counter()

    def __call__(self, key: int, version: int, answer: Any) -> None:
        api = APIS[key].name
        codes: set[int] = set()
        if answer is not None:
            _collect_errors(answer, codes, ERROR_SCAN_DEPTH_MAX)
        for code in codes - {0} or {0}:
            self.requests[(api, str(version), name_of(code) if code else "NONE")] += 1


def _collect_errors(message: msgspec.Struct, codes: set[int], depth: int) -> None:
    for name in message.__struct_fields__:
        value = getattr(message, name)
        if name == "error_code":
            codes.add(value)
        elif depth > 0 and isinstance(value, list):
            for item in value:
                if isinstance(item, msgspec.Struct):
                    _collect_errors(item, codes, depth - 1)


class BrokerCollector:
    def __init__(self, broker: Any, stats: RequestStats) -> None:
        self.broker = broker
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        b = self.broker
        requests = CounterMetricFamily("epochlog_broker_requests",
                                       "Requests answered, by API, version and error code.",
                                       labels=["api", "version", "error"])
        for (api, version, error), count in dict(self.stats.requests).items():
            requests.add_metric([api, version, error], count)
        yield requests
        server = b.server
        yield CounterMetricFamily("epochlog_broker_bytes_in", "Request bytes received.",
                                  value=server.bytes_in_total if server else 0)
        yield CounterMetricFamily("epochlog_broker_bytes_out", "Answer bytes sent.",
                                  value=server.bytes_out_total if server else 0)
        yield _gauge("epochlog_broker_generation", "This broker's generation (broker epoch).",
                     b.epochs.generation)
        yield _gauge("epochlog_broker_controller_epoch", "Highest controller epoch accepted.",
                     b.epochs.controller_epoch)
        replicas = b.replicas
        if replicas is not None:
            partitions = list(replicas.partitions.values())
            yield _gauge("epochlog_broker_partitions", "Partitions hosted.", len(partitions))
            yield _gauge("epochlog_broker_partitions_led", "Partitions this broker leads.",
                         sum(p.is_leader for p in partitions))
            waiting = GaugeMetricFamily("epochlog_broker_purgatory_size",
                                        "Requests waiting, by purgatory.", labels=["purgatory"])
            for purgatory in (replicas.produce_purgatory, replicas.fetch_purgatory):
                waiting.add_metric([purgatory.name], len(purgatory))
            yield waiting
        fenced = CounterMetricFamily("epochlog_broker_control_requests_fenced",
                                     "Control requests refused, by reason.", labels=["error"])
        for error, count in dict(b.epochs.refused).items():
            fenced.add_metric([error], count)
        yield fenced


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def serve_metrics(broker: Any, stats: RequestStats, host: str, port: int) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker, stats))  # type: ignore[arg-type]
    start_http_server(port, addr=host, registry=registry)
    return registry
