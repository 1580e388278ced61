"""`epochlog configs`: a topic's or a broker's settings, as Kafka's kafka-configs.sh.

    epochlog configs describe --topic orders              # every setting: value and source
    epochlog configs describe --broker 1
    epochlog configs alter --topic orders --set retention.ms=60000 --set cleanup.policy=compact
    epochlog configs alter --topic orders --delete retention.ms          # back to the default
    epochlog configs alter --topic orders --set max.message.bytes=0 --validate-only
    epochlog configs alter --broker-defaults --set log.retention.ms=86400000   # every topic

`alter` changes only what it names (IncrementalAlterConfigs). Sources are Kafka's:
DYNAMIC_TOPIC_CONFIG (the topic's own), STATIC_BROKER_CONFIG (the cluster's or broker's
setting), DEFAULT_CONFIG.
"""

from __future__ import annotations

import argparse
from typing import Any

from .admin import Admin, AlterConfigOp, ConfigResource
from .cli import _common, _run

SOURCES = {1: "DYNAMIC_TOPIC_CONFIG", 2: "DYNAMIC_BROKER_CONFIG",
           3: "DYNAMIC_DEFAULT_BROKER_CONFIG", 4: "STATIC_BROKER_CONFIG", 5: "DEFAULT_CONFIG"}


def add_parser(subparsers: Any) -> None:
    configs = subparsers.add_parser("configs", help="describe and alter topic and broker "
                                    "settings")
    actions = configs.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    describe = actions.add_parser("describe", help="every setting, its value and source")
    alter = actions.add_parser("alter", help="set or delete topic settings")
    for p in (describe, alter):
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--topic")
        which.add_argument("--broker-defaults", action="store_true",
                           help="the cluster's dynamic defaults of topic settings, under Kafka's "
                                "broker names (log.retention.ms, ...)")
        if p is describe:
            which.add_argument("--broker", type=int, help="a broker's id")
        _common(p)
        p.set_defaults(func=lambda args: _run(_configs(args)))
    describe.add_argument("--overrides-only", action="store_true",
                          help="only settings that are not defaults")
    alter.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                       help="repeatable")
    alter.add_argument("--delete", action="append", default=[], metavar="NAME",
                       help="back to the default; repeatable")
    alter.add_argument("--validate-only", action="store_true",
                       help="check the change without making it")


async def _configs(args: argparse.Namespace) -> int:
    async with Admin(args.bootstrap_server) as admin:
        if args.action == "describe":
            resource = _resource(args)
            entries = (await admin.describe_configs([resource]))[resource]
            for name, e in sorted(entries.items()):
                if args.overrides_only and e.source == 5:
                    continue
                print(f"{name}={'' if e.value is None else e.value}\t"
                      f"{SOURCES.get(e.source, e.source)}"
                      + ("\tread-only" if e.read_only else ""))
            return 0
        ops = [AlterConfigOp(name, "delete") for name in args.delete]
        for pair in args.set:
            name, sep, value = pair.partition("=")
            if not sep or not name:
                raise ValueError(f"--set {pair!r}: expected NAME=VALUE")
            ops.append(AlterConfigOp(name.strip(), "set", value))
        if not ops:
            raise ValueError("nothing to alter: give --set NAME=VALUE or --delete NAME")
        resource = _resource(args)
        await admin.incremental_alter_configs({resource: ops}, validate_only=args.validate_only)
        what = f"topic {args.topic}" if args.topic else "the cluster's defaults"
        print(f"{'valid' if args.validate_only else 'altered'}: {what} "
              + ", ".join(f"{op.name}" + (f"={op.value}" if op.op == "set" else " (default)")
                          for op in ops))
        return 0


def _resource(args: argparse.Namespace) -> ConfigResource:
    if args.topic:
        return ConfigResource("topic", args.topic)
    if args.broker_defaults:
        return ConfigResource("broker", "")
    return ConfigResource("broker", str(args.broker))
