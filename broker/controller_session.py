"""`ControllerSession`: when the broker registers with the controller and heartbeats (sans-IO).

Theory of operation
-------------------
The decisions of the broker's side of docs/control-plane.md, broker to controller, as a pure
machine in the style of client/group_member.py: events in, actions out; time comes in as `now_ms`
(the driver's clock), never read here. `controller_link.ControllerLink` drives it on asyncio (the
connections, the requests, closing); tests/sim/broker_node.py drives it on the simulated network.

    events in                                 actions out
    start(now)                                Register()             send BrokerRegistration
    registration_answered(now, code, epoch)   Registered(epoch)      our generation is confirmed
    registration_failed(now, why)             Heartbeat(epoch)       send BrokerHeartbeat
    heartbeat_answered(now, code)             GenerationOver(why)    stop leading (a Register
    heartbeat_failed(now, why)                                       follows)
    heartbeat_soon(now)                       Refused(code)          the controller refused our
    connection_closed(now)                                           registration: stop
    tick(now)               (at next_deadline_ms())

One request at a time: the driver answers each Register or Heartbeat with its answer or failure
before it sends anything else, and the machine waits meanwhile.

- Register until the controller answers, backing off from BACKOFF_MS_MIN, doubling to
  BACKOFF_MS_MAX; a WARNING on the first failure and then every REGISTRATION_LOG_EVERY tries.
  The answer confirms our generation (`ControlEpochs.registration_answered`, KIP-380).
- Then heartbeat every heartbeat_interval_ms; at once on `heartbeat_soon` (our offline replicas
  changed), and at once when the driver finds the heartbeat connection closed while heartbeats
  succeed (the controller fails a generation whose connection closed unless it heartbeats again
  within its short grace). A failed heartbeat is retried after the same backoff, never longer
  than the interval, without watching the connection (it is known to be down): one WARNING at
  the first failure, one INFO line when heartbeats work again.
- A heartbeat answered STALE_BROKER_EPOCH ends the generation: control requests wait again
  (`ControlEpochs.generation_over`), we stop leading, and register again (a fresh backoff).

How soon a closed connection is found is the driver's: ControllerLink looks every
CONNECTION_CHECK_MS between heartbeats (a Connection tells nobody it closed); the simulation
is told when the close arrives.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass

from epochlog.protocol.error_codes import ErrorCode, name_of

from .fencing import ControlEpochs

log = logging.getLogger("epochlog.broker")

BACKOFF_MS_MIN, BACKOFF_MS_MAX = 50, 1000
# A failed registration is logged on the first try and then every this many tries, not each one.
REGISTRATION_LOG_EVERY = 20


# ---------------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class Register:
    """Send BrokerRegistration on the heartbeat connection (reopened if it closed)."""


@dataclass(frozen=True)
class Heartbeat:
    """Send BrokerHeartbeat naming broker_epoch, on the heartbeat connection."""
    broker_epoch: int


@dataclass(frozen=True)
class Registered:
    """The controller gave us generation; control requests held for it may be judged now."""
    generation: int


@dataclass(frozen=True)
class GenerationOver:
    """The controller says our generation is over: stop leading."""
    why: str


@dataclass(frozen=True)
class Refused:
    """The controller refused our registration with an error retrying cannot fix."""
    error_code: int


Action = Register | Heartbeat | Registered | GenerationOver | Refused


class Phase(enum.Enum):
    IDLE = "idle"  # not started
    REGISTERING = "registering"
    HEARTBEATING = "heartbeating"
    REFUSED = "refused"  # nothing more happens


class ControllerSession:
    def __init__(self, broker_id: int, epochs: ControlEpochs, heartbeat_interval_ms: int) -> None:
        assert heartbeat_interval_ms > 0
        self.broker_id = broker_id
        self.epochs = epochs
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.phase = Phase.IDLE
        self.heartbeats_total = 0
        self.registrations_total = 0
        self.reconnects_total = 0  # heartbeat connections found closed, heartbeated on at once
        self._in_flight = False  # a Register or Heartbeat waits for its answer
        self._due_ms = -1  # when the next request goes out, while none is in flight
        self._backoff_ms = BACKOFF_MS_MIN
        self._tries = 0  # registration tries since the last registration began
        self._failing = 0  # heartbeats failed in a row
        self._watch = False  # a close of the heartbeat connection makes the heartbeat due now
        self._closed = False  # the heartbeat connection was found closed since our last request
        self._soon = False  # heartbeat_soon() came: the next heartbeat wait ends at once

    @property
    def watching(self) -> bool:
        """Whether finding the heartbeat connection closed would make us heartbeat at once (a
        driver that has to look at the connection looks only then)."""
        return (self.phase is Phase.HEARTBEATING and not self._in_flight and self._watch
                and not self._closed)

    def next_deadline_ms(self) -> int | None:
        """When tick() next has work (None: only an answer or another event can change
        anything)."""
        if self._in_flight or self.phase in (Phase.IDLE, Phase.REFUSED):
            return None
        return self._due_ms

    # ------------------------------------------------------------------------------- events
    def start(self, now_ms: int) -> list[Action]:
        assert self.phase is Phase.IDLE, self.phase
        return self._register()

    def registration_answered(self, now_ms: int, error_code: int,
                              broker_epoch: int) -> list[Action]:
        self._answered(Phase.REGISTERING)
        if error_code:
            self.phase = Phase.REFUSED
            return [Refused(error_code)]
        self.registrations_total += 1
        self.epochs.registration_answered(broker_epoch)
        self.phase = Phase.HEARTBEATING
        self._backoff_ms, self._failing = BACKOFF_MS_MIN, 0
        return [Registered(broker_epoch), *self._wait(now_ms, self.heartbeat_interval_ms, True)]

    def registration_failed(self, now_ms: int, why: str) -> list[Action]:
        self._answered(Phase.REGISTERING)
        if self._tries % REGISTRATION_LOG_EVERY == 1:
            log.warning("broker %d: registration failed (try %d), retrying: %s",
                        self.broker_id, self._tries, why)
        return self._wait(now_ms, self._back_off(), watch=False)

    def heartbeat_answered(self, now_ms: int, error_code: int) -> list[Action]:
        self._answered(Phase.HEARTBEATING)
        if self._failing:
            log.info("broker %d: heartbeating again after %d failed tries", self.broker_id,
                     self._failing)
        self._backoff_ms, self._failing = BACKOFF_MS_MIN, 0
        self.heartbeats_total += 1
        if error_code == ErrorCode.STALE_BROKER_EPOCH:
            why = f"the controller says generation {self.epochs.generation} is over"
            log.warning("broker %d: %s (session expired); stop leading, register again",
                        self.broker_id, why)
            self.epochs.generation_over()  # control requests wait for the next answer
            return [GenerationOver(why), *self._register()]
        if error_code:
            log.warning("heartbeat answered %s", name_of(error_code))
        return self._wait(now_ms, self.heartbeat_interval_ms, watch=True)

    def heartbeat_failed(self, now_ms: int, why: str) -> list[Action]:
        self._answered(Phase.HEARTBEATING)
        self._failing += 1
        if self._failing == 1:
            log.warning("broker %d: heartbeat failed, retrying with backoff: %s",
                        self.broker_id, why)
        wait_ms = min(self._back_off(), self.heartbeat_interval_ms)
        return self._wait(now_ms, wait_ms, watch=False)

    def heartbeat_soon(self, now_ms: int) -> list[Action]:
        """Heartbeat now rather than at the next interval (what it lists changed); after the
        request in flight, or the registration, if there is one."""
        self._soon = True
        if self.phase is Phase.HEARTBEATING and not self._in_flight:
            return self._send()
        return []

    def connection_closed(self, now_ms: int) -> list[Action]:
        """The driver found the heartbeat connection closed (the next request reopens it)."""
        watching = self.watching
        self._closed = True
        if watching:
            return self._reconnect()
        return []

    def tick(self, now_ms: int) -> list[Action]:
        deadline = self.next_deadline_ms()
        if deadline is None or now_ms < deadline:
            return []
        return self._send()

    # ----------------------------------------------------------------------------- inside
    def _answered(self, phase: Phase) -> None:
        """An answer or failure may only come for the request in flight."""
        assert self._in_flight and self.phase is phase, (self.phase, self._in_flight, phase)
        self._in_flight = False

    def _register(self) -> list[Action]:
        self.phase = Phase.REGISTERING
        self._backoff_ms, self._tries = BACKOFF_MS_MIN, 0
        return self._send()

    def _back_off(self) -> int:
        """This retry's wait; the next one's doubles, up to BACKOFF_MS_MAX."""
        wait_ms = self._backoff_ms
        self._backoff_ms = min(wait_ms * 2, BACKOFF_MS_MAX)
        return wait_ms

    def _wait(self, now_ms: int, wait_ms: int, watch: bool) -> list[Action]:
        """Until the next request, wait_ms; a heartbeat wait ends at once if heartbeat_soon()
        came meanwhile or (watch) the connection was found closed."""
        self._due_ms, self._watch = now_ms + wait_ms, watch
        if self.phase is not Phase.HEARTBEATING:
            return []
        if self._soon:
            return self._send()
        if watch and self._closed:  # found closed while the last heartbeat was on its way
            return self._reconnect()
        return []

    def _reconnect(self) -> list[Action]:
        self.reconnects_total += 1
        log.info("broker %d: the connection to the controller closed; reconnecting and "
                 "heartbeating at once", self.broker_id)
        return self._send()

    def _send(self) -> list[Action]:
        self._in_flight, self._closed = True, False
        if self.phase is Phase.REGISTERING:
            self._tries += 1
            return [Register()]
        self._soon = False
        return [Heartbeat(self.epochs.generation)]
