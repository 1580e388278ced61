"""Leader elections: who leads a partition next, and with which ISR, as pure functions.

Theory of operation
-------------------
An election reads one partition's state (`model.Partition`: its replicas in assignment order, its
ISR, KIP-966's eligible leader replicas and last known ELR) and asks `eligible(replica)` whether a
replica may lead now (its broker is alive and not shutting down, and its log there is not
offline) and `live(broker)` whether a broker has a live generation. It answers a `Choice`: the new
leader (NO_LEADER: none), where it comes from, and the ISR it leads with. Nothing changes here and
nothing is read but what is passed: the state machine (state.py) carries a choice out (it logs,
counts and emits the partition's new state, or for an unclean choice first asks the live replicas
for their log ends, unclean_recovery.py).

Where a leader comes from, cleanest first (`pick_leader`):
1. the ISR: its first eligible member in assignment order, leading with the ISR's live members;
2. the ELR (KIP-966): members that left the ISR while it was below min.insync.replicas still hold
   everything committed; the first eligible one leads alone;
3. the last known ELR, when ISR and ELR are both empty because every member restarted uncleanly:
   the first eligible of them leads alone (what it lost in its crash is lost);
4. unclean, only where allowed (the topic's unclean.leader.election.enable, or an admin's unclean
   election): the first eligible replica leads alone.
With none, the partition goes offline and keeps its ISR, so that its last member can return and
lead with nothing lost. A controlled shutdown hands leadership to the ISR only. A preferred
election (ElectLeaders type 0, the automatic rebalance) gives it to the first replica when that
one is eligible and in the ISR, the ISR unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from epochlog.protocol.error_codes import ErrorCode

from .model import NO_LEADER, Partition

ELECTION_PREFERRED, ELECTION_UNCLEAN = 0, 1  # ElectLeaders' election_type
# Where a leader comes from (pick_leader); NOWHERE: no replica may lead.
FROM_ISR, FROM_ELR, FROM_LAST_KNOWN, UNCLEAN, NOWHERE = "isr", "elr", "last known", "unclean", ""
# Clean elections from outside the ISR (KIP-966), by source: the counter, the set named in the log
# line, and why.
OUTSIDE_ISR = {
    FROM_ELR: ("elections_from_elr", "eligible leader replicas",
               "no live in-sync replica (the ELR holds everything committed)"),
    FROM_LAST_KNOWN: ("elections_from_last_known_elr", "last known ELR",
                      "every in-sync and eligible replica restarted uncleanly (what the new "
                      "leader lost in its crash is lost)"),
}

Eligible = Callable[[int], bool]  # may this replica lead (and be in the ISR) now?
Live = Callable[[int], bool]  # has this broker a live generation?


@dataclass(frozen=True)
class Choice:
    leader: int  # NO_LEADER: none may lead
    source: str  # FROM_ISR, FROM_ELR, FROM_LAST_KNOWN, UNCLEAN or NOWHERE
    isr: tuple[int, ...]  # the ISR it leads with (none: the ISR kept)


def pick_leader(p: Partition, eligible: Eligible, *, exclude: int | None, unclean: bool,
                elr: bool = True) -> tuple[int, str]:
    """(leader, source): from the ISR, then (elr) the ELR, then, when ISR and ELR are both
    empty, the last known ELR; then (unclean) any replica; each the first eligible in order
    (the last known ELR's own order: a former ISR member first). exclude never leads."""
    for r in p.replicas:
        if r != exclude and r in p.isr and eligible(r):
            return r, FROM_ISR
    if elr:
        for r in p.replicas:
            if r != exclude and r in p.elr and eligible(r):
                return r, FROM_ELR
        if not p.isr and not p.elr:  # every eligible replica restarted uncleanly
            for r in p.last_known_elr:
                if r != exclude and eligible(r):
                    return r, FROM_LAST_KNOWN
    if unclean:
        for r in p.replicas:
            if r != exclude and eligible(r):
                return r, UNCLEAN
    return NO_LEADER, NOWHERE


def isr_with_leader(p: Partition, leader: int, leaving: int | None, live: Live
                    ) -> tuple[int, ...]:
    """The ISR once `leader` takes over: members that are still live, minus `leaving`."""
    return tuple(r for r in p.isr if r == leader or (r != leaving and live(r)))


def after_leader_loss(p: Partition, eligible: Eligible, live: Live, *, unclean: bool) -> Choice:
    """The leader failed (or the partition is offline and a replica may have come back): the
    ISR, then the ELR and the last known ELR, then (unclean) any replica. None: the ISR kept."""
    failed = p.leader if p.leader != NO_LEADER else None
    new, source = pick_leader(p, eligible, exclude=failed, unclean=unclean)
    return _taking_over(p, new, source, failed, live)


def at_shutdown(p: Partition, eligible: Eligible, live: Live, leaving: int) -> Choice:
    """Controlled shutdown of `leaving`, the leader: another ISR member only (nothing else is as
    clean, and the leader is still there to wait for). None: the ISR kept."""
    new, source = pick_leader(p, eligible, exclude=leaving, unclean=False, elr=False)
    return _taking_over(p, new, source, leaving, live)


def unclean_by_admin(p: Partition, eligible: Eligible, live: Live) -> Choice:
    """ElectLeaders type 1, for a partition with no eligible leader: as after a leader loss, but
    unclean allowed whatever the topic says."""
    new, source = pick_leader(p, eligible, exclude=None, unclean=True)
    return _taking_over(p, new, source, None, live)


def _taking_over(p: Partition, new: int, source: str, leaving: int | None, live: Live) -> Choice:
    """The ISR `new` leads with: an ISR member with the ISR's live members (minus `leaving`);
    any other alone (the ELR, the last known ELR, unclean). No leader: the ISR kept."""
    if new == NO_LEADER:
        return Choice(NO_LEADER, NOWHERE, p.isr)
    if source == FROM_ISR:
        return Choice(new, source, isr_with_leader(p, new, leaving, live))
    return Choice(new, source, (new,))


def preferred_refusal(p: Partition, eligible: Eligible) -> tuple[int, str | None]:
    """Why the first replica cannot take over leadership (error, message), or (0, None) when
    it can: it is eligible and in the ISR, so nothing committed can be lost."""
    preferred = p.replicas[0]
    if p.leader == preferred:
        return ErrorCode.ELECTION_NOT_NEEDED, "the preferred replica already leads"
    if preferred not in p.isr or not eligible(preferred):
        return ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE, \
            f"preferred replica {preferred} is not alive and in the ISR"
    return 0, None
