"""Prometheus metrics of the controller, read from its state when scraped.

A custom collector reads the state machine's counters and the service's figures at scrape time,
so the state machine stays free of metrics code. Scrapes run on prometheus-client's HTTP thread;
they only read ints and copy containers (safe under the GIL; a scrape may see a decision half
applied, which a metric can live with).
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import start_http_server
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from .model import BROKER_STATES, NO_LEADER
from .server import ControlServer
from .service import ControllerService


class ControllerCollector:
    def __init__(self, service: ControllerService, server: ControlServer) -> None:
        self.service = service
        self.server = server

    def collect(self) -> Iterator[Metric]:
        state = self.service.state
        yield _gauge("epochlog_controller_epoch", "The controller epoch of this process.",
                     state.controller_epoch)
        brokers = GaugeMetricFamily("epochlog_controller_brokers",
                                    "Registered brokers by state.", labels=["state"])
        states = [b.state for b in list(state.brokers.values())]
        for name in BROKER_STATES:
            brokers.add_metric([name], states.count(name))
        yield brokers
        offline = sum(p.leader == NO_LEADER for t in list(state.topics.values())
                      for p in list(t.partitions.values()))
        yield _gauge("epochlog_controller_offline_partitions", "Partitions without a leader.",
                     offline)
        yield _gauge("epochlog_controller_topics", "Topics.", len(state.topics))
        counters = dict(state.counters)
        elections = CounterMetricFamily("epochlog_controller_elections",
                                        "Leader elections by kind.", labels=["kind"])
        for kind in ("clean", "unclean", "preferred"):
            elections.add_metric([kind], counters.get(f"elections_{kind}", 0))
        yield elections
        for name, help_text in (
                ("registrations", "Broker registrations (new generations)."),
                ("bounces", "Registrations that found the old generation still live."),
                ("sessions_expired", "Broker sessions that expired."),
                ("connection_losses",
                 "Broker heartbeat connections that closed while their generation lived (each "
                 "gets broker_connection_loss_grace_ms to heartbeat again)."),
                ("connection_loss_failures",
                 "Broker generations failed because their heartbeat connection closed and no "
                 "heartbeat came within the grace."),
                ("rebalance_elections",
                 "Preferred elections made by the automatic leader rebalance."),
                ("unclean_recoveries",
                 "Unclean elections made by unclean recovery (KIP-966): the live replica "
                 "holding the most, after asking each for its log end."),
                ("stale_broker_epoch_refused",
                 "Requests the controller refused as STALE_BROKER_EPOCH (fenced).")):
            yield CounterMetricFamily(f"epochlog_controller_{name}", help_text,
                                      value=counters.get(name, 0))
        answers = CounterMetricFamily("epochlog_controller_broker_answers",
                                      "Answers to control requests by error.", labels=["error"])
        for error, count in dict(self.service.answers).items():
            answers.add_metric([error], count)
        yield answers
        requests = CounterMetricFamily("epochlog_controller_requests",
                                       "Requests served, by API.", labels=["api"])
        for api, count in dict(self.server.requests).items():
            requests.add_metric([api], count)
        yield requests
        yield CounterMetricFamily("epochlog_controller_bad_connections",
                                  "Connections closed for malformed or refused input.",
                                  value=self.server.connections_closed_for_bad_input)


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def serve_metrics(service: ControllerService, server: ControlServer, host: str,
                  port: int) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(ControllerCollector(service, server))
    start_http_server(port, addr=host, registry=registry)
    return registry
