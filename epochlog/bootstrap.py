"""Which bootstrap servers a tool that takes `--bootstrap-server` talks to, when not told.

In order, the first that gives an answer wins:
1. `--bootstrap-server` on the command line;
2. the environment variable EPOCHLOG_BOOTSTRAP_SERVERS (HOST:PORT[,HOST:PORT]);
3. the cluster an `epochlog cluster up` runs from the current folder, asked through its control
   socket (./.epochlog/cluster.sock, as `epochlog cluster status` finds it) within LOOKUP_S
   (under `--security ssl`, its brokers' plaintext CONTROLLER listeners: no TLS in the tools yet);
4. 127.0.0.1:9092, what a plain `epochlog cluster up` gives.

Whenever the choice is not the explicit flag, the tool says on stderr, in one line, which it took
and why: a user whose cluster runs on other ports sees at once what was asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .cluster_socket import ControlError, NoCluster, request

ENV_VAR = "EPOCHLOG_BOOTSTRAP_SERVERS"
DEFAULT = "127.0.0.1:9092"
DATA_DIR = ".epochlog"  # `cluster up`'s default data dir, under the current folder
LOOKUP_S = 5.0  # a cluster busy with a restart answers its control socket late: do not wait on


@dataclass(frozen=True)
class Choice:
    servers: str
    note: str | None  # the line said on stderr; None when the flag gave them


def choose(flag: str | None, environ: Mapping[str, str], folder: Path) -> Choice:
    """The bootstrap servers, by the order in the module's notes."""
    if flag is not None and flag.strip():
        return Choice(flag.strip(), None)
    from_env = environ.get(ENV_VAR, "").strip()
    if from_env:
        return Choice(from_env, f"bootstrap servers {from_env} (from {ENV_VAR})")
    data_dir = folder / DATA_DIR
    shown = f"./{DATA_DIR}"
    try:
        answer = request(data_dir, {"op": "bootstrap"}, timeout_s=LOOKUP_S)
        servers = str(answer["bootstrap_servers"])
        plaintext = str(answer.get("plaintext_servers") or servers)
        if plaintext != servers:  # cluster up --security ssl; the tools have no TLS yet
            return Choice(plaintext, f"bootstrap servers {plaintext} (the cluster running in "
                                     f"{shown}: its plaintext CONTROLLER listeners, as the "
                                     f"tools have no TLS yet)")
        return Choice(servers, f"bootstrap servers {servers} (the cluster running in {shown})")
    except NoCluster:
        why = f"no cluster runs in {shown}"
    except (ControlError, OSError, KeyError, ValueError) as exc:
        why = f"the cluster in {shown} did not tell its servers: {exc}"
    return Choice(DEFAULT, f"bootstrap servers {DEFAULT} (the default: no --bootstrap-server, "
                           f"{ENV_VAR} not set, {why})")
