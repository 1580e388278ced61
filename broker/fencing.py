"""Fencing rules: which requests a broker refuses because they name an outdated epoch.

Two kinds, both pure functions of numbers so the simulation and the handlers share them:

- Control requests (KIP-380, docs/control-plane.md): `ControlEpochs.admit` checks, before anything
  else, the broker epoch (older than our generation: STALE_BROKER_EPOCH, meant for a previous
  process or session of ours) and then the controller epoch (older than the highest accepted:
  STALE_CONTROLLER_EPOCH, from a controller that has been replaced).
- Client requests (KIP-320, KIP-359): `leader_epoch_error` compares the leader epoch a client
  believes current with the partition's: older -> FENCED_LEADER_EPOCH, newer ->
  UNKNOWN_LEADER_EPOCH (we have not heard of it yet), -1 -> no check.

`ControlEpochs` holds the broker's generation. Two writers raise it (the controller link when a
registration is answered, a control request that names a newer one) and both only ever take the
maximum, so neither can undo the other; everything runs on the one event loop.

When a control request may be judged at all (docs/control-plane.md "Before the registration
answer"): only while the generation is *confirmed*, that is, the controller has answered a
registration of this process and has not since said the generation is over
(`registration_answered` / `generation_over`). A request that arrives unconfirmed waits (the
handlers' job, bounded) and is then judged against the confirmed generation. Why: before our first
registration answer our generation is -1, and a request meant for the previous process's
generation names a broker epoch above -1; admitting it as "newer than ours" made a delta
LeaderAndIsr of the dead process the first LeaderAndIsr of ours, and `forget_unlisted` deleted
partitions it did not list (simulation seeds 3, 847, 923). Once confirmed, a broker epoch newer
than ours still means a registration answer of ours is on its way, and is adopted.
"""

from __future__ import annotations

import logging

from epochlog.protocol.error_codes import ErrorCode

log = logging.getLogger("epochlog.broker")

NO_EPOCH = -1


class ControlEpochs:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.generation = NO_EPOCH  # our broker epoch; -1 until the first registration
        self.controller_epoch = NO_EPOCH  # the highest controller epoch accepted
        self.controller_id = NO_EPOCH
        # The controller answered a registration of this process with `generation` and has not
        # since said it is over: control requests may be judged (see the module docstring).
        self.confirmed = False
        self.refused: dict[str, int] = {}  # "STALE_BROKER_EPOCH" -> count, for metrics
        self.held_total = 0  # control requests that waited for a registration answer
        self.unanswered_total = 0  # ... and were left unanswered: none came within the bound

    def registration_answered(self, broker_epoch: int) -> None:
        """The controller gave this process the generation broker_epoch: confirmed."""
        self.observe_generation(broker_epoch, "registered")
        self.confirmed = True

    def generation_over(self) -> None:
        """The controller said our generation is over (a heartbeat answered
        STALE_BROKER_EPOCH): control requests wait again until the next registration answer."""
        self.confirmed = False

    def must_wait(self) -> bool:
        """Whether a control request arriving now must wait for a registration answer before
        `admit` may judge it."""
        return not self.confirmed

    def observe_generation(self, broker_epoch: int, why: str) -> bool:
        """Adopt broker_epoch if it is newer; True (and one log line) when it was."""
        if broker_epoch <= self.generation:
            return False
        old, self.generation = self.generation, broker_epoch
        log.info("broker %d: generation %d -> %d (%s)", self.broker_id, old, broker_epoch, why)
        return True

    def admit(self, what: str, controller_id: int, controller_epoch: int,
              broker_epoch: int) -> int:
        """0 to apply the control request, else the top-level error to answer (and do nothing).
        Call only when not `must_wait()`. A broker epoch newer than our confirmed generation
        means a registration answer of ours is still on its way."""
        if broker_epoch < self.generation:
            return self._refuse(ErrorCode.STALE_BROKER_EPOCH, what,
                                f"broker epoch {broker_epoch} is older than our generation "
                                f"{self.generation}")
        if controller_epoch < self.controller_epoch:
            return self._refuse(ErrorCode.STALE_CONTROLLER_EPOCH, what,
                                f"controller epoch {controller_epoch} is older than "
                                f"{self.controller_epoch}")
        self.observe_generation(broker_epoch, f"named by {what}")
        if controller_epoch > self.controller_epoch:
            log.info("broker %d: controller %d epoch %d -> %d", self.broker_id, controller_id,
                     self.controller_epoch, controller_epoch)
            self.controller_epoch = controller_epoch
        self.controller_id = controller_id
        return 0

    def still_admits(self, what: str, generation: int, controller_epoch: int) -> int:
        """0 if a control request admitted under (generation, controller_epoch) may go on being
        applied (one applied in slices, with awaits between them: handlers/leader_and_isr.py),
        else the top-level error to answer for the rest: our generation ended or moved on, or
        a newer controller spoke meanwhile."""
        if not self.confirmed or self.generation != generation:
            return self._refuse(ErrorCode.STALE_BROKER_EPOCH, what,
                                f"generation {generation} ended while it was applied")
        if self.controller_epoch != controller_epoch:
            return self._refuse(ErrorCode.STALE_CONTROLLER_EPOCH, what,
                                f"controller epoch {self.controller_epoch} spoke while one of "
                                f"epoch {controller_epoch} was applied")
        return 0

    def _refuse(self, error: ErrorCode, what: str, why: str) -> int:
        self.refused[error.name] = self.refused.get(error.name, 0) + 1
        # A request for an older generation of ours is routine around every bounce and every
        # controller restart (sent before the controller learned of our new one; it drops it
        # when refused), so no warning for a person, as Kafka logs it at INFO; one from an
        # older controller means a zombie controller: a warning.
        level = logging.INFO if error == ErrorCode.STALE_BROKER_EPOCH else logging.WARNING
        log.log(level, "broker %d: fenced %s: %s (%s)", self.broker_id, what, why, error.name)
        return int(error)


def leader_epoch_error(requested: int, current: int) -> int:
    """KIP-320 fencing of a client's CurrentLeaderEpoch against the partition's leader epoch."""
    if requested == NO_EPOCH or requested == current:
        return 0
    if requested < current:
        return ErrorCode.FENCED_LEADER_EPOCH
    return ErrorCode.UNKNOWN_LEADER_EPOCH
