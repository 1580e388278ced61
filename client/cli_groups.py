"""`epochlog groups`: consumer groups from the command line, as Kafka's kafka-consumer-groups.sh.

    epochlog groups list
    epochlog groups describe billing             # per partition: committed, end, lag, owner
    epochlog groups reset-offsets billing --topic orders --to-earliest            # dry run
    epochlog groups reset-offsets billing --topic orders:0,1 --shift-by -10 --execute
    epochlog groups delete-offsets billing --topic orders
    epochlog groups delete billing

As in Kafka's tool, reset-offsets only prints its plan unless --execute is given, and works
only on a group without live members (a group with members refuses: stop them first). Resets
are committed without a leader epoch (-1): the consumer then has nothing to validate the new
position against, which is what a person resetting a group asks for.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from epochlog.protocol.error_codes import ErrorCode

from .admin import Admin
from .cli import _common, _run
from .cli_read import topic_partitions
from .errors import KafkaError
from .types import TopicPartition

ACTIONS = ("list", "describe", "reset-offsets", "delete-offsets", "delete")


def add_parser(subparsers: Any) -> None:
    groups = subparsers.add_parser("groups", help="list, describe, reset and delete consumer "
                                   "groups")
    actions = groups.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    listing = actions.add_parser("list", help="every group of the cluster, with its state")
    describe = actions.add_parser("describe", help="members, committed offsets and lag")
    describe.add_argument("group", nargs="+")
    reset = actions.add_parser("reset-offsets", help="move a group's committed offsets "
                               "(a dry run unless --execute)")
    reset.add_argument("group")
    _topic_arguments(reset)
    to = reset.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true")
    to.add_argument("--to-latest", action="store_true")
    to.add_argument("--to-offset", type=int, metavar="N")
    to.add_argument("--shift-by", type=int, metavar="N", help="from the committed offset")
    to.add_argument("--to-datetime", metavar="ISO-8601",
                    help="the first offset at or after this time, e.g. 2026-11-25T10:00:00Z")
    reset.add_argument("--execute", action="store_true", help="commit the plan")
    delete_offsets = actions.add_parser("delete-offsets", help="remove committed offsets")
    delete_offsets.add_argument("group")
    _topic_arguments(delete_offsets)
    delete = actions.add_parser("delete", help="delete groups without members, with their "
                                "offsets")
    delete.add_argument("group", nargs="+")
    for p in (listing, describe, reset, delete_offsets, delete):
        _common(p)
        p.set_defaults(func=lambda args: _run(_groups(args)))


def _topic_arguments(p: argparse.ArgumentParser) -> None:
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                       help="repeatable; without partitions, all of the topic's")
    which.add_argument("--all-topics", action="store_true",
                       help="every partition the group has an offset for")


async def _groups(args: argparse.Namespace) -> int:
    async with Admin(args.bootstrap_server) as admin:
        if args.action == "list":
            for g in await admin.list_consumer_groups():
                print(f"{g.group_id}\t{g.state or '-'}\t{g.protocol_type or '-'}\t"
                      f"coordinator {g.coordinator}")
            return 0
        if args.action == "describe":
            return await _describe(admin, args.group)
        if args.action == "delete":
            failed = 0
            for group, error in (await admin.delete_consumer_groups(
                    args.group, raise_errors=False)).items():
                if error is None:
                    print(f"deleted group {group}")
                else:
                    failed += 1
                    print(f"epochlog: {error}", file=sys.stderr)
            return 1 if failed else 0
        partitions = await _partitions(admin, args)
        if args.action == "delete-offsets":
            results = await admin.delete_consumer_group_offsets(args.group, partitions,
                                                                raise_errors=False)
            for tp, error in sorted(results.items()):
                print(f"{tp.topic}\t{tp.partition}\t{'deleted' if error is None else error}")
            return 1 if any(results.values()) else 0
        return await _reset(admin, args, partitions)


async def _partitions(admin: Admin, args: argparse.Namespace) -> list[TopicPartition]:
    if args.all_topics:
        found = sorted(await admin.list_consumer_group_offsets(args.group))
        if not found:
            raise ValueError(f"group {args.group} has no committed offsets")
        return found
    out: list[TopicPartition] = []
    for spec in args.topic:
        topic, _, numbers = spec.partition(":")
        if not topic:
            raise ValueError(f"--topic {spec!r}: no topic name")
        known = set(await topic_partitions(admin, topic))
        if numbers:
            try:
                wanted = [int(n) for n in numbers.split(",")]
            except ValueError:
                raise ValueError(f"--topic {spec!r}: partitions must be numbers like "
                                 "orders:0,1") from None
            missing = sorted(set(wanted) - known)
            if missing:
                raise ValueError(f"--topic {spec!r}: {topic} has no partition "
                                 f"{', '.join(map(str, missing))} (it has {len(known)})")
        else:
            wanted = sorted(known)
        out += [TopicPartition(topic, p) for p in wanted]
    return sorted(set(out))


async def _describe(admin: Admin, groups: list[str]) -> int:
    """Each group's members, committed offsets and lag; a group that does not exist (its
    coordinator answers Dead, as Kafka's does for an unknown id) is said so on stderr, and
    makes the exit 1 once the others are shown."""
    described = await admin.describe_consumer_groups(groups)
    missing = 0
    for group in groups:
        d = described[group]
        if d.state == "Dead":
            print(f"epochlog: no such group {group}", file=sys.stderr)
            missing += 1
            continue
        members = f"{len(d.members)} member" + ("" if len(d.members) == 1 else "s")
        print(f"group {group}: {d.state or 'unknown'}, {members}, coordinator {d.coordinator}")
        owners = {tp: m for m in d.members for tp in m.assignment}
        committed = await admin.list_consumer_group_offsets(group)
        shown = sorted(set(committed) | set(owners))
        if not shown:
            continue
        ends = await admin.list_offsets({tp: "latest" for tp in shown})
        print("TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tCONSUMER-ID\tHOST\t"
              "CLIENT-ID")
        for tp in shown:
            current = committed[tp][0] if tp in committed else None
            end = ends[tp].offset
            lag = "-" if current is None else str(max(0, end - current))
            m = owners.get(tp)
            print(f"{tp.topic}\t{tp.partition}\t{'-' if current is None else current}\t{end}\t"
                  f"{lag}\t{m.member_id if m else '-'}\t{m.host if m else '-'}\t"
                  f"{m.client_id if m else '-'}")
    return 1 if missing else 0


async def _reset(admin: Admin, args: argparse.Namespace, partitions: list[TopicPartition]
                 ) -> int:
    committed = await admin.list_consumer_group_offsets(args.group, partitions)
    earliest = await admin.list_offsets({tp: "earliest" for tp in partitions})
    latest = await admin.list_offsets({tp: "latest" for tp in partitions})
    plan: dict[TopicPartition, int] = {}
    if args.to_datetime is not None:
        at = await admin.list_offsets({tp: _millis(args.to_datetime) for tp in partitions})
    for tp in partitions:
        low, high = earliest[tp].offset, latest[tp].offset
        if args.to_earliest:
            target = low
        elif args.to_latest:
            target = high
        elif args.to_offset is not None:
            target = args.to_offset
        elif args.shift_by is not None:
            if tp not in committed:
                raise ValueError(f"--shift-by: group {args.group} has no committed offset "
                                 f"for {tp.topic}-{tp.partition}")
            target = committed[tp][0] + args.shift_by
        else:
            target = at[tp].offset if at[tp].offset >= 0 else high
        plan[tp] = min(max(target, low), high)  # as Kafka's tool: clamped to the log
    print("TOPIC\tPARTITION\tNEW-OFFSET")
    for tp, offset in plan.items():
        print(f"{tp.topic}\t{tp.partition}\t{offset}")
    if not args.execute:
        print("(dry run: add --execute to commit these offsets)", file=sys.stderr)
        return 0
    try:
        await admin.alter_consumer_group_offsets(args.group, plan)
    except KafkaError as exc:
        if exc.code is not None and exc.code in _LIVE_MEMBER_CODES:
            raise ValueError(f"group {args.group} has live members: stop them before "
                             f"resetting its offsets ({exc})") from exc
        raise
    print(f"committed the new offsets of group {args.group}", file=sys.stderr)
    return 0


# What a coordinator answers a commit without a generation to a group that has members.
_LIVE_MEMBER_CODES = frozenset({ErrorCode.ILLEGAL_GENERATION, ErrorCode.UNKNOWN_MEMBER_ID,
                                ErrorCode.REBALANCE_IN_PROGRESS})


def _millis(text: str) -> int:
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--to-datetime {text!r} is not an ISO-8601 time like "
                         "2026-11-25T10:00:00Z") from None
    if when.tzinfo is None:
        raise ValueError(f"--to-datetime {text!r} needs a time zone (Z or +HH:MM)")
    return int(when.timestamp() * 1000)
