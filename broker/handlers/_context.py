"""What a request handler knows: the request's context, and what it may use of its broker.

Handlers reach the broker through `ctx.app`. `BrokerApp` names exactly what they use, so a
handler cannot grow a dependency on the rest of the broker unseen, and mypy proves that
`broker.app.Broker` provides it. The deterministic simulation's broker node (tests/sim) runs the
same handler code against its own implementation of this interface.

This module sits at the handlers' floor of the broker (docs/design.md, "The broker as a stack"):
it names the coordinators, the replica manager and the controller link below it, and nothing
above it (the server builds a `RequestContext` for each request; the app is a `BrokerApp`).

The parts a broker builds while it starts (replicas, groups, transactions, the controller link,
the producer id allocator) are None before then; a handler runs only once they are built, and
says so with the `*_of(app)` accessors below, which fail loudly if that ever stops being true.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from epochlog.protocol.headers import RequestHeader

from ..config import EXTERNAL_LISTENER
from ..principal import ANONYMOUS

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Coroutine

    from ..config import BrokerConfig
    from ..controller_link import ControllerLink
    from ..fencing import ControlEpochs
    from ..groups.coordinator import GroupCoordinator
    from ..metadata_cache import MetadataCache
    from ..producer_ids import ProducerIdAllocator
    from ..read_path import ReadPath
    from ..replicas import ReplicaManager
    from ..txn.coordinator import TxnCoordinator


class BrokerApp(Protocol):
    broker_id: int
    config: BrokerConfig
    epochs: ControlEpochs
    metadata: MetadataCache
    replicas: ReplicaManager | None
    groups: GroupCoordinator | None
    txns: TxnCoordinator | None
    controller: ControllerLink | None
    producer_ids: ProducerIdAllocator | None
    # listener name -> advertised (host, port), and the first-named listener's
    listeners: dict[str, tuple[str, int]]
    advertised: tuple[str, int]
    read_path: ReadPath | None  # the fetch path's state, made on first use (handlers/fetch.py)

    async def control_request_ready(self, what: str) -> bool:
        """Whether a control request may be judged now (our generation is confirmed)."""
        ...

    async def auto_create(self, names: list[str]) -> None:
        """Create these unknown topics with the cluster's defaults, and wait for them."""
        ...

    def auto_create_soon(self, topic: str) -> None:
        """Create this unknown topic in the background (a Produce to it is answered now)."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run coro as one of the broker's tasks; its failure stops the broker."""
        ...


@dataclass
class RequestContext:
    """What a handler knows about the request besides its body."""

    header: RequestHeader
    version: int
    peer: str
    app: BrokerApp  # what handlers may use of the broker
    listener: str = EXTERNAL_LISTENER  # the listener name the request arrived on
    # Who sent it (principal.py): User:<mapped DN> over mutual TLS, else User:ANONYMOUS. The
    # ACL work will ask about it; nothing does yet.
    principal: str = ANONYMOUS


def replicas_of(app: BrokerApp) -> ReplicaManager:
    assert app.replicas is not None, "a request handled before the broker opened its logs"
    return app.replicas


def groups_of(app: BrokerApp) -> GroupCoordinator:
    assert app.groups is not None, "a group request handled before the coordinator started"
    return app.groups


def txns_of(app: BrokerApp) -> TxnCoordinator:
    assert app.txns is not None, "a transaction request handled before the coordinator started"
    return app.txns


def controller_of(app: BrokerApp) -> ControllerLink:
    assert app.controller is not None, "a request handled before the controller link started"
    return app.controller


def producer_ids_of(app: BrokerApp) -> ProducerIdAllocator:
    assert app.producer_ids is not None, "InitProducerId handled before the broker started"
    return app.producer_ids
