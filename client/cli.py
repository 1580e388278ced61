"""Command-line tools in the spirit of Kafka's: `epochlog topics`, `produce`, `consume`.

    epochlog topics create orders --partitions 3 --replication-factor 1 --config retention.ms=60000
    epochlog topics list | describe [TOPIC ...] | delete TOPIC ...
    printf 'k1:v1\\nk2:v2\\n' | epochlog produce orders --key-delimiter :
    epochlog consume orders --from-beginning --print-key
    epochlog consume orders --group billing --from-beginning

Every tool takes --bootstrap-server; without it, `epochlog` (epochlog/cli.py) fills it in from
EPOCHLOG_BOOTSTRAP_SERVERS, else the cluster `epochlog cluster up` runs in ./.epochlog, else
127.0.0.1:9092 (what a plain `cluster up` gives), and says which on stderr.
Kafka errors are printed with their name and the tool exits 1. Produce sends each line as a
record as it is read (client/cli_produce.py). Consume reads every partition (or one) from the
chosen offset and stops at the end unless --follow. With --group it is a member of that consumer
group (client.Consumer with subscribe()): it reads the partitions the group assigns it from the
group's committed offsets, auto-commits, and on SIGINT/SIGTERM, --max-messages or --timeout-ms
commits what it printed and leaves the group. Every wait is bounded: a cluster gone away ends it
(exit 1, saying what it waited for) once the group's requests have failed with no answer for
--timeout-ms (GROUP_UNREACHABLE_MS_DEFAULT without it); the commit and leave on the way out take
at most CLOSE_MS_MAX. SIGINT or SIGTERM ends consume (and produce) with exit 130 (a second one at
once, client/console.py); --max-messages draws a progress bar when stderr is a terminal.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.create_topics import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from epochlog.protocol.apis.delete_topics import DeleteTopicsRequest, DeleteTopicState
from epochlog.protocol.apis.describe_topic_partitions import (
    DescribeTopicPartitionsRequest,
    TopicRequest,
)
from epochlog.protocol.error_codes import ErrorCode

from . import cli_produce
from .cli_read import read_assigned
from .cluster import ClusterClient
from .console import EXIT_INTERRUPTED, Interrupts, Progress, progress
from .errors import KafkaError, error_for

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BATCH_BYTES_MAX = 1024 * 1024
# consume --group: without --timeout-ms, give up after the group's requests failed with no
# answer for this long (a cluster gone away), and bound the commit and leave on the way out
GROUP_UNREACHABLE_MS_DEFAULT = 30_000
CLOSE_MS_MAX = 10_000
PAGES_MAX = 10_000  # DescribeTopicPartitions answers followed by `topics describe`
FETCH_PARTITION_BYTES_MAX = 1024 * 1024


def add_parser(subparsers: Any) -> None:
    topics = subparsers.add_parser("topics", help="create, list, describe and delete topics")
    actions = topics.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    create = actions.add_parser("create", help="create a topic")
    create.add_argument("topic")
    create.add_argument("--partitions", type=int, default=-1, help="default: the cluster's")
    create.add_argument("--replication-factor", type=int, default=-1, help="default: the cluster's")
    create.add_argument("--config", action="append", default=[], metavar="NAME=VALUE")
    actions.add_parser("list", help="list topics")
    describe = actions.add_parser("describe", help="partitions, leaders, epochs, replicas, ISR")
    describe.add_argument("topic", nargs="*")
    delete = actions.add_parser("delete", help="delete topics")
    delete.add_argument("topic", nargs="+")
    for p in (create, describe, delete, actions.choices["list"]):
        _common(p)
        p.set_defaults(func=lambda args: _run(_topics(args)))

    produce = subparsers.add_parser("produce", help="send stdin's lines as records")
    cli_produce.add_arguments(produce)
    _common(produce)
    produce.set_defaults(func=lambda args: _run(cli_produce.produce(args)))

    consume = subparsers.add_parser("consume", help="print a topic's records")
    consume.add_argument("topic")
    consume.add_argument("--partition", type=int, help="only this partition")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true")
    start.add_argument("--offset", type=int, help="start at this offset (with --partition)")
    consume.add_argument("--max-messages", type=int, default=-1)
    consume.add_argument("--follow", action="store_true", help="keep waiting for new records")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--print-offset", action="store_true",
                         help="print PARTITION:OFFSET: before each record")
    consume.add_argument("--key-delimiter", default=":")
    consume.add_argument("--group", help="consume as a member of this consumer group, from its "
                         "committed offsets (--from-beginning: earliest where none)")
    consume.add_argument("--group-instance-id", help="static membership (with --group)")
    consume.add_argument("--assignment-strategy", default="range,cooperative-sticky",
                         help="with --group: assignors in order of preference")
    consume.add_argument("--timeout-ms", type=int, default=-1,
                         help="with --group: stop after this long without a record (counted "
                         "from its latest rebalance too)")
    consume.add_argument("--consumer-property", action="append", default=[],
                         metavar="NAME=VALUE", help="with --group: a client.Consumer setting, "
                         "e.g. session_timeout_ms=10000 (repeatable)")
    consume.add_argument("--log-level", default="WARNING",
                         help="with --group: the client's log level (INFO shows rebalances)")
    _common(consume)
    consume.set_defaults(func=lambda args: _run(_consume(args)))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", metavar="HOST:PORT[,HOST:PORT]",
                   help="default: $EPOCHLOG_BOOTSTRAP_SERVERS, else the cluster `epochlog "
                   f"cluster up` runs in ./.epochlog, else {DEFAULT_BOOTSTRAP}")


def _run(coro: Any) -> int:
    import uvloop

    try:
        return int(uvloop.run(coro))
    except BrokenPipeError:
        raise  # `| head` closed stdout: the command line ends quietly (epochlog.cli.main)
    except (KafkaError, ConnectionError, TimeoutError, ValueError) as exc:
        print(f"epochlog: {exc}", file=sys.stderr)
        return 1


async def _topics(args: argparse.Namespace) -> int:
    async with ClusterClient(args.bootstrap_server) as cluster:
        if args.action == "create":
            return await _create(cluster, args)
        if args.action == "delete":
            request = DeleteTopicsRequest(topics=[DeleteTopicState(name=t) for t in args.topic],
                                          topic_names=args.topic, timeout_ms=30_000)
            answer = await cluster.request(await cluster.any_connection(), 20, request)
            for result in answer.responses:
                _check(result.error_code, f"delete {result.name}")
                print(f"deleted {result.name}")
            return 0
        await cluster.refresh(args.topic if args.action == "describe" and args.topic else None)
        names = sorted({t for t, _ in cluster.partitions})
        if args.action == "list":
            print("\n".join(names))
            return 0
        wanted = args.topic or names
        for name in wanted:
            code = cluster.topic_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise ValueError(f"topic {name} does not exist (UNKNOWN_TOPIC_OR_PARTITION)")
            _check(code, f"topic {name}")
        elr = await _eligible_replicas(cluster, wanted)
        for name in wanted:
            for v in cluster.partitions_of(name):
                eligible = elr.get((name, v.partition))
                print(f"{name}\tpartition {v.partition}\tleader {v.leader}\tepoch "
                      f"{v.leader_epoch}\treplicas {_ids(v.replicas)}\tisr {_ids(v.isr)}"
                      + (f"\telr {_ids(tuple(eligible))}" if eligible else "")
                      + (f"\toffline {_ids(v.offline)}" if v.offline else ""))
        return 0


async def _eligible_replicas(cluster: ClusterClient, topics: list[str]
                             ) -> dict[tuple[str, int], list[int]]:
    """(topic, partition) -> its eligible leader replicas (KIP-966), through
    DescribeTopicPartitions; empty where the cluster does not serve it (a Kafka before 3.8)."""
    out: dict[tuple[str, int], list[int]] = {}
    if not topics:
        return out
    conn = await cluster.any_connection()
    if ApiKey.DESCRIBE_TOPIC_PARTITIONS not in conn.server_versions:
        return out
    request = DescribeTopicPartitionsRequest(topics=[TopicRequest(name=t) for t in topics])
    for _ in range(PAGES_MAX):
        answer = await cluster.request(conn, ApiKey.DESCRIBE_TOPIC_PARTITIONS, request)
        for t in answer.topics:
            for p in t.partitions:
                out[(t.name or "", p.partition_index)] = list(p.eligible_leader_replicas or [])
        if answer.next_cursor is None:
            break
        request.cursor = answer.next_cursor
    return out


async def _create(cluster: ClusterClient, args: argparse.Namespace) -> int:
    configs = []
    for item in args.config:
        name, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--config {item!r} is not NAME=VALUE")
        configs.append(CreatableTopicConfig(name=name, value=value))
    request = CreateTopicsRequest(topics=[CreatableTopic(
        name=args.topic, num_partitions=args.partitions,
        replication_factor=args.replication_factor, configs=configs)], timeout_ms=30_000)
    answer = await cluster.request(await cluster.any_connection(), 19, request)
    result = answer.topics[0]
    if result.error_code:
        detail = f" ({result.error_message})" if result.error_message else ""
        raise error_for(result.error_code, f"create {args.topic}{detail}")
    print(f"created {args.topic}")
    return 0


def _ids(ids: tuple[int, ...]) -> str:
    return ",".join(map(str, ids)) or "-"


def _check(code: int, what: str) -> None:
    if code:
        raise error_for(code, what)


async def _consume(args: argparse.Namespace) -> int:
    if args.group is not None:
        return await group_consume(args)
    if args.group_instance_id is not None:
        raise ValueError("--group-instance-id needs --group")
    if args.consumer_property:
        raise ValueError("--consumer-property applies with --group")
    return await read_assigned(args, _print)


def _print(out: Any, args: argparse.Namespace, partition: int, offset: int,
           key: bytes | None, value: bytes | None) -> None:
    # One write per record: a reader of a process killed mid-record never sees half a line
    # (with PYTHONUNBUFFERED each write is a system call).
    delimiter = args.key_delimiter.encode()
    line = bytearray()
    if args.print_offset:
        line += b"%d%s%d%s" % (partition, delimiter, offset, delimiter)
    if args.print_key:
        line += (key or b"") + delimiter
    line += (value or b"") + b"\n"
    out.write(line)


async def group_consume(args: argparse.Namespace) -> int:
    """`epochlog consume TOPIC --group G`: a group member until --max-messages records, or
    --timeout-ms without one (or since its latest rebalance), or SIGINT/SIGTERM; it then
    commits and leaves the group, within CLOSE_MS_MAX. Every wait is bounded: a cluster gone
    away (the group's requests failing with no answer for --timeout-ms, or
    GROUP_UNREACHABLE_MS_DEFAULT without it) ends it with exit 1 and what it waited for; a first
    Ctrl-C ends it within CLOSE_MS_MAX (exit 130), a second at once."""
    import inspect
    import logging

    from .consumer import Consumer

    if args.partition is not None or args.offset is not None:
        raise ValueError("--group takes its partitions from the group: not with --partition "
                         "or --offset")
    strategies = [s.strip() for s in args.assignment_strategy.split(",") if s.strip()]
    settings = _consumer_properties(args.consumer_property)
    parameters = inspect.signature(Consumer).parameters
    unknown = sorted(set(settings) - set(parameters))
    if unknown:
        raise ValueError(f"--consumer-property: Consumer has no setting {', '.join(unknown)}")
    for name, value in settings.items():
        default = parameters[name].default
        if isinstance(default, (bool, int)) and type(value) is not type(default):
            kind = "true or false" if isinstance(default, bool) else "an integer"
            raise ValueError(f"--consumer-property {name}={value!r}: expected {kind}")
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    unreachable_ms = args.timeout_ms if args.timeout_ms >= 0 else GROUP_UNREACHABLE_MS_DEFAULT
    with Interrupts("committing what was printed and leaving the group") as interrupts:
        consumer = Consumer(args.bootstrap_server, group_id=args.group,
                            group_instance_id=args.group_instance_id,
                            partition_assignment_strategy=strategies,
                            auto_offset_reset="earliest" if args.from_beginning else "latest",
                            **{"client_id": "epochlog-console-consumer", **settings})
        try:
            await consumer.start()
            consumer.subscribe([args.topic])
            total = args.max_messages if args.max_messages > 0 else None
            with progress(f"consuming {args.topic}", total, unit="records") as bar:
                gave_up = await _group_loop(consumer, args, interrupts.requested, bar,
                                            unreachable_ms)
        finally:
            # closing commits the positions of what was printed (auto-commit), then leaves
            await consumer.close(timeout_ms=min(CLOSE_MS_MAX, max(unreachable_ms, 1000)))
    if gave_up is not None:
        print(f"epochlog: {gave_up}", file=sys.stderr)
        return 1
    return EXIT_INTERRUPTED if interrupts.requested.is_set() else 0


async def _group_loop(consumer: Any, args: argparse.Namespace, stop: asyncio.Event,
                      bar: Progress, unreachable_ms: int) -> str | None:
    """Poll and print until done; None, or why it gave up (the group unreachable)."""
    out = sys.stdout.buffer
    loop = asyncio.get_running_loop()
    remaining = args.max_messages
    idle_s = args.timeout_ms / 1000 if args.timeout_ms >= 0 else None
    # --timeout-ms counts from the last record or the last rebalance, whichever is later, and
    # not before the first: a group's first join may wait out group_initial_rebalance_delay_ms
    # (3 s, more as members keep arriving), and a member must not give up before it had
    # partitions.
    last_record, rebalances = loop.time(), 0
    while remaining != 0 and not stop.is_set():
        records = await consumer.poll(timeout_ms=200, max_records=(
            remaining if remaining > 0 else None))
        for record in records:
            _print(out, args, record.partition, record.offset, record.key, record.value)
        out.flush()
        bar.advance(len(records))
        if records:
            remaining -= len(records) if remaining > 0 else 0
        group = consumer.group_metadata()
        if group["unreachable_ms"] >= unreachable_ms:
            return (f"group {args.group}: no answer from the cluster for "
                    f"{group['unreachable_ms']} ms; waiting for {group['waiting_for']}")
        if records or group["rebalances"] != rebalances:
            last_record, rebalances = loop.time(), group["rebalances"]
        elif idle_s is not None and rebalances and loop.time() - last_record >= idle_s:
            if group["unreachable_ms"]:
                return (f"group {args.group}: no record for {args.timeout_ms} ms, and no "
                        f"answer from the cluster for {group['unreachable_ms']} ms")
            break
    return None


def _consumer_properties(items: list[str]) -> dict[str, Any]:
    """--consumer-property NAME=VALUE items as Consumer keyword arguments: integers and
    true/false are converted, anything else stays a string (the Consumer checks them)."""
    settings: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--consumer-property {item!r} is not NAME=VALUE")
        name, value = name.strip().replace(".", "_"), value.strip()
        if name in {"group_id", "group_instance_id", "partition_assignment_strategy",
                    "auto_offset_reset", "bootstrap_servers"}:
            raise ValueError(f"--consumer-property {name}: use the option for it")
        if value.lower() in ("true", "false"):
            settings[name] = value.lower() == "true"
        else:
            try:
                settings[name] = int(value)
            except ValueError:
                settings[name] = value
    return settings


