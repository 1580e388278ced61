"""A consumer's per-partition fetch state, and the decisions made on each answer: sans-IO.

Theory of operation
-------------------
Each assigned partition has one `PartitionState`. Its `state` says what must happen next:

    RESET     no usable position: ask the leader for the earliest or latest offset (ListOffsets)
    VALIDATE  a position whose epoch must be checked against the leader's log (OffsetForLeaderEpoch,
              KIP-320) before fetching: after a leader change, a FENCED_LEADER_EPOCH, a seek with
              an epoch, or an out-of-range answer from a follower above its log start (KIP-392
              case 4)
    FETCH     fetch from `fetch_offset`, at the leader or at the preferred read replica
    BLOCKED   the user must act (LogTruncationError or an out-of-range offset with
              auto_offset_reset "none", or no position at all): nothing is sent until a seek

Two offsets: `position` (with `position_epoch`, the leader epoch of the last record handed to the
application) is what poll() has returned up to; `fetch_offset` runs ahead of it by what is buffered
(prefetched, not yet returned). Anything that moves the position from outside the record stream
(seek, reset, validation, truncation) drops the buffered data and bumps `generation`, and an
answer to a request sent under an older generation is ignored: a fetch that was in flight when the
user seeked can never deliver records from the old place.

The decisions (`on_fetch_error`, `on_validation`, `on_metadata`) are plain functions of the state
and an answer, returning what the driver (client.consumer) must do; they never do I/O and take the
clock as an argument, so they can be tested and simulated alone.

Truncation (KIP-320): the leader answers OffsetForLeaderEpoch(position_epoch) with the end offset
of the largest epoch <= position_epoch in its log. An end offset below our position, or a smaller
epoch (its end then lies below our position too), means the records we read past that offset are
gone: the divergence point is (end_offset, epoch). With an automatic reset policy the position
moves exactly there; with "none" a LogTruncationError carries it to the user. An undefined answer
(-1, -1: the leader knows no epoch that old) leaves no exact point: the reset policy applies, or
with "none" the error carries the position itself.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import NamedTuple

from epochlog.protocol.error_codes import ErrorCode, name_of

from .retriable import STALE_LEADER
from .types import TopicPartition

E = ErrorCode
NO_EPOCH = -1
EARLIEST = "earliest"
LATEST = "latest"
NONE = "none"
RESET_POLICIES = (EARLIEST, LATEST, NONE)


class State(enum.Enum):
    RESET = "reset"
    VALIDATE = "validate"
    FETCH = "fetch"
    BLOCKED = "blocked"


@dataclass
class PartitionState:
    tp: TopicPartition
    state: State = State.RESET
    reset_policy: str = LATEST  # what RESET does: earliest or latest (never none)
    position: int = -1
    position_epoch: int = NO_EPOCH
    fetch_offset: int = -1
    leader: int = -1  # as last seen in metadata
    leader_epoch: int = NO_EPOCH  # sent as CurrentLeaderEpoch
    preferred_replica: int = -1  # KIP-392: the replica to read from; -1 the leader
    preferred_until: float = 0.0  # monotonic time after which we go back to the leader
    generation: int = 0
    not_before: float = 0.0  # backoff: no request for this partition before this time
    in_flight: bool = False  # a fetch, reset or validation for it is on the wire
    paused: bool = False
    awaiting_metadata_epoch: int = NO_EPOCH  # wait for metadata newer than this (UNKNOWN epoch)

    def moved(self, state: State) -> None:
        """The position is set from outside the record stream: forget buffered data (the
        driver drops it on the generation change) and whatever is in flight."""
        self.state = state
        self.fetch_offset = self.position
        self.generation += 1
        self.in_flight = False

    def seek(self, offset: int, epoch: int, validate: bool) -> None:
        """Move to offset, whose previous record has leader epoch epoch (-1: unknown). With an
        epoch newer than the leader epoch our metadata shows (a committed offset written under a
        leader we have not heard of yet), validation waits for metadata at least that new: a
        leader we know as older, or a lagging broker's view, cannot judge it (KIP-320)."""
        self.position, self.position_epoch = offset, epoch
        self.moved(State.VALIDATE if validate and epoch >= 0 else State.FETCH)
        if epoch > self.leader_epoch:
            self.awaiting_metadata_epoch = epoch - 1

    def reset(self, policy: str) -> None:
        self.reset_policy = policy
        self.moved(State.RESET)

    def read_from(self, now_s: float) -> int:
        """The broker to fetch from: the preferred read replica while it holds, else the leader."""
        if self.preferred_replica >= 0 and now_s < self.preferred_until:
            return self.preferred_replica
        self.preferred_replica = -1
        return self.leader

    def fetchable(self, now_s: float) -> bool:
        return (self.state is State.FETCH and self.ready(now_s)
                and self.awaiting_metadata_epoch == NO_EPOCH)

    def ready(self, now_s: float) -> bool:
        """No request in flight, not paused, past its backoff, and a leader known."""
        return (not self.in_flight and not self.paused and now_s >= self.not_before
                and self.leader >= 0)


class Action(NamedTuple):
    """What the driver must do after a decision."""
    refresh_metadata: bool = False
    backoff: bool = False
    # set when the user must hear of it: ("truncation", offset, epoch) or ("out_of_range", ...)
    error: tuple[str, int, int] | None = None
    log: str | None = None




def on_fetch_error(st: PartitionState, code: int, from_replica: int, log_start_offset: int,
                   high_watermark: int, auto_reset: str, validation_supported: bool,
                   now_s: float) -> Action:
    """A fetch for st answered code (non-zero), from broker from_replica."""
    from_follower = from_replica != st.leader
    if from_follower or code in STALE_LEADER or code == E.FENCED_LEADER_EPOCH:
        st.preferred_replica = -1  # back to the leader on any error from a follower
    if code == E.OFFSET_OUT_OF_RANGE:
        return _out_of_range(st, from_follower, log_start_offset, high_watermark, auto_reset,
                             validation_supported, now_s)
    if code == E.FENCED_LEADER_EPOCH:
        # Our leader epoch is old: newer metadata will show the new leader, then we validate.
        st.awaiting_metadata_epoch = st.leader_epoch
        if validation_supported and st.position_epoch >= 0:
            st.moved(State.VALIDATE)
        return Action(refresh_metadata=True, backoff=True)
    if code == E.UNKNOWN_LEADER_EPOCH:
        # The broker is behind our metadata: wait a little and ask again.
        return Action(refresh_metadata=True, backoff=True)
    if code == E.OFFSET_NOT_AVAILABLE:
        return Action(backoff=True)  # KIP-392 case 1/2 or a new leader without its high watermark
    if code in STALE_LEADER:
        return Action(refresh_metadata=True, backoff=True)
    return Action(refresh_metadata=True, backoff=True,
                  log=f"{st.tp.topic}-{st.tp.partition}: fetch failed with {name_of(code)}; "
                      "retrying")


def _out_of_range(st: PartitionState, from_follower: bool, log_start_offset: int,
                  high_watermark: int, auto_reset: str, validation_supported: bool,
                  now_s: float) -> Action:
    offset = st.fetch_offset
    too_small = 0 <= log_start_offset and offset < log_start_offset
    if from_follower and not too_small and validation_supported and st.position_epoch >= 0:
        # KIP-392 case 4: the follower may just be behind; the leader decides.
        st.moved(State.VALIDATE)
        return Action(log=f"{st.tp.topic}-{st.tp.partition}: offset {offset} out of range on a "
                          "follower; validating it with the leader")
    if auto_reset == NONE:
        return Action(error=("out_of_range", offset, st.position_epoch))
    if from_follower and too_small and auto_reset == EARLIEST:
        # KIP-392 case 3: the earliest offset of the replica being read (its log start, which
        # its answer carries), so we are not bounced between leader and follower.
        st.position, st.position_epoch = log_start_offset, NO_EPOCH
        st.moved(State.FETCH)
        return Action(log=f"{st.tp.topic}-{st.tp.partition}: offset {offset} below the "
                          f"replica's log start; reset to its earliest, {log_start_offset}")
    st.reset(auto_reset)
    return Action(log=f"{st.tp.topic}-{st.tp.partition}: offset {offset} out of range "
                      f"[{log_start_offset}, {high_watermark}]; resetting to {auto_reset}")


def on_list_offsets_error(st: PartitionState, code: int) -> Action:
    """A reset's ListOffsets answered code (non-zero): find the leader again, or just wait."""
    if code in STALE_LEADER or code in (E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH):
        return Action(refresh_metadata=True, backoff=True)
    return Action(backoff=True, log=f"{st.tp.topic}-{st.tp.partition}: looking up the "
                                    f"{st.reset_policy} offset failed with {name_of(code)}; "
                                    "retrying")


def on_validation(st: PartitionState, code: int, end_epoch: int, end_offset: int,
                  auto_reset: str) -> Action:
    """OffsetForLeaderEpoch answered (code, epoch, end offset) for st's position."""
    if code == E.FENCED_LEADER_EPOCH or code in STALE_LEADER:
        st.awaiting_metadata_epoch = st.leader_epoch if code == E.FENCED_LEADER_EPOCH else -1
        return Action(refresh_metadata=True, backoff=True)
    if code == E.UNKNOWN_LEADER_EPOCH:
        return Action(refresh_metadata=True, backoff=True)
    if code == E.OFFSET_NOT_AVAILABLE:
        return Action(backoff=True)
    if code != 0:
        return Action(refresh_metadata=True, backoff=True)
    name = f"{st.tp.topic}-{st.tp.partition}"
    if end_offset < 0 or end_epoch < 0:
        if auto_reset == NONE:
            return Action(error=("truncation", st.position, st.position_epoch))
        st.reset(auto_reset)
        return Action(log=f"{name}: the leader knows no epoch at or below {st.position_epoch}; "
                          f"truncation point unknown, resetting to {auto_reset}")
    if end_offset < st.position:
        if auto_reset == NONE:
            return Action(error=("truncation", end_offset, end_epoch))
        old = st.position
        st.position, st.position_epoch = end_offset, end_epoch
        st.moved(State.FETCH)
        return Action(log=f"{name}: log truncation detected: read up to offset {old} but the "
                          f"leader's epoch {end_epoch} ends at {end_offset}; position reset to "
                          f"{end_offset}")
    st.state = State.FETCH
    return Action()


def on_metadata(st: PartitionState, leader: int, leader_epoch: int,
                validation_supported: bool) -> bool:
    """Metadata shows (leader, leader_epoch) for st; whether the position must be validated
    (the leader changed since we last fetched: KIP-320)."""
    if leader_epoch < st.leader_epoch and leader_epoch >= 0:
        return False  # the cache keeps the newest view; an older one changes nothing
    changed = leader_epoch != st.leader_epoch or leader != st.leader
    first = st.leader_epoch == NO_EPOCH and st.leader < 0
    st.leader, st.leader_epoch = leader, leader_epoch
    if leader_epoch > st.awaiting_metadata_epoch:
        st.awaiting_metadata_epoch = NO_EPOCH
    if not changed or first or leader < 0:
        return False
    if st.state is State.FETCH and validation_supported and st.position_epoch >= 0:
        st.moved(State.VALIDATE)
        return True
    return False


@dataclass
class ConsumerCounters:
    """What a user can read (Consumer.metrics()) and export to Prometheus."""
    records_received: int = 0
    bytes_received: int = 0
    fetch_requests: int = 0
    retries: int = 0
    fenced_leader_epoch: int = 0
    unknown_leader_epoch: int = 0
    truncations_detected: int = 0
    offset_resets: int = 0
    validations: int = 0
    corrupt_batches: int = 0  # batches that failed their CRC or structure check
    read_replica: dict[TopicPartition, int] = field(default_factory=dict)


def monotonic() -> float:
    return time.monotonic()
