"""A container's health check: one real Kafka request to the server in this container.

    python /opt/epochlog/healthcheck.py broker       # Metadata names this broker: registered
    python /opt/epochlog/healthcheck.py controller   # ApiVersions answered

The address and broker id come from the same `EPOCHLOG_*` variables the server reads
(`EPOCHLOG_LISTEN`, `EPOCHLOG_BROKER_ID`), so one check serves every broker service. A broker binds
its listener before it registers, so an open port or an ApiVersions answer proves little: healthy
means its Metadata answer lists the broker itself, which it learns from the controller once it
holds a generation. Exit status 0 healthy, 1 not, with the reason on stdout (the engine keeps it:
`docker inspect --format '{{json .State.Health}}' CONTAINER`).
"""

from __future__ import annotations

import asyncio
import os
import sys

from epochlog.client.connection import Connection
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.metadata import MetadataRequest
from epochlog.protocol.registry import APIS

TIMEOUT_MS = 3000  # below compose's `timeout`, so the check reports why instead of being killed
WILDCARDS = ("0.0.0.0", "::", "")


def local_address(environ: dict[str, str]) -> tuple[str, int]:
    """Where this container's server listens (`EPOCHLOG_LISTEN`), reached over loopback."""
    listen = environ.get("EPOCHLOG_LISTEN")
    if not listen:
        raise SystemExit("EPOCHLOG_LISTEN is not set: where does the server listen?")
    host, _, port = listen.rpartition(":")
    host = host.strip("[]")
    return ("127.0.0.1" if host in WILDCARDS else host), int(port)


async def check(role: str, environ: dict[str, str]) -> str:
    host, port = local_address(environ)
    conn = Connection(host, port, request_timeout_ms=TIMEOUT_MS, connect_timeout_ms=TIMEOUT_MS)
    await conn.connect()  # ApiVersions: refused or unanswered raises
    try:
        if role == "controller":
            return f"controller at {host}:{port} answered ApiVersions"
        broker_id = int(environ["EPOCHLOG_BROKER_ID"])
        api = APIS[ApiKey.METADATA]
        answer = await conn.request(api, conn.version_for(api), MetadataRequest(topics=[]))
        known = sorted(b.node_id for b in answer.brokers)
        if broker_id not in known:
            raise RuntimeError(f"broker {broker_id} is not registered yet (Metadata lists "
                               f"{known or 'no brokers'})")
        return f"broker {broker_id} at {host}:{port} is registered; Metadata lists {known}"
    finally:
        await conn.close()


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in ("broker", "controller"):
        print("usage: healthcheck.py broker|controller", file=sys.stderr)
        return 2
    try:
        print(asyncio.run(check(argv[0], dict(os.environ))))
    except Exception as exc:  # any failure is "unhealthy", said plainly
        print(f"unhealthy: {type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
