"""Prometheus metrics of the broker, served on `metrics_listen` at /metrics.

`RequestStats` is the servers' observer: it counts each answered request, by listener (EXTERNAL
for clients, INTERNAL for replication and the controller), API and version (as
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

from epochlog.protocol.error_codes import name_of
from epochlog.protocol.registry import APIS

ERROR_SCAN_DEPTH_MAX = 4  # answer -> topics -> partitions: deep enough for every error field


class RequestStats:
    def __init__(self) -> None:
        # (listener, api, version, error) -> requests
        self.requests: Counter[tuple[str, str, str, str]] = Counter()

    def __call__(self, listener: str, key: int, version: int, answer: Any) -> None:
        api = APIS[key].name
        codes: set[int] = set()
        if answer is not None:
            _collect_errors(answer, codes, ERROR_SCAN_DEPTH_MAX)
        for code in codes - {0} or {0}:
            self.requests[(listener, api, str(version), name_of(code) if code else "NONE")] += 1


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
        requests = CounterMetricFamily(
            "epochlog_broker_requests",
            "Requests answered, by listener, API, version and error code.",
            labels=["listener", "api", "version", "error"])
        for labels, count in dict(self.stats.requests).items():
            requests.add_metric(list(labels), count)
        yield requests
        bytes_in = CounterMetricFamily("epochlog_broker_bytes_in",
                                       "Request bytes received, by listener.", labels=["listener"])
        bytes_out = CounterMetricFamily("epochlog_broker_bytes_out",
                                        "Answer bytes sent, by listener.", labels=["listener"])
        failed = CounterMetricFamily("epochlog_broker_tls_handshake_failures",
                                     "TLS handshakes that failed (or never finished), by SSL "
                                     "listener.", labels=["listener"])
        for name, server in dict(b.servers).items():
            bytes_in.add_metric([name], server.bytes_in_total)
            bytes_out.add_metric([name], server.bytes_out_total)
            if server.tls is not None:
                failed.add_metric([name], server.handshake_failures_total)
        yield bytes_in
        yield bytes_out
        yield failed
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
            led = [p for p in partitions if p.is_leader and p.state is not None]
            yield _gauge("epochlog_broker_under_replicated_partitions",
                         "Partitions led here whose ISR is smaller than their replica set.",
                         sum(len(p.isr) < len(p.state.replicas) for p in led))
            yield _gauge("epochlog_broker_under_min_isr_partitions",
                         "Partitions led here whose ISR is below min.insync.replicas.",
                         sum(p.under_min_isr() for p in led))
            disk = replicas.logs.disk
            yield _gauge("epochlog_broker_disk_writes_failing",
                         "1 while writes to the data dir fail (a full disk): appends are "
                         "answered KAFKA_STORAGE_ERROR.", int(disk.failing))
            cut = replicas.logs.truncations
            yield _counter("epochlog_broker_committed_truncations",
                           "Cuts of a log below its high watermark: acknowledged records lost "
                           "(an unclean election, or recovery of a damaged log).",
                           cut.events_total)
            yield _counter("epochlog_broker_committed_offsets_truncated",
                           "Committed offsets cut away by those truncations.", cut.offsets_total)
            yield _counter("epochlog_broker_disk_write_failures",
                           "Writes to the data dir that failed (appends, index entries, "
                           "checkpoints).", disk.failures_total)
        isr = getattr(b, "isr", None)
        if isr is not None:
            c = isr.counters
            yield CounterMetricFamily("epochlog_broker_isr_shrinks", "ISR shrinks accepted.",
                                      value=c.shrinks_total)
            yield CounterMetricFamily("epochlog_broker_isr_expands", "ISR expansions accepted.",
                                      value=c.expands_total)
            failures = CounterMetricFamily("epochlog_broker_alter_partition_failures",
                                           "AlterPartition proposals refused or not answered, "
                                           "by error.", labels=["error"])
            for error, count in dict(c.failures_by_error).items():
                failures.add_metric([error], count)
            yield failures
        fetchers = getattr(b, "fetchers", None)
        if fetchers is not None:
            yield from _fetcher_metrics(fetchers)
        yield from _read_path_metrics(b.read_path)
        groups = getattr(b, "groups", None)
        if groups is not None:
            yield from _group_metrics(groups)
        txns = getattr(b, "txns", None)
        if txns is not None:
            yield from _txn_metrics(txns)
        yield from _cleaner_metrics(getattr(b, "cleaner", None))
        fenced = CounterMetricFamily("epochlog_broker_control_requests_fenced",
                                     "Control requests refused, by reason.", labels=["error"])
        for error, count in dict(b.epochs.refused).items():
            fenced.add_metric([error], count)
        yield fenced
        yield _counter("epochlog_broker_control_requests_held",
                       "Control requests that waited for our registration answer.",
                       b.epochs.held_total)
        yield _counter("epochlog_broker_control_requests_unanswered",
                       "Held control requests left unanswered: no registration answer in time "
                       "(the controller resends them).", b.epochs.unanswered_total)
        link = getattr(b, "controller", None)
        if link is not None:
            yield _counter("epochlog_broker_controller_reconnects",
                           "Heartbeat connections found closed and reopened at once.",
                           link.reconnects_total)


def _cleaner_metrics(cleaner: Any) -> Iterator[Metric]:
    """Compaction (storage/cleaner.py's CleanerStats); nothing when the cleaner is off."""
    if cleaner is None:
        return
    s = cleaner.stats
    for name, help_text, value in (
            ("passes", "Cleaning passes that swapped their segments in.", s.passes),
            ("passes_failed", "Cleaning passes that failed (the log waits, then retries).",
             s.passes_failed),
            ("passes_abandoned", "Cleaning passes dropped because the log changed meanwhile.",
             s.passes_aborted),
            ("bytes_read", "Segment bytes the cleaner read.", s.bytes_read),
            ("bytes_written", "Cleaned segment bytes swapped in.", s.bytes_written),
            ("records_removed", "Records compaction removed.", s.records_removed),
            ("segments_swapped", "Segments replaced by cleaned ones.", s.segments_swapped)):
        yield CounterMetricFamily(f"epochlog_broker_cleaner_{name}", help_text, value=value)
    yield _gauge("epochlog_broker_cleaner_dirty_ratio_max",
                 "The highest dirty ratio among compacted logs at the cleaner's last look.",
                 s.dirty_ratio_max)


def _fetcher_metrics(fetchers: Any) -> Iterator[Metric]:
    """The follower side (fetcher.ReplicaFetcherManager, follower.FollowerStats)."""
    s = fetchers.stats
    yield CounterMetricFamily("epochlog_broker_replica_fetch_bytes_appended",
                              "Batch bytes appended from leaders.", value=s.bytes_appended)
    yield CounterMetricFamily("epochlog_broker_replica_fetch_records_appended",
                              "Offsets appended from leaders.", value=s.records_appended)
    yield CounterMetricFamily("epochlog_broker_replica_truncations",
                              "Follower log truncations (by epoch, high watermark or log start).",
                              value=s.truncations)
    errors = CounterMetricFamily("epochlog_broker_replica_fetch_errors",
                                 "Follower fetch errors, by error.", labels=["error"])
    for error, count in dict(s.errors).items():
        errors.add_metric([error], count)
    yield errors
    yield _gauge("epochlog_broker_replica_max_lag",
                 "Largest follower lag: the leader's high watermark minus our log end, in offsets.",
                 fetchers.max_lag())
    yield _gauge("epochlog_broker_partitions_followed", "Partitions this broker fetches as "
                 "follower.", len(fetchers.following))


def _read_path_metrics(state: Any) -> Iterator[Metric]:
    """Follower reads (KIP-392) and fetch sessions (KIP-227): handlers/fetch.py's ReadPath,
    made on the first Fetch (none before: zeros)."""
    sessions = state.sessions if state is not None else None
    yield CounterMetricFamily("epochlog_broker_follower_fetches",
                              "Consumer fetches answered by this broker as a follower (KIP-392).",
                              value=state.follower_fetches_total if state else 0)
    yield CounterMetricFamily("epochlog_broker_follower_fetch_bytes",
                              "Record bytes served to consumers as a follower (KIP-392).",
                              value=state.follower_fetch_bytes_total if state else 0)
    yield CounterMetricFamily("epochlog_broker_preferred_replica_answers",
                              "Partitions answered with a preferred read replica (KIP-392).",
                              value=state.preferred_replica_answers_total if state else 0)
    yield CounterMetricFamily("epochlog_broker_stale_follower_answers",
                              "Replica fetches answered at once to tell a new high watermark.",
                              value=state.stale_follower_answers_total if state else 0)
    for name, help_text, attr in (
            ("replica_fetches", "Fetch requests from followers answered.",
             "replica_fetches_total"),
            ("replica_fetch_partitions_named", "Partitions named by followers' Fetch requests "
             "(an incremental session names only those whose fetch changed).",
             "replica_fetch_partitions_named_total"),
            ("replica_fetch_partitions_answered", "Partitions listed in answers to followers' "
             "Fetch requests (an incremental answer lists only those with news).",
             "replica_fetch_partitions_answered_total")):
        yield CounterMetricFamily(f"epochlog_broker_{name}", help_text,
                                  value=getattr(state, attr) if state else 0)
    yield _gauge("epochlog_broker_fetch_sessions", "Incremental fetch sessions kept (KIP-227).",
                 len(sessions) if sessions is not None else 0)
    for name, help_text, attr in (
            ("opened", "Fetch sessions opened.", "opened_total"),
            ("closed", "Fetch sessions closed by their fetcher.", "closed_total"),
            ("evicted", "Fetch sessions evicted (least recently used).", "evicted_total"),
            ("incremental", "Incremental fetches served on a session.", "incremental_total")):
        yield CounterMetricFamily(f"epochlog_broker_fetch_sessions_{name}", help_text,
                                  value=getattr(sessions, attr) if sessions is not None else 0)


def _group_metrics(groups: Any) -> Iterator[Metric]:
    """The group coordinator (broker/groups/coordinator.py)."""
    states = GaugeMetricFamily("epochlog_broker_groups", "Consumer groups coordinated here, by "
                               "state.", labels=["state"])
    for state, count in sorted(groups.group_counts().items()):
        states.add_metric([state], count)
    yield states
    yield _gauge("epochlog_broker_group_members", "Members of the groups coordinated here.",
                 groups.member_count())
    yield _gauge("epochlog_broker_offsets_partitions_led",
                 "__consumer_offsets partitions whose groups are loaded or loading here.",
                 len(groups.shards))
    c = groups.counters
    for name, help_text, value in (
            ("group_loads", "Offsets partitions loaded (became coordinator).", c.loads_total),
            ("group_unloads", "Offsets partitions unloaded (stopped coordinating).",
             c.unloads_total),
            ("offsets_committed", "Offsets committed and replicated.", c.commits_total),
            ("offset_commit_failures", "Offsets whose commit failed (append or replication).",
             c.commit_failures_total),
            ("group_stores", "Group metadata records written.", c.stores_total),
            ("group_store_failures", "Group metadata records that failed.",
             c.store_failures_total),
            ("group_rebalances", "Join phases completed with members.", c.rebalances_total)):
        yield CounterMetricFamily(f"epochlog_broker_{name}", help_text, value=value)


def _txn_metrics(txns: Any) -> Iterator[Metric]:
    """The transaction coordinator (broker/txn/coordinator.py)."""
    states = GaugeMetricFamily("epochlog_broker_transactional_ids", "Transactional ids "
                               "coordinated here, by state (Kafka's names).", labels=["state"])
    for state, count in sorted(txns.id_counts().items()):
        states.add_metric([state], count)
    yield states
    yield _gauge("epochlog_broker_transaction_state_partitions_led",
                 "__transaction_state partitions whose ids are loaded or loading here.",
                 len(txns.shards))
    c = txns.counters
    for name, help_text, value in (
            ("transaction_inits", "InitProducerId with a transactional id answered.",
             c.inits_total),
            ("transactions_committed", "Transactions completed committed (markers written).",
             c.committed_total),
            ("transactions_aborted", "Transactions completed aborted (markers written).",
             c.aborted_total),
            ("transactions_timed_out", "Transactions aborted past their timeout.",
             c.timed_out_total),
            ("transactions_fenced", "Open transactions aborted when a new producer took the id.",
             c.fenced_total),
            ("transactional_ids_expired", "Transactional ids forgotten after "
             "transactional_id_expiration_ms.", c.expired_total),
            ("transaction_state_loads", "__transaction_state partitions loaded.",
             c.loads_total)):
        yield CounterMetricFamily(f"epochlog_broker_{name}", help_text, value=value)


def _gauge(name: str, help_text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, help_text, value=value)


def _counter(name: str, help_text: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, help_text, value=value)


def serve_metrics(broker: Any, stats: RequestStats, host: str, port: int) -> CollectorRegistry:
    registry = CollectorRegistry()
    registry.register(BrokerCollector(broker, stats))
    start_http_server(port, addr=host, registry=registry)
    return registry
