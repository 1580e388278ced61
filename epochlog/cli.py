"""`epochlog`: dispatch to the subcommands each package contributes.

A subcommand lives beside the code it drives and exposes `add_parser(subparsers)`, which
registers its parser and sets `func(args) -> int` as the default. This module only lists them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# Modules that contribute subcommands, in the order `epochlog --help` lists them.
SUBCOMMAND_MODULES = (
    "protocol.cli",
    "broker.tools",
    "broker.cli",
    "controller.cli",
    "epochlog.cluster",
    "client.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="epochlog",
        description="A replicated, Kafka-wire-compatible log broker cluster in Python.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `epochlog ... | head` is normal use
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
