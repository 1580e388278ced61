"""Command-line tools in the spirit of Kafka's: `epochlog topics`, `produce`, `consume`.

    epochlog topics create orders --partitions 3 --replication-factor 1 --config retention.ms=60000
    epochlog topics list | describe [TOPIC ...] | delete TOPIC ...
    printf 'k1:v1\\nk2:v2\\n' | epochlog produce orders --key-delimiter :
    epochlog consume orders --from-beginning --print-key
    epochlog consume orders --group billing --from-beginning

Every tool takes --bootstrap-server (default 127.0.0.1:9092, what `epochlog cluster up` gives).
Kafka errors are printed with their name and the tool exits 1. Produce sends each line as a
record; lines are batched per partition (keyed lines by Java's murmur2, unkeyed in turn) and each
batch is acknowledged before the tool exits. Consume reads every partition (or one) from the
chosen offset and stops at the end unless --follow. With --group it is a member of that consumer
group (client.Consumer with subscribe()): it reads the partitions the group assigns it from the
group's committed offsets, auto-commits, and on SIGINT/SIGTERM, --max-messages or --timeout-ms
commits what it printed and leaves the group.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from typing import Any

from protocol.apis.create_topics import CreatableTopic, CreatableTopicConfig, CreateTopicsRequest
from protocol.apis.delete_topics import DeleteTopicsRequest, DeleteTopicState
from protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic
from protocol.apis.list_offsets import ListOffsetsPartition, ListOffsetsRequest, ListOffsetsTopic
from protocol.apis.produce import PartitionProduceData, ProduceRequest, TopicProduceData
from protocol.compression import Compression
from protocol.error_codes import ErrorCode
from protocol.records import build_batch, iter_records
from protocol.registry import APIS

from .cluster import ClusterClient, PartitionView
from .errors import KafkaError, error_for
from .partitioner import RoundRobin, partition_for_key

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BATCH_RECORDS_MAX = 10_000
BATCH_BYTES_MAX = 1024 * 1024
FETCH_PARTITION_BYTES_MAX = 1024 * 1024
PRODUCE_ATTEMPTS_MAX = 5
RETRIABLE_LEADERSHIP = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE,
                        ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH,
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


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
    produce.add_argument("topic")
    produce.add_argument("--key-delimiter", help="split each line into key and value at this")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument("--acks", choices=["0", "1", "all"], default="all")
    produce.add_argument("--compression", choices=[c.name.lower() for c in Compression],
                         default="none")
    _common(produce)
    produce.set_defaults(func=lambda args: _run(_produce(args)))

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
    p.add_argument("--bootstrap-server", default=DEFAULT_BOOTSTRAP, help="HOST:PORT[,HOST:PORT]")


def _run(coro: Any) -> int:
    import uvloop

    try:
        return int(uvloop.run(coro))
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
        for name in args.topic or names:
            _check(cluster.topic_errors.get(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                   f"topic {name}")
            for v in cluster.partitions_of(name):
                print(f"{name}\tpartition {v.partition}\tleader {v.leader}\tepoch "
                      f"{v.leader_epoch}\treplicas {_ids(v.replicas)}\tisr {_ids(v.isr)}"
                      + (f"\toffline {_ids(v.offline)}" if v.offline else ""))
        return 0


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


async def _produce(args: argparse.Namespace) -> int:
    lines = sys.stdin.buffer.read().splitlines()
    delimiter = args.key_delimiter.encode() if args.key_delimiter else None
    acks = {"0": 0, "1": 1, "all": -1}[args.acks]
    codec = Compression[args.compression.upper()]
    async with ClusterClient(args.bootstrap_server) as cluster:
        views = await cluster.wait_topic(args.topic, auto_create=True)
        by_partition: dict[int, list[tuple[bytes | None, bytes, None, None]]] = defaultdict(list)
        spread = RoundRobin()
        for line in lines:
            key, value = (line.split(delimiter, 1) + [b""])[:2] if delimiter else (None, line)
            if args.partition is not None:
                partition = args.partition
            elif key is not None:
                partition = partition_for_key(key, len(views))
            else:
                partition = spread.next([v.partition for v in views])
            by_partition[partition].append((key, value, None, None))
        for partition, records in sorted(by_partition.items()):
            for start in range(0, len(records), BATCH_RECORDS_MAX):
                batch = build_batch(records[start:start + BATCH_RECORDS_MAX], compression=codec)
                await _send_batch(cluster, args.topic, partition, batch, acks)
        print(f"produced {len(lines)} records to {args.topic}", file=sys.stderr)
    return 0


async def _send_batch(cluster: ClusterClient, topic: str, partition: int, batch: bytes,
                      acks: int) -> None:
    for attempt in range(PRODUCE_ATTEMPTS_MAX):
        view = cluster.partitions[(topic, partition)]
        request = ProduceRequest(acks=acks, timeout_ms=30_000, topic_data=[TopicProduceData(
            topic, [PartitionProduceData(index=partition, records=batch,
                                         current_leader_epoch=view.leader_epoch)])])
        conn = await cluster.connection(view.leader)
        answer = await conn.request(APIS[0], conn.version_for(APIS[0]), request,
                                    expect_response=acks != 0)
        if answer is None:
            return
        code = answer.responses[0].partition_responses[0].error_code
        if code == 0:
            return
        if code not in RETRIABLE_LEADERSHIP or attempt == PRODUCE_ATTEMPTS_MAX - 1:
            raise error_for(code, f"produce to {topic}-{partition}")
        await asyncio.sleep(0.1 * (attempt + 1))
        await cluster.wait_topic(topic)


async def _consume(args: argparse.Namespace) -> int:
    if args.group is not None:
        return await group_consume(args)
    if args.group_instance_id is not None:
        raise ValueError("--group-instance-id needs --group")
    out = sys.stdout.buffer
    remaining = args.max_messages
    async with ClusterClient(args.bootstrap_server) as cluster:
        views = await cluster.wait_topic(args.topic)
        if args.partition is not None:
            views = [v for v in views if v.partition == args.partition]
            if not views:
                raise ValueError(f"{args.topic} has no partition {args.partition}")
        positions = await _start_offsets(cluster, args, views)
        while remaining != 0:
            got_any, at_end = False, True
            for view in views:
                records, high_watermark = await _fetch(cluster, view, positions[view.partition],
                                                       wait_ms=500 if args.follow else 0)
                for record in records:
                    if record.offset < positions[view.partition]:
                        continue  # a batch starts before the position asked for
                    _print(out, args, view.partition, record.offset, record.key,
                           record.value)
                    positions[view.partition] = record.offset + 1
                    got_any = True
                    remaining -= 1
                    if remaining == 0:
                        break
                at_end = at_end and positions[view.partition] >= high_watermark
                if remaining == 0:
                    break
            out.flush()
            if at_end and not got_any and not args.follow:
                break
    return 0


def _print(out: Any, args: argparse.Namespace, partition: int, offset: int,
           key: bytes | None, value: bytes | None) -> None:
    delimiter = args.key_delimiter.encode()
    if args.print_offset:
        out.write(b"%d%s%d%s" % (partition, delimiter, offset, delimiter))
    if args.print_key:
        out.write((key or b"") + delimiter)
    out.write((value or b"") + b"\n")


async def group_consume(args: argparse.Namespace) -> int:
    """`epochlog consume TOPIC --group G`: a group member until --max-messages records, or
    --timeout-ms without one (or since its latest rebalance), or SIGINT/SIGTERM; it then
    commits and leaves the group."""
    import inspect
    import logging
    import signal

    from .consumer import Consumer

    if args.partition is not None or args.offset is not None:
        raise ValueError("--group takes its partitions from the group: not with --partition "
                         "or --offset")
    out = sys.stdout.buffer
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    remaining = args.max_messages
    idle_s = args.timeout_ms / 1000 if args.timeout_ms >= 0 else None
    strategies = [s.strip() for s in args.assignment_strategy.split(",") if s.strip()]
    settings = _consumer_properties(args.consumer_property)
    unknown = sorted(set(settings) - set(inspect.signature(Consumer).parameters))
    if unknown:
        raise ValueError(f"--consumer-property: Consumer has no setting {', '.join(unknown)}")
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    async with Consumer(args.bootstrap_server, group_id=args.group,
                        group_instance_id=args.group_instance_id,
                        partition_assignment_strategy=strategies,
                        auto_offset_reset="earliest" if args.from_beginning else "latest",
                        **{"client_id": "epochlog-console-consumer", **settings}) as consumer:
        consumer.subscribe([args.topic])
        # --timeout-ms counts from the last record or the last rebalance, whichever is later,
        # and not before the first: a group's first join may wait out
        # group_initial_rebalance_delay_ms (3 s, more as members keep arriving), and a member
        # must not give up before it had partitions.
        last_record, rebalances = loop.time(), 0
        while remaining != 0 and not stop.is_set():
            records = await consumer.poll(timeout_ms=200, max_records=(
                remaining if remaining > 0 else None))
            for record in records:
                _print(out, args, record.partition, record.offset, record.key, record.value)
            out.flush()
            if records:
                remaining -= len(records) if remaining > 0 else 0
            now_rebalances = consumer.group_metadata()["rebalances"]
            if records or now_rebalances != rebalances:
                last_record, rebalances = loop.time(), now_rebalances
            elif idle_s is not None and rebalances and loop.time() - last_record >= idle_s:
                break
    return 0  # closing committed the positions of what was printed (auto-commit), then left


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


async def _start_offsets(cluster: ClusterClient, args: argparse.Namespace,
                         views: list[PartitionView]) -> dict[int, int]:
    if args.offset is not None:
        return {v.partition: args.offset for v in views}
    timestamp = -2 if args.from_beginning else -1
    positions = {}
    for view in views:
        request = ListOffsetsRequest(replica_id=-1, topics=[ListOffsetsTopic(args.topic, [
            ListOffsetsPartition(view.partition, view.leader_epoch, timestamp)])])
        answer = await cluster.request_broker(view.leader, 2, request)
        result = answer.topics[0].partitions[0]
        _check(result.error_code, f"list offsets of {args.topic}-{view.partition}")
        positions[view.partition] = result.offset
    return positions


async def _fetch(cluster: ClusterClient, view: PartitionView, offset: int, wait_ms: int
                 ) -> tuple[list[Any], int]:
    request = FetchRequest(replica_id=-1, max_wait_ms=wait_ms, min_bytes=1,
                           max_bytes=FETCH_PARTITION_BYTES_MAX, topics=[FetchTopic(view.topic, [
                               FetchPartition(partition=view.partition,
                                              current_leader_epoch=view.leader_epoch,
                                              fetch_offset=offset,
                                              partition_max_bytes=FETCH_PARTITION_BYTES_MAX)])])
    answer = await cluster.request_broker(view.leader, 1, request)
    data = answer.responses[0].partitions[0]
    _check(data.error_code, f"fetch {view.topic}-{view.partition} at {offset}")
    records = list(iter_records(data.records, allow_partial_tail=True)) if data.records else []
    return records, data.high_watermark
