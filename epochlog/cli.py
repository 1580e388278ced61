"""`epochlog`: dispatch to the subcommands each package contributes.

A subcommand lives beside the code it drives and exposes `add_parser(subparsers)`, which
registers its parser and sets `func(args) -> int` as the default. This module lists them, and
fills in the bootstrap servers of every subcommand that takes `--bootstrap-server` and was not
given it (bootstrap.py: the environment, the folder's cluster, the default), in one place.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import sys
from collections.abc import Sequence
from pathlib import Path

# Modules that contribute subcommands, in the order `epochlog --help` lists them.
SUBCOMMAND_MODULES = (
    "epochlog.protocol.cli",
    "epochlog.broker.tools",
    "epochlog.broker.cli",
    "epochlog.controller.cli",
    "epochlog.cluster",
    "epochlog.client.cli",
    "epochlog.client.cli_groups",
    "epochlog.client.cli_txns",
    "epochlog.client.cli_records",
    "epochlog.client.cli_configs",
    "epochlog.testing.chaos.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="epochlog",
        description="A replicated, Kafka-wire-compatible log broker cluster in Python.")
    parser.add_argument("--version", action="version", version=f"epochlog {_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    subparsers.required = True
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def _version() -> str:
    try:
        return importlib.metadata.version("epochlog")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if hasattr(args, "bootstrap_server"):
        from .bootstrap import choose

        choice = choose(args.bootstrap_server, os.environ, Path.cwd())
        if choice.note is not None:
            print(f"epochlog: {choice.note}", file=sys.stderr)
        args.bootstrap_server = choice.servers
    try:
        return int(args.func(args) or 0)
    except BrokenPipeError:  # `epochlog ... | head` is normal use: end quietly
        _quiet_stdout()
        return 0
    except KeyboardInterrupt:
        return 130


def _quiet_stdout() -> None:
    """After the reader of stdout went away, point stdout at /dev/null so that the interpreter's
    final flush does not print a second broken-pipe error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
