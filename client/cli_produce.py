"""`epochlog produce TOPIC`: stdin's lines as records, through the library's Producer.

    printf 'k1:v1\\nk2:v2\\n' | epochlog produce orders --key-delimiter :
    epochlog produce orders < events.txt          # a progress bar when stderr is a terminal

Each line is sent as it is read (not after reading all of stdin), with `await producer.send()`,
so batches are bounded in bytes by --batch-size and wait at most --linger-ms, as Kafka's console
producer does; keyed lines go to murmur2(key)'s partition, unkeyed ones stick to a partition
per batch. Acknowledgements come back while reading goes on.

It ends by itself in every case, within bounds a user can set:
- the end of stdin: everything sent is acknowledged (or fails) within --delivery-timeout-ms, and
  the tool says how many records went out;
- a record that cannot be delivered (the cluster went away, a partition has no leader for the
  delivery timeout, a record too large): reading stops, what is in flight is settled, and the
  tool prints one line naming the first error and exits 1;
- Ctrl-C or SIGTERM: reading stops, what was read is delivered within the delivery timeout, exit
  130; a second Ctrl-C quits at once.
Bad input (a partition the topic does not have, a --producer-property that is not a setting)
is one line and exit 1, never a traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from .console import EXIT_INTERRUPTED, Interrupts, StdinLines, progress
from .errors import KafkaError, KafkaTimeoutError, UnknownTopicOrPartitionError
from .producer import DeliveryFuture, Producer

DELIVERY_TIMEOUT_MS_DEFAULT = 120_000  # Kafka's delivery.timeout.ms: a failover fits in it
REQUEST_TIMEOUT_MS_MAX = 30_000


def add_arguments(produce: argparse.ArgumentParser) -> None:
    produce.add_argument("topic")
    produce.add_argument("--key-delimiter", help="split each line into key and value at this")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument("--acks", choices=["0", "1", "all"], default="all")
    produce.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"],
                         default="none")
    produce.add_argument("--batch-size", type=int, default=16384,
                         help="bytes of records per partition batch (default 16384)")
    produce.add_argument("--linger-ms", type=float, default=5,
                         help="how long a batch waits for more records (default 5)")
    produce.add_argument("--delivery-timeout-ms", type=int, default=DELIVERY_TIMEOUT_MS_DEFAULT,
                         help="give up on a record (and the tool) after this (default 120000, "
                         "Kafka's)")
    produce.add_argument("--producer-property", action="append", default=[],
                         metavar="NAME=VALUE", help="any other Producer setting, e.g. "
                         "enable_idempotence=false")
    produce.add_argument("--log-level", default="WARNING",
                         help="the library's log level on stderr (INFO shows retries)")


def producer_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The Producer's settings from the flags; ValueError naming a bad one."""
    if args.delivery_timeout_ms <= 0:
        raise ValueError(f"--delivery-timeout-ms must be positive, not {args.delivery_timeout_ms}")
    settings: dict[str, Any] = {
        "acks": args.acks, "compression_type": None if args.compression == "none"
        else args.compression, "batch_size": args.batch_size, "linger_ms": args.linger_ms,
        "delivery_timeout_ms": args.delivery_timeout_ms,
        "max_block_ms": args.delivery_timeout_ms,
        "request_timeout_ms": min(REQUEST_TIMEOUT_MS_MAX, args.delivery_timeout_ms),
        "client_id": "epochlog-console-producer"}
    for item in args.producer_property:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--producer-property {item!r} is not NAME=VALUE")
        settings[name.strip()] = _typed(value.strip())
    return settings


def _typed(value: str) -> Any:
    lowered = value.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value


class _Outcomes:
    """Acknowledgements as they come back: counts, and the first failure."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.first_error: BaseException | None = None
        self.failure = asyncio.Event()

    def __call__(self, delivery: DeliveryFuture) -> None:
        error = delivery.exception()
        if error is None:
            self.acked += 1
            return
        self.failed += 1
        if self.first_error is None:
            self.first_error = error
            self.failure.set()


async def produce(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = producer_settings(args)
    try:
        producer = Producer(args.bootstrap_server, **settings)
    except TypeError as exc:  # an unknown --producer-property
        raise ValueError(f"--producer-property: {exc}") from None
    delimiter = args.key_delimiter.encode() if args.key_delimiter else None
    outcomes = _Outcomes()
    read = 0
    with Interrupts("stopping after what was read is delivered") as interrupts:
        async with producer:
            if args.partition is not None:
                await _check_partition(producer, args.topic, args.partition)
            stdin = StdinLines(sys.stdin.buffer)
            with progress(f"producing to {args.topic}", stdin.total_bytes) as bar:
                seen = 0
                async for line in stdin.lines(interrupts.requested, outcomes.failure):
                    key, value = _split(line, delimiter)
                    delivery = await producer.send(args.topic, value, key,
                                                   partition=args.partition)
                    delivery.add_done_callback(outcomes)
                    read += 1
                    bar.advance(stdin.bytes_read - seen)
                    seen = stdin.bytes_read
            await _settle(producer, args.delivery_timeout_ms)
    if outcomes.first_error is not None:
        print(f"epochlog: {outcomes.failed} of {read} records were not delivered to "
              f"{args.topic}: {outcomes.first_error}", file=sys.stderr)
        return 1
    print(f"produced {_records(outcomes.acked)} to {args.topic}", file=sys.stderr)
    return EXIT_INTERRUPTED if interrupts.requested.is_set() else 0


async def _check_partition(producer: Producer, topic: str, partition: int) -> None:
    partitions = await producer.partitions_for(topic)
    if not 0 <= partition < len(partitions):
        raise UnknownTopicOrPartitionError(f"{topic} has no partition {partition} (it has "
                                           f"{len(partitions)}: 0-{len(partitions) - 1})")


def _records(n: int) -> str:
    return f"{n} record" if n == 1 else f"{n} records"


def _split(line: bytes, delimiter: bytes | None) -> tuple[bytes | None, bytes]:
    if delimiter is None:
        return None, line
    key, sep, value = line.partition(delimiter)
    return (key, value) if sep else (key, b"")


async def _settle(producer: Producer, timeout_ms: int) -> None:
    """Every record sent is acknowledged or failed (each fails by itself after the delivery
    timeout, so this is bounded); a flush that outlives it is a bug, said as a timeout."""
    try:
        await producer.flush(timeout_ms=timeout_ms + 5_000)
    except KafkaTimeoutError as exc:
        raise KafkaError(f"records still unanswered after the delivery timeout: {exc}") from None
