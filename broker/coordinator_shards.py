"""`Shards`: the partitions of a coordinator's internal topic (`__consumer_offsets` for groups,
`__transaction_state` for transactions) that we lead, each at one leader epoch: the shard
lifecycle both coordinators share, sans-IO (no I/O, no clock, no asyncio).

Theory of operation
-------------------
A coordinator keeps a shard per partition of its topic we lead, for the leader epoch we lead it
at; what a shard holds (`H`) is the coordinator's (groups and their pending transactional
offsets; a TxnState). The driver tells the machine what happened and carries out what it answers:

    event in                                      the shard                  out
    partition_applied(i, epoch)  we lead i        a new one, LOADING         Load(i, epoch)
                                 at a new epoch   (the older one unloaded)   (and Unload)
    partition_applied(i, None)   follower,        gone                       Unload(shard, why)
                                 offline, gone
    leadership_lost(i)           a lookup or a    gone                       Unload(shard, why)
                                 timer found us no longer leading at its epoch (our generation
                                 ended without a LeaderAndIsr: Partition.resign)
    loaded(shard, ...)           its log replayed LOADING -> ACTIVE
    unload_all(why)              the broker stops gone, each                 Unload

`Load` asks the driver to read the partition's log from its start to its end into the shard (the
coordinator's replay) and then report it loaded, unless `loading(i, epoch)` says it is no longer
wanted. `Unload` goes to the coordinator, which answers what the shard's requests still wait for.
`lookup(i)` answers a request: the ACTIVE shard, or NOT_COORDINATOR (we hold none: the client
looks the coordinator up again) or COORDINATOR_LOAD_IN_PROGRESS (retriable). Checking leadership
is the driver's (it asks the replica manager): it reports a loss (`leadership_lost`) before a
lookup and on its timer, so that a lookup itself changes nothing.

A load and an unload each log one line, with how many the shard holds, and why.

`Append` and `Resolve` are the actions both coordinators' machines give their drivers: append
records to a shard's partition and report back; answer the request parked under a token.
`ShardedCore` is what both machines do alike around their shards: the lifecycle's events, and
each append's continuation kept under its id until `appended` comes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from epochlog.protocol.error_codes import ErrorCode as E

log = logging.getLogger("epochlog.broker")

H = TypeVar("H")  # what a shard holds
T = TypeVar("T")  # a request's answer
A = TypeVar("A")  # a core's actions
C = TypeVar("C")  # what a core does once an append ends

Records = Sequence[tuple[bytes, bytes | None]]  # (key, value); a None value is a tombstone


@dataclass(eq=False)
class Shard(Generic[H]):
    """Our leadership of one partition, at one leader epoch, and what it holds."""

    index: int
    leader_epoch: int
    held: H
    loading: bool = True
    replayed: int = 0  # records read back while loading


# ----------------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class Load:
    """Read partition `index`'s log from its start to its end into the shard, then report
    `loaded` (unless `Shards.loading(index, leader_epoch)` turns None meanwhile: stop)."""

    index: int
    leader_epoch: int


@dataclass(frozen=True)
class Unload(Generic[H]):
    """The shard is gone (for the coordinator: answer what its requests wait for)."""

    shard: Shard[H]
    why: str


@dataclass(frozen=True)
class Append:
    """Append `records` to partition `index` led at `leader_epoch` (in the transaction of
    `producer`, (id, epoch), if given), wait until they are replicated, and report
    `appended(append_id, error, offset of the first record)`; `errors` maps the append's error
    codes to the coordinator's."""

    append_id: int
    index: int
    leader_epoch: int
    records: Records
    errors: Mapping[int, int]
    producer: tuple[int, int] | None = None


@dataclass(frozen=True)
class Resolve(Generic[T]):
    """Answer the request parked under `token` with `result`."""

    token: int
    result: T


# ----------------------------------------------------------------------------------- machine
class Shards(Generic[H]):
    def __init__(self, topic: str, noun: str, new: Callable[[], H],
                 count: Callable[[H], int]) -> None:
        self.topic = topic
        self.noun = noun  # what the log lines count: "groups", "transactional ids"
        self.new = new
        self.count = count
        self._by_index: dict[int, Shard[H]] = {}

    # ---------------------------------------------------------------------------- events
    def partition_applied(self, index: int, leader_epoch: int | None
                          ) -> list[Load | Unload[H]]:
        """The replica manager applied a state of partition index: we lead it at leader_epoch,
        or (None) we do not lead it (follower, offline, gone)."""
        shard = self._by_index.get(index)
        if leader_epoch is None:
            return [] if shard is None else [self._unload(shard, "no longer the leader")]
        if shard is not None and shard.leader_epoch == leader_epoch:
            return []  # an ISR change
        out: list[Load | Unload[H]] = []
        if shard is not None:
            out.append(self._unload(shard, "a new leader epoch"))
        self._by_index[index] = Shard(index, leader_epoch, self.new())
        out.append(Load(index, leader_epoch))
        return out

    def leadership_lost(self, index: int) -> list[Unload[H]]:
        shard = self._by_index.get(index)
        return [] if shard is None else [self._unload(shard, "leadership lost")]

    def unload_all(self, why: str) -> list[Unload[H]]:
        return [self._unload(shard, why) for shard in list(self._by_index.values())]

    def loaded(self, shard: Shard[H], log_start: int, log_end: int, took_ms: int) -> None:
        """The shard's log (offsets log_start to log_end) is replayed into it: ACTIVE."""
        assert shard.loading and self.current(shard), shard
        shard.loading = False
        log.info("%s-%d: loaded %d %s from %d records (offsets %d-%d) at leader epoch %d in %d "
                 "ms", self.topic, shard.index, self.count(shard.held), self.noun, shard.replayed,
                 log_start, log_end, shard.leader_epoch, took_ms)

    def _unload(self, shard: Shard[H], why: str) -> Unload[H]:
        del self._by_index[shard.index]
        log.info("%s-%d: unloaded %d %s (leader epoch %d): %s", self.topic, shard.index,
                 self.count(shard.held), self.noun, shard.leader_epoch, why)
        return Unload(shard, why)

    # --------------------------------------------------------------------------- queries
    def lookup(self, index: int) -> Shard[H] | int:
        """A request's shard, or the error to answer it with."""
        shard = self._by_index.get(index)
        if shard is None:
            return E.NOT_COORDINATOR
        if shard.loading:
            return E.COORDINATOR_LOAD_IN_PROGRESS
        return shard

    def get(self, index: int) -> Shard[H] | None:
        return self._by_index.get(index)

    def loading(self, index: int, leader_epoch: int) -> Shard[H] | None:
        """The shard being loaded for (index, leader_epoch), if it still is."""
        shard = self._by_index.get(index)
        if shard is None or shard.leader_epoch != leader_epoch or not shard.loading:
            return None
        return shard

    def current(self, shard: Shard[H]) -> bool:
        """Whether shard is still ours (an append that took a while checks before it applies)."""
        return self._by_index.get(shard.index) is shard

    def led(self) -> list[tuple[int, int]]:
        """(index, leader epoch) of every shard: what the driver checks we still lead."""
        return [(s.index, s.leader_epoch) for s in self._by_index.values()]

    def __iter__(self) -> Iterator[Shard[H]]:
        return iter(list(self._by_index.values()))

    def __len__(self) -> int:
        return len(self._by_index)


class ShardedCore(Generic[H, A, C]):
    """The part of a coordinator's core both share: its shards' lifecycle events (an unloaded
    shard's answers are the core's `_unloaded`) and its appends' continuations."""

    def __init__(self, shards: Shards[H]) -> None:
        self.shards = shards
        self._appending: dict[int, C] = {}
        self._next_append = 0

    def partition_applied(self, index: int, leader_epoch: int | None) -> list[Load | A]:
        """The replica manager applied a state of partition index (leader_epoch None: we do
        not lead it)."""
        return self._changed(self.shards.partition_applied(index, leader_epoch))

    def leadership_lost(self, index: int) -> list[Load | A]:
        """The driver found that we no longer lead partition index at its shard's epoch."""
        return self._changed(self.shards.leadership_lost(index))

    def unload_all(self, why: str) -> list[Load | A]:
        return self._changed(self.shards.unload_all(why))

    def _changed(self, changes: Sequence[Load | Unload[H]]) -> list[Load | A]:
        actions: list[Load | A] = []
        for change in changes:
            if isinstance(change, Load):
                actions.append(change)
            else:
                actions += self._unloaded(change.shard)
        return actions

    def _unloaded(self, shard: Shard[H]) -> list[A]:
        """The shard is gone: what its requests are answered now."""
        return []

    def _append(self, shard: Shard[H], records: Records, errors: Mapping[int, int], then: C,
                producer: tuple[int, int] | None = None) -> Append:
        self._next_append += 1
        self._appending[self._next_append] = then
        return Append(self._next_append, shard.index, shard.leader_epoch, records, errors,
                      producer)

    def _continuation(self, append_id: int) -> C:
        """What to do now that the append append_id ended (once)."""
        return self._appending.pop(append_id)
