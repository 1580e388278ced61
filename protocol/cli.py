"""`epochlog apis`: the APIs and versions this build's protocol package declares (a broker
advertises, in ApiVersions, those of them its handlers serve)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("apis", help="list the Kafka APIs and versions epochlog's "
                                           "protocol declares")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .registry import APIS

    print(f"{'key':>4}  {'api':<22} {'versions':<9} flexible from")
    for key in sorted(APIS):
        api = APIS[key]
        flex = "-" if api.flexible_from is None else f"v{api.flexible_from}"
        print(f"{key:>4}  {api.name:<22} {api.min_version}-{api.max_version:<7} {flex}")
    return 0
