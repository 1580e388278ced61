"""`epochlog transactions`: the transaction coordinators' state from the command line, as
Kafka's kafka-transactions.sh lists and describes it.

    epochlog transactions list                              # id, producer id, state, coordinator
    epochlog transactions list --state Ongoing --open-longer-than-ms 60000   # hanging ones
    epochlog transactions describe payments-1               # epoch, timeout, start, partitions
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import Any

from .admin import Admin
from .cli import _common, _run


def add_parser(subparsers: Any) -> None:
    txns = subparsers.add_parser("transactions", help="list and describe transactions")
    actions = txns.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="every transactional id the coordinators hold")
    listing.add_argument("--state", action="append", default=[], metavar="STATE",
                         help="repeatable; Kafka's names: Empty, Ongoing, PrepareCommit, "
                              "PrepareAbort, CompleteCommit, CompleteAbort")
    listing.add_argument("--producer-id", action="append", default=[], type=int, metavar="N")
    listing.add_argument("--open-longer-than-ms", type=int, default=-1, metavar="MS",
                         help="only transactions open longer than this")
    describe = actions.add_parser("describe", help="a transactional id's state in full")
    describe.add_argument("transactional_id", nargs="+")
    for p in (listing, describe):
        _common(p)
        p.set_defaults(func=lambda args: _run(_transactions(args)))


async def _transactions(args: argparse.Namespace) -> int:
    async with Admin(args.bootstrap_server) as admin:
        if args.action == "list":
            for t in await admin.list_transactions(args.state, args.producer_id,
                                                   args.open_longer_than_ms):
                print(f"{t.transactional_id}\tproducer {t.producer_id}\t{t.state}\t"
                      f"coordinator {t.coordinator}")
            return 0
        for tid, d in (await admin.describe_transactions(args.transactional_id)).items():
            started = "-" if d.transaction_start_time_ms < 0 else datetime.fromtimestamp(
                d.transaction_start_time_ms / 1000, UTC).isoformat(timespec="milliseconds")
            print(f"transactional id {tid}: {d.state}, producer {d.producer_id} epoch "
                  f"{d.producer_epoch}, timeout {d.transaction_timeout_ms} ms, started "
                  f"{started}, coordinator {d.coordinator}")
            for tp in d.partitions:
                print(f"  {tp.topic}\t{tp.partition}")
        return 0
