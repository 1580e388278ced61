"""One Compose project on the Docker Engine, driven with the commands a user types.

`ComposeProject` runs `docker compose` (v2, where the CLI has it) or `docker-compose` (v1,
Debian bookworm's package) with `--project-name NAME --file FILE [--file OVERRIDE]`, and reads
the engine's view of the project's containers (`docker inspect`). Names are unique per run
(`unique_name()`), so parallel runs never share containers, networks or volumes.

Rules: every command is bounded (`COMMAND_S_MAX` unless told) and a failure raises ComposeError
with the command and the end of its output; a missing engine or Compose tool is a ComposeError
too, never a silent skip. `remove()` takes everything of the project away by its label
(containers, networks, volumes), whatever state `down` left.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

BUILD_S_MAX = 900.0  # a cold docker/build.sh: debootstrap, wheels, image
COMMAND_S_MAX = 180.0  # one compose command (down waits for controlled shutdowns)
ENGINE_S_MAX = 60.0  # `docker version`, `docker inspect` and the like
HEALTHY_S_MAX = 120.0  # every service healthy after up/start, on 2 busy cores
POLL_S = 0.5
OUTPUT_SHOWN = 3000  # characters of a failed command's output shown
LOG_LINES_SHOWN = 40


class ComposeError(RuntimeError):
    """A docker or compose command failed, or the engine is missing; the message says which."""


def run(argv: Sequence[str], *, timeout_s: float = COMMAND_S_MAX, check: bool = True,
        env: Mapping[str, str] | None = None, cwd: Path | None = None,
        stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """One command (stdin: its input); with check, a failure raises ComposeError showing its
    output."""
    try:
        done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                              env=None if env is None else dict(env), cwd=cwd, input=stdin)
    except FileNotFoundError as exc:
        raise ComposeError(f"{argv[0]} is not installed: {exc}") from exc
    except subprocess.TimeoutExpired as exc:
        raise ComposeError(f"{' '.join(argv)} did not finish in {timeout_s:.0f} s") from exc
    if check and done.returncode != 0:
        raise ComposeError(f"{' '.join(argv)} exited {done.returncode}:\n"
                           f"{done.stdout[-OUTPUT_SHOWN:]}\n{done.stderr[-OUTPUT_SHOWN:]}")
    return done


def engine_version() -> str:
    """The Docker Engine's version; ComposeError when the CLI or the engine is missing."""
    if shutil.which("docker") is None:
        raise ComposeError("the docker CLI is missing: a compose cluster needs a Docker Engine")
    done = run(["docker", "version", "--format", "{{.Server.Version}}"], timeout_s=ENGINE_S_MAX,
               check=False)
    if done.returncode != 0:
        raise ComposeError(f"no Docker Engine answers: {done.stderr.strip()}")
    return done.stdout.strip()


def compose_tool() -> list[str]:
    """`docker compose` (v2) where the CLI has it, else `docker-compose` (v1)."""
    if run(["docker", "compose", "version"], timeout_s=ENGINE_S_MAX, check=False).returncode == 0:
        return ["docker", "compose"]
    if shutil.which("docker-compose") is None:
        raise ComposeError("neither `docker compose` nor `docker-compose` is installed")
    return ["docker-compose"]


def build_images(script: Path) -> dict[str, str]:
    """Run a build script such as the repository's docker/build.sh, which prints KEY=VALUE
    lines (EPOCHLOG_BASE_IMAGE, EPOCHLOG_IMAGE); those pairs."""
    done = run([str(script)], timeout_s=BUILD_S_MAX, cwd=script.parent.parent)
    pairs = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    if "EPOCHLOG_IMAGE" not in pairs:
        raise ComposeError(f"{script} printed no EPOCHLOG_IMAGE=...: {done.stdout[-500:]!r}")
    return pairs


def unique_name(prefix: str) -> str:
    """A project name no other run uses: the prefix, this process's pid, a random part."""
    clean = "".join(ch if ch.isalnum() or ch in "-_" else "-" for ch in prefix.lower())
    return f"{clean}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def leftovers(project: str) -> dict[str, list[str]]:
    """Containers, networks and volumes of a project (by Compose's label) that exist."""
    label = f"label=com.docker.compose.project={project}"
    found = {
        "containers": run(["docker", "ps", "-aq", "--filter", label]).stdout.split(),
        "networks": run(["docker", "network", "ls", "-q", "--filter", label]).stdout.split(),
        "volumes": run(["docker", "volume", "ls", "-q", "--filter", label]).stdout.split(),
    }
    return {kind: names for kind, names in found.items() if names}


class ComposeProject:
    """The commands of one project (see the module's notes)."""

    def __init__(self, name: str, files: Sequence[Path], env: Mapping[str, str]) -> None:
        if not files:
            raise ValueError("a compose project needs at least one compose file")
        self.name = name
        self.files = [Path(f).resolve() for f in files]
        self.env = dict(env)
        self.tool = compose_tool()
        self._ids: dict[str, str] = {}

    @property
    def v2(self) -> bool:
        return self.tool[:2] == ["docker", "compose"]

    def compose(self, *args: str, timeout_s: float = COMMAND_S_MAX,
                check: bool = True) -> subprocess.CompletedProcess[str]:
        files = [arg for f in self.files for arg in ("--file", str(f))]
        return run([*self.tool, "--project-name", self.name, *files, *args],
                   timeout_s=timeout_s, check=check, env=self.env, cwd=self.files[0].parent)

    def services(self) -> list[str]:
        return self.compose("config", "--services").stdout.split()

    def up(self) -> None:
        """`compose up -d` (v2: with --wait); containers may be recreated, so ids are forgotten."""
        self._ids = {}
        self.compose("up", "--detach", *(["--wait"] if self.v2 else []))

    def down(self, volumes: bool = False) -> None:
        self._ids = {}
        self.compose("down", "--remove-orphans", *(["--volumes"] if volumes else []))

    # ---------------------------------------------------------------------- containers
    def container(self, service: str) -> str:
        """The id of the service's container (it keeps its id across stop and start)."""
        if service not in self._ids:
            cid = self.compose("ps", "-q", service).stdout.strip()
            if not cid:
                raise ComposeError(f"service {service} of {self.name} has no container")
            self._ids[service] = cid
        return self._ids[service]

    def inspect(self, service: str) -> dict[str, Any]:
        out = run(["docker", "inspect", self.container(service)], timeout_s=ENGINE_S_MAX).stdout
        found: dict[str, Any] = json.loads(out)[0]
        return found

    def states(self, services: Sequence[str]) -> dict[str, str]:
        """service -> its health status ("starting", "healthy", ...) or else its state."""
        ids = {self.container(s): s for s in services}
        out = run(["docker", "inspect", "--format",
                   "{{.Id}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}"
                   "{{end}}", *ids], timeout_s=ENGINE_S_MAX).stdout
        found = {}
        for line in out.splitlines():
            cid, status, *health = line.split()
            found[ids.get(cid, cid[:12])] = health[0] if health and status == "running" \
                else status
        return found

    def wait_healthy(self, services: Sequence[str], timeout_s: float = HEALTHY_S_MAX) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.states(services)
            if all(v == "healthy" for v in states.values()):
                return
            if time.monotonic() > deadline:
                raise ComposeError(f"{self.name}: not all healthy after {timeout_s:.0f} s: "
                                   f"{states}\n" + self.logs_tail(services))
            time.sleep(POLL_S)

    def docker(self, *args: str, service: str, timeout_s: float = COMMAND_S_MAX) -> str:
        """`docker ARGS... <the service's container>`; its output."""
        return run(["docker", *args, self.container(service)], timeout_s=timeout_s).stdout

    # ---------------------------------------------------------------------------- network
    @property
    def network(self) -> str:
        """The project's default network, as Compose names it."""
        return f"{self.name}_default"

    def addresses(self) -> tuple[dict[str, str], str]:
        """(container id -> its IPv4 address on the project's network, the network's gateway:
        the address that traffic from the host's published ports comes from)."""
        out = run(["docker", "network", "inspect", self.network], timeout_s=ENGINE_S_MAX).stdout
        info = json.loads(out)[0]
        by_id = {cid: c["IPv4Address"].split("/")[0] for cid, c in info["Containers"].items()}
        gateway = next((c["Gateway"] for c in info["IPAM"]["Config"] if c.get("Gateway")), "")
        if not gateway:
            raise ComposeError(f"network {self.network} has no gateway: {info['IPAM']}")
        return by_id, gateway

    # ------------------------------------------------------------------------------ logs
    def logs(self, service: str) -> str:
        """Everything the container wrote, over all its runs (stdout, then stderr)."""
        done = run(["docker", "logs", self.container(service)], check=False,
                   timeout_s=ENGINE_S_MAX)
        return done.stdout + done.stderr

    def logs_tail(self, services: Sequence[str]) -> str:
        parts = []
        for service in services:
            try:
                lines = self.logs(service).splitlines()[-LOG_LINES_SHOWN:]
            except ComposeError as exc:
                lines = [str(exc)]
            parts.append(f"--- {service}\n" + "\n".join(lines))
        return "\n".join(parts)

    # ---------------------------------------------------------------------------- removal
    def leftovers(self) -> dict[str, list[str]]:
        return leftovers(self.name)

    def remove(self) -> dict[str, list[str]]:
        """Remove by force whatever of the project still exists; what was found."""
        left = self.leftovers()
        commands = {"containers": ["docker", "rm", "--force", "--volumes"],
                    "networks": ["docker", "network", "rm"],
                    "volumes": ["docker", "volume", "rm", "--force"]}
        for kind in ("containers", "networks", "volumes"):
            if left.get(kind):
                run([*commands[kind], *left[kind]], check=False)
        self._ids = {}
        return left
