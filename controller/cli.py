"""`epochlog controller`: run the controller until SIGTERM or SIGINT.

Settings come from the flags below, `EPOCHLOG_*` variables and `--config FILE.toml` (flags win);
`--set NAME=VALUE` reaches any setting of ControllerConfig. A bad setting is refused before any
file or port is opened: the process prints the setting's name and the reason and exits with 2.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from epochlog.settings import SettingsError, add_settings_arguments, load_from_args, setup_logging

from .config import ControllerConfig

log = logging.getLogger("epochlog.controller")
EXIT_BAD_SETTINGS, EXIT_FATAL = 2, 70


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("controller", help="run the cluster controller")
    p.add_argument("--data-dir", help="folder of the metadata log")
    p.add_argument("--listen", help="HOST:PORT to serve brokers and admin tools on")
    p.add_argument("--metrics-listen", help="HOST:PORT for Prometheus /metrics (default: off)")
    p.add_argument("--broker-session-timeout-ms", help="broker session timeout (default 9000)")
    add_settings_arguments(p, "default_num_partitions=3")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    try:
        config = load_from_args(ControllerConfig, {
            "data_dir": args.data_dir, "listen": args.listen,
            "metrics_listen": args.metrics_listen,
            "broker_session_timeout_ms": args.broker_session_timeout_ms}, args)
    except SettingsError as exc:
        print(f"epochlog controller: {exc}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    import uvloop

    return uvloop.run(serve(config))


async def serve(config: ControllerConfig) -> int:
    from .server import ControlServer
    from .service import ControllerService

    service = ControllerService(config)
    epoch = await service.start()
    server = ControlServer(service, config.frame_bytes_max)
    try:
        host, port = await server.listen(*config.listen_address)
    except OSError as exc:
        log.error("cannot listen on %s: %s", config.listen, exc)
        await service.stop()
        return 1
    if config.metrics_address is not None:
        from .metrics import serve_metrics
        serve_metrics(service, server, *config.metrics_address)
    log.info("controller %d listening on %s:%d with controller epoch %d (data dir %s)",
             config.controller_id, host, port, epoch, config.data_dir)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waits = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(service.fatal.wait())]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    log.info("controller %d stopping (controller epoch %d)", config.controller_id, epoch)
    await server.close()
    await service.stop()
    return EXIT_FATAL if service.fatal.is_set() else 0
