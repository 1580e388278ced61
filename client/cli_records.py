"""`epochlog delete-records`: make a topic's oldest records unreadable, as Kafka's
kafka-delete-records.sh does (DeleteRecords on each partition's leader).

    epochlog delete-records orders --offset 1000              # every partition, below 1000
    epochlog delete-records orders --partition 0 --offset -1  # below the high watermark

Prints each partition's new low watermark (the lowest log start among its in-sync replicas).
"""

from __future__ import annotations

import argparse
from typing import Any

from .admin import Admin
from .cli import _common, _run
from .types import TopicPartition


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("delete-records", help="delete a topic's records below an offset")
    p.add_argument("topic")
    p.add_argument("--partition", type=int, action="append", default=[],
                   help="only this partition (repeatable; default: all)")
    p.add_argument("--offset", type=int, required=True,
                   help="delete the records below it; -1: below the high watermark")
    _common(p)
    p.set_defaults(func=lambda args: _run(_delete(args)))


async def _delete(args: argparse.Namespace) -> int:
    if args.offset < -1:
        raise ValueError(f"--offset {args.offset}: an offset is >= 0, or -1 for the high "
                         "watermark")
    async with Admin(args.bootstrap_server) as admin:
        known = [p.partition for p in (await admin.describe_topics([args.topic]))[
            args.topic].partitions]
        missing = sorted(set(args.partition) - set(known))
        if missing:
            raise ValueError(f"{args.topic} has no partition {', '.join(map(str, missing))} "
                             f"(it has {len(known)})")
        wanted = {TopicPartition(args.topic, p): args.offset for p in args.partition or known}
        for tp, low in sorted((await admin.delete_records(wanted)).items()):
            print(f"{tp.topic}\t{tp.partition}\tlow watermark {low}")
    return 0
