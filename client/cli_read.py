"""`epochlog consume TOPIC` without --group: read partitions by assignment, through the library's
Consumer, so a leader failover, a broker restart or a truncation is handled the way the library
handles it (KIP-320 fencing and validation) instead of ending the command.

Where it starts: --offset N (with --partition; refused without it, as Kafka's console consumer
refuses it), --from-beginning, or the end. A topic that does not exist is said so (exit 1).
Where it stops: at the end offsets the partitions had when it started (like `kcat -e`), or never
with --follow, or after --max-messages. Every wait is bounded: without --follow, no record for
IDLE_MS_MAX while some partition is still short of its end is an error naming them (the cluster
went away); with --follow it waits for new records until Ctrl-C (exit 130; a second Ctrl-C ends
it at once).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from .admin import Admin
from .console import EXIT_INTERRUPTED, Interrupts, Progress, progress
from .errors import UnknownTopicOrPartitionError
from .types import TopicPartition

IDLE_MS_MAX = 30_000
POLL_MS = 500


async def topic_partitions(admin: Admin, topic: str) -> list[int]:
    """The topic's partition numbers; ValueError saying it does not exist (no topic is made:
    a tool that reads or names partitions of a missing topic is told, not given a new one)."""
    try:
        described = (await admin.describe_topics([topic]))[topic]
    except UnknownTopicOrPartitionError:
        raise ValueError(f"topic {topic} does not exist (UNKNOWN_TOPIC_OR_PARTITION)") from None
    return sorted(p.partition for p in described.partitions)


async def read_assigned(args: argparse.Namespace,
                        emit: Any) -> int:
    """emit(out, args, partition, offset, key, value) prints one record."""
    from .consumer import Consumer

    if args.offset is not None and args.partition is None:
        # as Kafka's console consumer: an offset is a position in one partition
        raise ValueError("--offset needs --partition: an offset is a position in one partition")
    async with Admin(args.bootstrap_server) as admin:
        known = await topic_partitions(admin, args.topic)
        if args.partition is not None and args.partition not in known:
            raise ValueError(f"{args.topic} has no partition {args.partition} (it has "
                             f"{len(known)})")
        tps = [TopicPartition(args.topic, p) for p in known
               if args.partition is None or p == args.partition]
        ends = {tp: r.offset for tp, r in (await admin.list_offsets(
            {tp: "latest" for tp in tps})).items()}
    if args.offset is not None and args.offset < 0:
        raise ValueError(f"--offset {args.offset}: an offset is >= 0")
    with Interrupts("stopping") as interrupts:
        consumer = Consumer(args.bootstrap_server, client_id="epochlog-console-consumer",
                            enable_auto_commit=False,
                            auto_offset_reset="earliest" if args.from_beginning else "latest")
        try:
            await consumer.start()
            consumer.assign(tps)
            for tp in tps:
                if args.offset is not None:
                    consumer.seek(tp, args.offset)
                elif args.from_beginning:
                    consumer.seek_to_beginning(tp)
                else:
                    consumer.seek_to_end(tp)
            total = args.max_messages if args.max_messages > 0 else None
            with progress(f"consuming {args.topic}", total, unit="records") as bar:
                gave_up = await _loop(consumer, args, ends, bar, interrupts.requested, emit)
        finally:
            await consumer.close(timeout_ms=5000)
    if gave_up is not None:
        print(f"epochlog: {gave_up}", file=sys.stderr)
        return 1
    return EXIT_INTERRUPTED if interrupts.requested.is_set() else 0


async def _loop(consumer: Any, args: argparse.Namespace, ends: dict[TopicPartition, int],
                bar: Progress, stop: asyncio.Event, emit: Any) -> str | None:
    out = sys.stdout.buffer
    loop = asyncio.get_running_loop()
    remaining = args.max_messages
    positions: dict[TopicPartition, int] = {}
    for tp in ends:
        positions[tp] = await consumer.position(tp)
    last_progress = loop.time()
    while remaining != 0 and not stop.is_set():
        if not args.follow and all(positions[tp] >= end for tp, end in ends.items()):
            return None
        records = await consumer.poll(timeout_ms=POLL_MS, max_records=(
            remaining if remaining > 0 else None))
        for record in records:
            emit(out, args, record.partition, record.offset, record.key, record.value)
            positions[TopicPartition(record.topic, record.partition)] = record.offset + 1
        out.flush()
        bar.advance(len(records))
        if remaining > 0:
            remaining -= len(records)
        if records:
            last_progress = loop.time()
        elif not args.follow:
            for tp in ends:  # a compacted or truncated range: the position moves without records
                positions[tp] = max(positions[tp], consumer.next_offsets().get(tp, (0, -1))[0])
            if (loop.time() - last_progress) * 1000 >= IDLE_MS_MAX:
                short = [f"{tp.partition} (at {positions[tp]} of {end})"
                         for tp, end in ends.items() if positions[tp] < end]
                return (f"no record for {IDLE_MS_MAX} ms while {args.topic} partitions "
                        f"{', '.join(short)} were short of their end; is the cluster up?")
    return None
