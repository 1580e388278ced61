"""Helpers shared by the group handlers (JoinGroup, SyncGroup, ...)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ._context import RequestContext


def client_host(ctx: RequestContext) -> str:
    """The member's host as Kafka shows it ("/127.0.0.1")."""
    host = ctx.peer.rpartition(":")[0] if ":" in ctx.peer else ctx.peer
    return "/" + host.strip("[]")


def client_id(ctx: RequestContext) -> str:
    return ctx.header.client_id or ""


def instance_id(ctx: RequestContext, value: str | None, since: int) -> str | None:
    """group_instance_id where the version carries it (an empty one means none)."""
    return (value or None) if ctx.version >= since else None
