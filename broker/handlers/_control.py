"""What LeaderAndIsr, UpdateMetadata and StopReplica do before anything else: wait, bounded, for
a confirmed generation (app.control_request_ready), then fence the request by broker and
controller epoch (fencing.ControlEpochs.admit). See docs/control-plane.md. Also the topic
settings LeaderAndIsr and UpdateMetadata carry (their topic states' `configs`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._context import BrokerApp


async def admitted(app: BrokerApp, what: str, request: Any) -> int | None:
    """None: leave the request unanswered (no generation to judge it against in time; the
    controller resends it). Otherwise 0 to apply it, or the top-level error to answer."""
    if not await app.control_request_ready(what):
        return None
    return app.epochs.admit(what, request.controller_id, request.controller_epoch,
                            request.broker_epoch)


def carried_settings(topic_states: Iterable[Any]) -> dict[str, dict[str, str]]:
    """topic -> its settings, for the topic states that carry them (null: not said)."""
    return {t.topic_name: {c.name: c.value for c in t.configs}
            for t in topic_states if t.configs is not None}
