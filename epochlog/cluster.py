"""`epochlog cluster up` and the commands that drive it from another terminal.

`up`: a controller and N brokers as real child processes, through the same `epochlog.testing`
Cluster the tests use: brokers in racks a, b, c, ... on ports P, P+1, ... (P = --port-base,
default 9092), the controller on P+100, data under ./.epochlog/ unless told otherwise, each
process's log in <data-dir>/logs/. Each child runs the command a user or docker-compose would
run. Once every broker has registered, the bootstrap servers are printed.

`--security ssl`: a CA, a broker certificate (127.0.0.1, localhost) and a client certificate
under <data-dir>/tls (testing/certs.py, kept across runs); brokers serve clients and each other on
an SSL listener at P+200, P+201, ... with mutual TLS, and keep their plaintext port P, P+1, ...
as the CONTROLLER listener (the controller's link has no TLS yet). The client's settings, in
librdkafka's names, go to <data-dir>/client.json and are printed.

It supervises: a process that dies is reported in one line and the rest runs on (`epochlog
cluster restart N` starts it again). On a terminal it shows a live status table; otherwise it
prints plain lines. Ctrl-C or SIGTERM stops the brokers (each a controlled shutdown), then the
controller.

`--network` gives each process its own network namespace and address (as root; otherwise a TCP
proxy per listener, said once), so `partition`, `isolate`, `slow` and `heal` work; addresses are
then the namespaces' (printed), not 127.0.0.1.

From another terminal, against the cluster in ./.epochlog (or --data-dir), through its control
socket (<data-dir>/cluster.sock, cluster_control.py): `epochlog cluster status [--json]`,
`kill N`, `stop N`, `pause N`, `resume N`, `restart N` (N: a broker id or `controller`),
`partition 1 2,3 [--one-way]` (each argument a group: ids, `controller`, `clients`),
`isolate N`, `slow N --delay-ms 200 [--jitter-ms 50] [--loss-pct 1]`, `heal`.
"""

from __future__ import annotations

import argparse
import json
import queue
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # loaded when a cluster command runs, so other commands start fast
    from rich.console import Console
    from rich.live import Live

    from epochlog.testing.cluster import Cluster
    from epochlog.testing.nodes import Node

RACKS = "abcdefghijklmnopqrstuvwxyz"
REFRESH_S = 1.0  # the live table's refresh


def add_parser(subparsers: Any) -> None:
    cluster = subparsers.add_parser("cluster", help="run a local cluster of real processes")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    up = actions.add_parser("up", help="start a controller and brokers, and supervise them")
    up.add_argument("--brokers", type=int, default=3, help="how many brokers (default 3)")
    up.add_argument("--data-dir", default=".epochlog", help="where data goes (default ./.epochlog)")
    up.add_argument("--port-base", type=int, default=9092,
                    help="first broker port; brokers use P, P+1, ...; the controller P+100")
    up.add_argument("--racks", default=RACKS,
                    help="racks of brokers 1, 2, ... in turn, one letter each (default abc...)")
    up.add_argument("--network", action="store_true",
                    help="own network namespaces and addresses (as root), for partition/slow")
    up.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a broker or controller setting, Kafka's or epochlog's name "
                         "(e.g. --set min.insync.replicas=2)")
    up.add_argument("--security", default="plaintext", choices=("plaintext", "ssl"),
                    help="ssl: a CA and certificates under <data-dir>/tls, brokers serve clients "
                         "and each other over mutual TLS, and <data-dir>/client.json holds a "
                         "client's settings (default plaintext)")
    up.add_argument("--logs", action="store_true", help="also print the processes' log lines")
    up.add_argument("--log-level", default="INFO", type=str.upper,
                    choices=("INFO", "WARNING", "ERROR"),
                    help="with --logs, print only lines at this level or above (WARNING: only "
                         "what needs a person); the files in <data-dir>/logs keep INFO")
    up.set_defaults(func=run_up)

    def control(name: str, help_text: str) -> argparse.ArgumentParser:
        p: argparse.ArgumentParser = actions.add_parser(name, help=help_text)
        p.add_argument("--data-dir", default=".epochlog",
                       help="the running cluster's data dir (default ./.epochlog)")
        p.set_defaults(func=run_control, op=name)
        return p

    status = control("status", "the nodes of the running cluster: pids, states, ports, leaders")
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    for name, what in (("kill", "SIGKILL"), ("stop", "SIGTERM: a controlled shutdown"),
                       ("pause", "SIGSTOP"), ("resume", "SIGCONT"),
                       ("restart", "start again on its data (stopping it first if it runs)"),
                       ("isolate", "cut it off from every other node and from clients")):
        control(name, f"{what}, one node").add_argument(
            "node", help="a broker id or 'controller'")
    part = control("partition", "cut the links between groups of nodes")
    part.add_argument("groups", nargs="+", metavar="GROUP",
                      help="comma-separated ids ('controller', 'clients' too): 1 2,3")
    part.add_argument("--one-way", action="store_true",
                      help="drop only what an earlier group sends to a later one")
    slow = control("slow", "delay (and lose) what one node sends")
    slow.add_argument("node", help="a broker id or 'controller'")
    slow.add_argument("--delay-ms", type=int, default=100)
    slow.add_argument("--jitter-ms", type=int, default=0)
    slow.add_argument("--loss-pct", type=float, default=0.0)
    control("heal", "remove every cut and slowness")


# ------------------------------------------------------------------------------------ up
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class _Supervisor:
    """Prints what happens, plain or above a live table; learns of deaths from the cluster."""

    def __init__(self, logs: bool, level: str = "INFO") -> None:
        from rich.console import Console

        self.console: Console = Console()
        self.live: Live | None = None
        self.events: queue.SimpleQueue[Node | str] = queue.SimpleQueue()
        self.echo_logs = logs
        self.level_min = LEVELS.index(level)
        self._echoing: dict[str, bool] = {}  # per node: was its last leveled line shown

    def echo(self, node: str, line: str) -> None:
        """A process's log line, if its level is high enough; lines without a level (a
        traceback's) follow the line they continue."""
        parts = line.split(" ", 3)
        if len(parts) >= 3 and parts[2] in LEVELS:
            self._echoing[node] = LEVELS.index(parts[2]) >= self.level_min
        if self._echoing.get(node, self.level_min <= LEVELS.index("INFO")):
            self.say(f"[{node}] {line}")

    def say(self, text: str, error: bool = False) -> None:
        if self.live is not None:
            self.live.console.print(text, markup=False, highlight=False)
        else:
            print(text, file=sys.stderr if error else sys.stdout, flush=True)

    def on_fault(self, kind: str, targets: tuple[int | str, ...], detail: str) -> None:
        names = ", ".join(str(t) for t in targets)
        self.say(f"{kind} {names}: {detail}".replace("  ", " "))

    def on_exit(self, node: Node) -> None:
        self.events.put(node)  # from the node's reader thread; SimpleQueue.put is safe anywhere


def _exit_note(rc: int | None) -> str:
    if rc is not None and rc < 0:
        try:
            return f"code {rc} ({signal.Signals(-rc).name})"
        except ValueError:
            pass
    return f"code {rc}"


def run_up(args: argparse.Namespace) -> int:
    from epochlog.testing.cluster import Cluster, NetworkFaultUnsupported

    from .cluster_control import ControlServer
    from .cluster_socket import ControlError

    if not 1 <= args.brokers <= len(RACKS):
        print(f"epochlog cluster up: --brokers must be 1-{len(RACKS)}", file=sys.stderr)
        return 2
    if not 1 <= args.port_base <= 65535 - 300:
        print("epochlog cluster up: --port-base must leave room for the controller (P+100)",
              file=sys.stderr)
        return 2
    settings = {}
    for item in args.set:
        name, sep, value = item.partition("=")
        if not sep:
            print(f"epochlog cluster up: --set {item!r}: expected NAME=VALUE", file=sys.stderr)
            return 2
        settings[name] = value
    if args.security == "ssl" and args.network:
        print("epochlog cluster up: --security ssl with --network is not built yet (the "
              "certificates name 127.0.0.1 and localhost only)", file=sys.stderr)
        return 2
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    sup = _Supervisor(args.logs, args.log_level)
    try:
        cluster = Cluster(args.brokers, racks=args.racks, settings=settings, base_dir=data_dir,
                          network=bool(args.network), port_base=args.port_base,
                          on_fault=sup.on_fault, on_exit=sup.on_exit, security=args.security)
    except (ValueError, NetworkFaultUnsupported) as exc:
        print(f"epochlog cluster up: {exc}", file=sys.stderr)
        return 2
    busy = _ports_in_use(cluster)
    if busy:
        print(f"epochlog cluster up: port {busy} in use on 127.0.0.1: stop what listens "
              f"there, or choose another --port-base", file=sys.stderr)
        return 1
    server = ControlServer(cluster, data_dir, lambda: {
        "bootstrap_servers": cluster.bootstrap_servers, "data_dir": str(data_dir),
        "network": cluster.network.describe()})
    try:
        server.start()
    except ControlError as exc:
        print(f"epochlog cluster up: {exc}", file=sys.stderr)
        return 2
    try:
        return _serve(cluster, sup, data_dir)
    finally:
        server.close()


def _ports_in_use(cluster: Cluster) -> str:
    """The planned ports another process already listens on, as "41001 (broker 2), ..."; empty
    when all are free. Only on the loopback network: namespaces have addresses of their own. A
    port taken between this check and the start still fails the start, with the broker's
    words."""
    import socket

    if cluster.network.mode != "loopback":
        return ""
    busy: list[str] = []
    for node in cluster.nodes():
        for port in (node.port, getattr(node, "internal_port", None),
                     getattr(node, "tls_port", None), getattr(node, "hooks_port", None)):
            if port is None:
                continue
            with socket.socket() as probe:
                probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is free
                try:
                    probe.bind(("127.0.0.1", port))
                except OSError:
                    busy.append(f"{port} ({node.name})")
    return ", ".join(busy)


def _write_client_settings(cluster: Cluster, data_dir: Path, sup: _Supervisor) -> None:
    """<data-dir>/client.json: what a client needs, in librdkafka's names (confluent-kafka
    takes the dict as it is; kcat takes each as -X NAME=VALUE), and the same printed."""
    settings = cluster.client_settings()
    path = data_dir / "client.json"
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(settings, indent=2) + "\n")
    tmp.replace(path)
    sup.say(f"client settings (in {path}):")
    for name, value in settings.items():
        sup.say(f"  {name}={value}")


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _serve(cluster: Cluster, sup: _Supervisor, data_dir: Path) -> int:
    from rich.live import Live

    from epochlog.testing.processes import ProcessError

    from .cluster_view import status_table

    started = time.monotonic()
    signal.signal(signal.SIGTERM, _interrupt)  # while starting: as Ctrl-C
    try:
        cluster.start()  # Ctrl-C here is a KeyboardInterrupt: the children are killed
    except KeyboardInterrupt:
        sup.say("interrupted while starting; stopped", error=True)
        return 130
    except (ProcessError, AssertionError, OSError) as exc:
        sup.say(f"the cluster did not come up: {exc}", error=True)
        cluster._kill_all()
        return 1
    for node in cluster.nodes():
        sup.say(f"started {node.name} (pid {node.pid}) on {node.address}")
    sup.say(f"cluster up in {time.monotonic() - started:.1f}s: controller "
            f"{cluster.controller_node.address}, data in {data_dir}, logs in {data_dir / 'logs'}")
    if cluster.network.mode != "loopback":
        sup.say(f"network: {cluster.network.describe()}")
    sup.say(f"bootstrap servers: {cluster.bootstrap_servers}")
    if cluster.security != "plaintext":
        _write_client_settings(cluster, data_dir, sup)
    sup.say(f"press Ctrl-C to stop; from another terminal: epochlog cluster status|kill N|"
            f"restart N|... --data-dir {data_dir}")

    def on_signal(signum: int, frame: Any) -> None:
        sup.events.put("stop")

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    marks = {node.name: node.mark() for node in cluster.nodes()}
    if sup.console.is_terminal:
        with Live(status_table(_rows(cluster)), console=sup.console,
                  refresh_per_second=2) as live:
            sup.live = live
            _supervise(cluster, sup, marks)
            sup.live = None
    else:
        _supervise(cluster, sup, marks)
    return _stop(cluster, sup)


def _rows(cluster: Cluster) -> list[dict[str, Any]]:
    return [asdict(row) for row in cluster.status()]


def _supervise(cluster: Cluster, sup: _Supervisor, marks: dict[str, int]) -> None:
    from epochlog.testing.nodes import Node

    from .cluster_view import status_table

    last = 0.0
    while True:
        try:
            event = sup.events.get(timeout=0.2 if sup.echo_logs else REFRESH_S)
        except queue.Empty:
            event = None
        if event == "stop":
            return
        if isinstance(event, Node) and event.intent in ("running", "paused"):
            sup.say(f"{event.name} exited with {_exit_note(event.returncode)}; the rest of "
                    f"the cluster runs on (epochlog cluster restart {event.node_id} starts it "
                    "again)", error=True)
        if sup.echo_logs:
            for node in cluster.nodes():
                lines = node.lines
                start = max(marks[node.name] - (node.mark() - len(lines)), 0)
                for line in lines[start:]:
                    sup.echo(node.name, line)
                marks[node.name] = node.mark()
        if sup.live is not None and time.monotonic() - last >= REFRESH_S:
            sup.live.update(status_table(_rows(cluster)))
            last = time.monotonic()


def _stop(cluster: Cluster, sup: _Supervisor) -> int:
    from epochlog.testing.processes import ProcessError

    sup.say("stopping: brokers first (controlled shutdown), then the controller")
    running = [n for n in [*cluster.brokers.values(), cluster.controller_node] if n.alive]
    try:
        cluster.close()
        failed = False
    except ProcessError as exc:
        sup.say(str(exc), error=True)
        failed = True
    for node in running:
        sup.say(f"stopped {node.name} (exit {_exit_note(node.returncode)})")
    return 1 if failed else 0


# ------------------------------------------------------------------------- control commands
def run_control(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .cluster_socket import ControlError, request
    from .cluster_view import status_table

    data_dir = Path(args.data_dir).resolve()
    message: dict[str, Any] = {"op": args.op}
    if args.op == "partition":
        message["groups"] = [[m for m in g.split(",") if m] for g in args.groups]
        message["one_way"] = args.one_way
    elif args.op == "slow":
        message.update(node=args.node, delay_ms=args.delay_ms, jitter_ms=args.jitter_ms,
                       loss_pct=args.loss_pct)
    elif hasattr(args, "node"):
        message["node"] = args.node
    try:
        answer = request(data_dir, message)
    except ControlError as exc:
        print(f"epochlog cluster {args.op}: {exc}", file=sys.stderr)
        return 1
    if args.op == "status":
        if args.json:
            print(json.dumps(answer, indent=2))
        else:
            console = Console()
            if not console.is_terminal:
                console = Console(width=160)  # a pipe or a file: do not cut columns to 80
            console.print(status_table(answer["nodes"], title=(
                f"bootstrap servers {answer['bootstrap_servers']}\n"
                f"data in {answer['data_dir']}; network: {answer['network']}")))
        return 0
    print(answer.get("message", "done"))
    return 0


__all__ = ["add_parser", "run_control", "run_up"]
