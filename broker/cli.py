"""`epochlog broker`: run one broker until SIGTERM or SIGINT.

    epochlog broker --id N --rack R --listen HOST:PORT [--advertised HOST:PORT]
                    [--internal-listen HOST:PORT [--internal-advertised HOST:PORT]]
                    --controller HOST:PORT --data-dir D [--metrics-listen HOST:PORT]
                    [--config FILE.toml] [--set NAME=VALUE ...]

Settings come from these flags, `EPOCHLOG_*` variables and the TOML file (flags win); `--set`
reaches any setting of BrokerConfig. A bad setting is refused before any file or port is opened:
the process prints the setting's name and the reason and exits with 2. Once registered it logs one
line: "broker N (rack R) listening on HOST:PORT ... generation G" (the internal listener, if any,
at the end of that line). On SIGTERM/SIGINT it does a controlled shutdown, closes its logs
cleanly and exits 0; a failure exits non-zero.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from epochlog.settings import SettingsError, add_settings_arguments, load_from_args, setup_logging

from .config import BrokerConfig
from .listeners import Listener, SecurityProtocol

log = logging.getLogger("epochlog.broker")
EXIT_BAD_SETTINGS, EXIT_START_FAILED, EXIT_FATAL = 2, 1, 70


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("broker", help="run a broker")
    p.add_argument("--id", dest="broker_id", help="broker id (>= 0)")
    p.add_argument("--rack", help="rack of this broker (for replica placement and KIP-392)")
    p.add_argument("--listen", help="HOST:PORT to serve Kafka clients on")
    p.add_argument("--advertised", help="HOST:PORT others reach us at (default: --listen)")
    p.add_argument("--internal-listen",
                   help="HOST:PORT of a second listener for the controller and other brokers "
                        "(default: none; the first listener serves them)")
    p.add_argument("--internal-advertised",
                   help="HOST:PORT the controller and other brokers reach us at "
                        "(default: --internal-listen)")
    p.add_argument("--controller", help="HOST:PORT of the controller")
    p.add_argument("--data-dir", help="folder of this broker's partition logs")
    p.add_argument("--metrics-listen", help="HOST:PORT for Prometheus /metrics (default: off)")
    add_settings_arguments(p, "num_partitions=3")
    p.set_defaults(func=run)


def load(args: argparse.Namespace) -> BrokerConfig:
    return load_from_args(BrokerConfig, {
        "broker_id": args.broker_id, "rack": args.rack, "listen": args.listen,
        "advertised": args.advertised, "internal_listen": args.internal_listen,
        "internal_advertised": args.internal_advertised, "controller": args.controller,
        "data_dir": args.data_dir, "metrics_listen": args.metrics_listen}, args)


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    try:
        config = load(args)
    except SettingsError as exc:
        print(f"epochlog broker: {exc}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    import uvloop

    return uvloop.run(serve(config))


def _bind(lst: Listener) -> str:
    return f"{lst.host}:{lst.port}"


def _other_listeners_note(listeners: dict[str, tuple[str, int]], config: BrokerConfig) -> str:
    """The listeners besides the first-named for the start line: at its end, so tools reading
    the first's "(advertised HOST:PORT), generation G" part keep working. INTERNAL reads
    "internal listener on ...", as it always did."""
    plan = config.listener_plan
    notes = []
    for lst in plan.listeners:
        if lst.name == plan.client:
            continue
        host, port = listeners[lst.name]
        tls = "" if lst.protocol is SecurityProtocol.PLAINTEXT else f" over {lst.protocol.name}"
        notes.append(f", {lst.name.lower()} listener on {_bind(lst)} (advertised {host}:{port})"
                     f"{tls}")
    first = plan.named(plan.client)
    if first.protocol is not SecurityProtocol.PLAINTEXT:
        notes.append(f"; {first.name} is {first.protocol.name}")
    return "".join(notes)


def log_tasks() -> None:
    """SIGUSR1: every asyncio task and where it waits, to the log (a broker that does not stop
    or answer can be asked what it is doing: `kill -USR1 PID`)."""
    import io

    out = io.StringIO()
    tasks = asyncio.all_tasks()
    for task in sorted(tasks, key=lambda t: t.get_name()):
        task.print_stack(limit=6, file=out)
    log.warning("SIGUSR1: %d tasks\n%s", len(tasks), out.getvalue())


async def serve(config: BrokerConfig) -> int:
    from .app import Broker

    broker = Broker(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, log_tasks)
    starting = asyncio.ensure_future(broker.start())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
    if not starting.done():  # stopped while still registering
        starting.cancel()
        await asyncio.gather(starting, return_exceptions=True)
        await broker.stop(controlled=False)
        return 0
    stopping.cancel()
    if starting.exception() is not None:
        log.error("broker %d failed to start: %s", config.broker_id, starting.exception())
        await broker.stop(controlled=False)
        return EXIT_START_FAILED
    host, port = broker.advertised
    plan = config.listener_plan
    log.info("broker %d (rack %s) listening on %s (advertised %s:%d), generation %d, "
             "controller %s, data dir %s%s", config.broker_id, config.rack or "-",
             _bind(plan.named(plan.client)), host, port, starting.result(), config.controller,
             config.data_dir, _other_listeners_note(broker.listeners, config))
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(broker.fatal.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    log.info("broker %d stopping (generation %d)", config.broker_id, broker.epochs.generation)
    await broker.stop(controlled=True)
    return EXIT_FATAL if broker.fatal.is_set() else 0
